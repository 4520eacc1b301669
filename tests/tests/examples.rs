//! Every example command line the user is shown — in `plugpull --help`, in each
//! subcommand's `--help`, in the README and in `docs/` — must be accepted by the
//! real `plugpull` binary. Each example is run with `PLUGPULL_CHECK_ARGS=1` in its
//! environment, which makes `plugpull` parse the whole command line with the real parser and exits 0 with
//! `arguments OK` without doing anything; a usage error exits 2 with clap's message.

use plugpull_tests::*;
use std::path::Path;
use std::process::{Command, Output};

/// `plugpull ARGS` with `PLUGPULL_CHECK_ARGS=1`: only the command line is parsed.
fn check_args(args: &[&str]) -> Output {
    Command::new(bin("plugpull"))
        .args(args)
        .env_remove("PLUGPULL_SECRET")
        .env("PLUGPULL_CHECK_ARGS", "1")
        .output()
        .expect("run plugpull")
}

/// The `--help` text of `plugpull SUB…`.
fn help(sub: &[&str]) -> String {
    let mut args: Vec<&str> = sub.to_vec();
    args.push("--help");
    let o = plugpull(&args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "plugpull {args:?}: {}",
        stderr(&o)
    );
    stdout(&o)
}

/// Every command of the subcommand tree with its `--help` text: `([], plugpull's)`,
/// `(["write"], …)`, `(["write", "file"], …)`, ….
fn help_tree() -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(sub) = todo.pop() {
        let refs: Vec<&str> = sub.iter().map(String::as_str).collect();
        let text = help(&refs);
        for s in subcommands(&text) {
            let mut next = sub.clone();
            next.push(s);
            todo.push(next);
        }
        out.push((sub, text));
    }
    out
}

/// The subcommand names listed under `Commands:` in a help text (without `help`).
fn subcommands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim_end() == "Commands:" {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            let name = line.split_whitespace().next().unwrap_or_default();
            if !name.is_empty() && name != "help" {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// Shell-style words of one command (single and double quotes, backslash escapes
/// outside single quotes); stops at an unquoted `#`, `&`, `;` or `|`.
fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut chars = cmd.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                has = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    cur.push(d);
                }
            }
            '"' => {
                has = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        _ => cur.push(d),
                    }
                }
            }
            '\\' => {
                has = true;
                cur.extend(chars.next());
            }
            '#' | '&' | ';' | '|' => break,
            c if c.is_whitespace() => {
                if has {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => {
                has = true;
                cur.push(c);
            }
        }
    }
    if has {
        out.push(cur);
    }
    out
}

/// The `plugpull …` command lines in a text: every line (joined with its `\`
/// continuations) that has, at its start or after `;`, `&&` or `Example:`, the word
/// `plugpull` followed by a space. `plugpull-listener` and `plugpull-simfs` are other
/// binaries and are not taken.
fn examples_in(text: &str) -> Vec<String> {
    let mut joined = Vec::new();
    let mut acc = String::new();
    for line in text.lines() {
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            acc.push_str(head);
            acc.push(' ');
            continue;
        }
        acc.push_str(line);
        joined.push(std::mem::take(&mut acc));
    }
    let mut out = Vec::new();
    for line in joined {
        let line = line.trim();
        let line = line.strip_prefix("Example:").map(str::trim).unwrap_or(line);
        for part in line.split(';').flat_map(|p| p.split("&&")) {
            let part = part.trim();
            if part.starts_with("plugpull ") {
                out.push(part.to_string());
            }
        }
    }
    out
}

/// The lines of a Markdown text's shell code blocks (```sh, ```bash, ```console).
fn shell_blocks(md: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in md.lines() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            inside = !inside && matches!(lang.trim(), "sh" | "bash" | "console" | "shell");
            continue;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn every_documented_example_parses() {
    // The help texts, walking the subcommand tree.
    let mut texts: Vec<(String, String)> = help_tree()
        .into_iter()
        .map(|(sub, text)| (format!("plugpull {} --help", sub.join(" ")), text))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut docs = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    for p in docs {
        texts.push((
            p.strip_prefix(root).unwrap().display().to_string(),
            shell_blocks(&std::fs::read_to_string(&p).unwrap()),
        ));
    }

    let mut checked = 0;
    let mut bad = Vec::new();
    for (source, text) in &texts {
        for ex in examples_in(text) {
            let w = words(&ex);
            assert_eq!(w[0], "plugpull", "{source}: {ex}");
            let args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
            let o = check_args(&args);
            checked += 1;
            if o.status.code() != Some(0) || stdout(&o).trim() != "arguments OK" {
                bad.push(format!("{source}: `{ex}`\n{}", stderr(&o)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "examples the parser rejects:\n{}",
        bad.join("\n")
    );
    // The root help's five, write file's and write pgbench's one each, and the README's
    // and docs' (a floor: adding examples must not make this fail).
    assert!(checked >= 10, "only {checked} examples found");
}

#[test]
fn check_args_rejects_what_the_parser_rejects() {
    // The variable is not a rubber stamp: a usage error still exits 2 with clap's message.
    let o = check_args(&[
        "write",
        "pgbench",
        "--listener",
        "witness:7458",
        "--scale",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--scale"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    // And no flag can make a real verify exit 0 without verifying: `--check-args` is
    // an unknown argument (usage error, exit 2).
    let o = plugpull(&["verify", "--listener", "127.0.0.1:1", "--check-args"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unexpected argument '--check-args'"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert_eq!(
        words("plugpull write pgbench --dsn 'host=/tmp dbname=bench' -s 10 &   # x"),
        [
            "plugpull",
            "write",
            "pgbench",
            "--dsn",
            "host=/tmp dbname=bench",
            "-s",
            "10"
        ]
    );
}

/// Every command a user runs says, in its `--help`, an example and what its exit
/// codes mean: the leaves of the subcommand tree (`plugpull write file`, `plugpull
/// campaign run`, …), above clap's `Usage:` line.
#[test]
fn every_command_shows_an_example_and_its_exit_codes() {
    let mut leaves = 0;
    let mut bad = Vec::new();
    for (sub, text) in help_tree() {
        if subcommands(&text).is_empty() {
            leaves += 1;
            let head = text.split("\nUsage:").next().unwrap_or("");
            let example = head.lines().any(|l| l.trim_start().starts_with("Example"));
            let exit = head.contains("Exit") || head.contains("exit");
            if !(example && exit) {
                bad.push(format!(
                    "plugpull {}: example {example}, exit codes {exit}",
                    sub.join(" ")
                ));
            }
        }
    }
    assert!(leaves >= 15, "{leaves} commands");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
