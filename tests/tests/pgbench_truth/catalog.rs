//! A damaged system catalog: PostgreSQL starts, but a catalog page verify needs
//! cannot be read. That is damage the stack did, a finding naming the relation
//! (exit 1), never "could not verify" (exit 2), which a campaign would count as an
//! invalid cut and drop from its statistics.

use super::*;

#[test]
fn a_damaged_catalog_index_is_a_finding_naming_it_not_could_not_verify() {
    let Some((_dir, mut pg, l)) = setup(
        "a_damaged_catalog_index_is_a_finding_naming_it_not_could_not_verify",
        true,
    ) else {
        return;
    };
    pg.set("autovacuum", "off");
    let dsn = pg.conninfo_db("bench");
    let run1 = run(&l, &pg, "50");
    let index = "pg_attribute_relid_attnum_index";
    let file = pg.psql_in("bench", &format!("SELECT pg_relation_filepath('{index}')"));
    let blocks: u64 = pg
        .psql_in(
            "bench",
            &format!("SELECT pg_relation_size('{index}') / current_setting('block_size')::int"),
        )
        .parse()
        .unwrap();
    assert!(blocks >= 2, "{blocks}");
    pg.stop();
    // Every page below the metapage fails its checksum: any lookup of a relation's
    // columns that is not cached meets one.
    for b in 1..blocks {
        pg.flip_byte(&file, b, 100);
    }
    pg.start();
    let (code, v, err) = verify(&l, &run1, &dsn, &["--no-amcheck"]);
    assert_eq!(code, 1, "{err}\n{v:#}");
    assert_eq!(
        v["summary"],
        json!(
            "FAIL: 1 damaged page out of 100 acknowledged commits; \
             the 100 acknowledged commits could not be checked"
        ),
        "{v:#}"
    );
    assert_eq!(kinds(&v), ["damaged_page_outside_run"], "{v:#}");
    let f = &v["findings"][0];
    assert_eq!(f["page"]["relation"], json!(index), "{v:#}");
    assert_eq!(f["page"]["fork"], json!("main"), "{v:#}");
    let block = f["page"]["block"].as_u64().unwrap();
    assert!((1..blocks).contains(&block), "{v:#}");
    let detail = f["detail"].as_str().unwrap();
    let head = format!(
        "PostgreSQL cannot read {index} (main fork) block {block} (file {file}, named by database \
         postgres's catalog) (cannot connect to PostgreSQL: FATAL: invalid page in block {block} of \
         relation {file} (SQLSTATE XX001))"
    );
    assert!(detail.starts_with(&head), "{detail}");
    assert_eq!(
        (&v["damaged_pages"], &v["commits_checked"]),
        (&json!(1), &json!(false))
    );
}
