//! Whether the pgbench tables are still the ones the run wrote: each table's file
//! number against the run's record ([`PgRelation`]).

use crate::ledger::PgRelation;

/// How the tables differ from the run's record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelationChanges {
    /// Tables given a newer file since the run (a `TRUNCATE`, `pgbench -i`, `VACUUM
    /// FULL`, a drop and create): their rows cannot be judged — verify exits 2.
    pub rewritten: Vec<String>,
    /// Tables whose file is older than the run's: the catalog went back to a table
    /// from before the run, so the storage lost the run's table — a finding.
    pub older: Vec<String>,
}

/// Compares the run's record `run` with the tables `now` (a table missing from `now`
/// is left to the missing-table check; an empty record, a ledger without it,
/// compares nothing). Each entry is one sentence naming the table and both files.
pub fn relation_changes(run: &[PgRelation], now: &[PgRelation]) -> RelationChanges {
    let mut c = RelationChanges::default();
    for r in run {
        let Some(n) = now.iter().find(|n| n.name == r.name) else {
            continue;
        };
        if (n.oid, n.filenode) == (r.oid, r.filenode) {
            continue;
        }
        let what = format!(
            "{} (file {} of OID {}; the run's was file {} of OID {})",
            r.name, n.filenode, n.oid, r.filenode, r.oid
        );
        if n.filenode > r.filenode || n.oid > r.oid {
            c.rewritten.push(what);
        } else {
            c.older.push(what);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(name: &str, oid: u32, filenode: u32) -> PgRelation {
        PgRelation {
            name: name.into(),
            oid,
            filenode,
        }
    }

    #[test]
    fn a_truncated_table_is_rewritten_and_a_table_from_before_the_run_is_older() {
        let run = [
            rel("pgbench_history", 16400, 16400),
            rel("pgbench_accounts", 16390, 16390),
        ];
        // Unchanged, or missing (left to the missing-table check): nothing.
        assert_eq!(relation_changes(&run, &run), RelationChanges::default());
        assert_eq!(relation_changes(&run, &[]), RelationChanges::default());
        // TRUNCATE pgbench_history: same OID, a newer file.
        let now = [
            rel("pgbench_history", 16400, 16420),
            rel("pgbench_accounts", 16390, 16390),
        ];
        let c = relation_changes(&run, &now);
        assert_eq!(
            c.rewritten,
            ["pgbench_history (file 16420 of OID 16400; the run's was file 16400 of OID 16400)"]
        );
        assert!(c.older.is_empty());
        // The run's --init lost: the catalog holds the table from before it.
        let now = [
            rel("pgbench_history", 16300, 16300),
            rel("pgbench_accounts", 16390, 16390),
        ];
        let c = relation_changes(&run, &now);
        assert!(c.rewritten.is_empty());
        assert_eq!(
            c.older,
            ["pgbench_history (file 16300 of OID 16300; the run's was file 16400 of OID 16400)"]
        );
        // No record (an older ledger): nothing compared.
        assert_eq!(relation_changes(&[], &now), RelationChanges::default());
    }

    #[test]
    fn a_table_newer_in_neither_its_oid_nor_its_file_is_older() {
        let run = [rel("pgbench_history", 16400, 16400)];
        // Same file number, an older OID; same OID, an older file: the run's table is gone.
        for now in [
            rel("pgbench_history", 16300, 16400),
            rel("pgbench_history", 16400, 16390),
        ] {
            let c = relation_changes(&run, std::slice::from_ref(&now));
            assert_eq!((c.rewritten.len(), c.older.len()), (0, 1), "{now:?}");
        }
        // A newer OID with an older file number is a new table: rewritten.
        let c = relation_changes(&run, &[rel("pgbench_history", 16500, 16300)]);
        assert_eq!((c.rewritten.len(), c.older.len()), (1, 0));
    }
}
