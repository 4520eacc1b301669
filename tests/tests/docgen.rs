//! Man pages and completions (`PLUGPULL_GENERATE_DOCS`, `docgen/`): every binary
//! writes its page, a page per visible subcommand and its bash, zsh and fish
//! completions, then exits 0 without running; `scripts/release` ships them.

use plugpull_tests::*;
use std::process::Command;

/// Runs `name` with `PLUGPULL_GENERATE_DOCS` set to a fresh directory; returns it.
fn generate(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(bin(name))
        .env("PLUGPULL_GENERATE_DOCS", dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
    assert!(o.stdout.is_empty(), "{name} ran instead: {}", stdout(&o));
    dir
}

#[test]
fn every_binary_writes_its_pages_and_completions() {
    for (name, pages) in [
        (
            "plugpull",
            &[
                "plugpull",
                "plugpull-write-file",
                "plugpull-agent",
                "plugpull-campaign-run",
            ][..],
        ),
        ("plugpull-listener", &["plugpull-listener"][..]),
        (
            "plugpull-simfs",
            &["plugpull-simfs", "plugpull-simfs-mount"][..],
        ),
    ] {
        let dir = generate(name);
        for page in pages {
            let text = std::fs::read_to_string(dir.path().join(format!("man1/{page}.1")))
                .unwrap_or_else(|e| panic!("{page}.1: {e}"));
            assert!(text.contains(".TH"), "{page}.1 is no man page");
        }
        for file in [
            format!("{name}.bash"),
            format!("_{name}"),
            format!("{name}.fish"),
        ] {
            let text = std::fs::read_to_string(dir.path().join("completions").join(&file))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(text.contains(name), "{file} does not name {name}");
        }
    }
}

#[test]
fn no_page_for_a_hidden_or_help_subcommand() {
    let dir = generate("plugpull");
    let names: Vec<String> = std::fs::read_dir(dir.path().join("man1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("-help")),
        "a help page: {names:?}"
    );
    assert!(names.len() > 10, "too few pages: {names:?}");
    // No page lists one for `help` either (`plugpull-help(1)` is not installed).
    for (page, listed) in [
        ("plugpull.1", "probe(1)"),
        ("plugpull-campaign.1", "run(1)"),
    ] {
        let text = std::fs::read_to_string(dir.path().join("man1").join(page)).unwrap();
        assert!(
            !text.contains("help(1)"),
            "{page} lists a help page:\n{text}"
        );
        assert!(
            text.contains(listed),
            "{page} does not list {listed}:\n{text}"
        );
    }
}
