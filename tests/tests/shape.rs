//! The shape of the source tree: no Rust file over 500 lines of code and no function
//! over 120 lines, so a newcomer finds rooms, not god-files; and no import cycle
//! between the top-level modules of any crate, so each can be read after the ones it
//! uses.
//!
//! Exempt from the size rule: `simfs/src/fs.rs` (the FUSE adapter: one
//! `fuser::Filesystem` impl whose methods belong together). A file's size counts its
//! code lines (blank lines and lines that are only a comment are left out); a function
//! runs from its `fn` line to the line of its closing brace (braces in strings, chars
//! and `//` comments are skipped).

use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 500;
const MAX_FN_LINES: usize = 120;
const EXEMPT: &[&str] = &["simfs/src/fs.rs"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read source dir") {
        let p = e.expect("dir entry").path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// The code of a line without string/char literals and `//` comments.
fn code(line: &str) -> String {
    let (mut out, mut chars) = (String::new(), line.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(d) = chars.next() {
                    if d == '\\' {
                        chars.next();
                    } else if d == '"' {
                        break;
                    }
                }
            }
            '\'' => {
                // A char literal ('x', '\n', '{'); a lifetime ('a) has no closing quote.
                let rest: String = chars.clone().take(3).collect();
                if let Some(escaped) = rest.strip_prefix('\\') {
                    let end = escaped.find('\'').map(|i| i + 2);
                    for _ in 0..end.unwrap_or(0) {
                        chars.next();
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            c => out.push(c),
        }
    }
    out
}

/// Lines of `text` that hold code: not blank, not only a `//` comment.
fn code_lines(text: &str) -> usize {
    text.lines().filter(|l| !code(l).trim().is_empty()).count()
}

/// `(name, first line (1-based), lines)` of every function with a body.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let c = code(l);
        let Some(at) = c.find("fn ") else { continue };
        if at > 0 && !c[..at].ends_with(' ') {
            continue;
        }
        let before = c[..at].trim();
        if !before.split_whitespace().all(|w| {
            ["pub", "async", "unsafe", "const", "extern", "\"C\""].contains(&w)
                || w.starts_with("pub(")
        }) {
            continue;
        }
        let name: String = c[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let (mut depth, mut opened) = (0i64, false);
        for (j, m) in lines.iter().enumerate().skip(i) {
            let mc = code(m);
            for ch in mc.chars() {
                match ch {
                    '{' => (depth, opened) = (depth + 1, true),
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth <= 0 {
                out.push((name.clone(), i + 1, j - i + 1));
                break;
            }
            if !opened && mc.trim_end().ends_with(';') {
                break;
            }
        }
    }
    out
}

#[test]
fn no_file_over_500_lines_and_no_function_over_120() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for d in [
        "src", "client", "listener", "simfs", "tests", "bench", "fuzz",
    ] {
        rust_files(&root.join(d), &mut files);
    }
    files.sort();
    assert!(
        files.len() > 50,
        "found only {} Rust files under {}",
        files.len(),
        root.display()
    );
    let mut too_big = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if EXEMPT.contains(&rel.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let n = code_lines(&text);
        if n > MAX_FILE_LINES {
            too_big.push(format!(
                "{rel}: {n} lines of code (at most {MAX_FILE_LINES})"
            ));
        }
        for (name, at, len) in functions(&text) {
            if len > MAX_FN_LINES {
                too_big.push(format!(
                    "{rel}:{at}: fn {name} is {len} lines (at most {MAX_FN_LINES})"
                ));
            }
        }
    }
    assert_eq!(
        too_big,
        Vec::<String>::new(),
        "split these along their seams"
    );
}

#[test]
fn the_function_counter_sees_bodies_not_strings() {
    let text = "pub async fn a() {\n    let s = \"}\";\n    let c = '{';\n}\nfn b<'x>(v: &'x str);\nfn c() { }\n";
    assert_eq!(
        functions(text),
        vec![("a".to_string(), 1, 4), ("c".to_string(), 6, 1)]
    );
}

#[test]
fn the_line_counter_leaves_out_blank_lines_and_comments() {
    let text = "//! A module.\n\nuse x;\n/// Doc.\nfn a() {} // trailing\n    // note\nlet s = \"// not a comment\";\n";
    assert_eq!(code_lines(text), 3);
}

/// The top-level modules of the crate whose root is `src` (`lib.rs` or `main.rs`):
/// each `NAME.rs` and `NAME/` beside the root.
fn top_modules(src: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(src)
        .expect("read crate source dir")
        .map(|e| e.expect("dir entry").path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            if p.is_dir() {
                Some(name)
            } else {
                let stem = name.strip_suffix(".rs")?;
                (stem != "lib" && stem != "main").then(|| stem.to_string())
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Which of `mods` the code in `text` names through `crate::` (`crate::a::b`,
/// `crate::{a, b::c}`); comments and strings are skipped.
fn crate_refs(text: &str, mods: &[String]) -> Vec<String> {
    let code: String = text.lines().map(|l| code(l) + "\n").collect();
    let mut found = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(',')
                .map(|s| s.trim().split("::").next().unwrap_or(""))
                .collect()
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            vec![&rest[..end]]
        };
        for n in names {
            if mods.iter().any(|m| m == n) && !found.iter().any(|f| f == n) {
                found.push(n.to_string());
            }
        }
    }
    found
}

/// The import graph of a crate's top-level modules: for each, the others it names.
fn module_graph(src: &Path) -> Vec<(String, Vec<String>)> {
    let mods = top_modules(src);
    mods.iter()
        .map(|m| {
            let mut files = Vec::new();
            let file = src.join(format!("{m}.rs"));
            if file.is_file() {
                files.push(file);
            }
            if src.join(m).is_dir() {
                rust_files(&src.join(m), &mut files);
            }
            let mut deps: Vec<String> = files
                .iter()
                .flat_map(|f| crate_refs(&std::fs::read_to_string(f).unwrap(), &mods))
                .filter(|d| d != m)
                .collect();
            deps.sort();
            deps.dedup();
            (m.clone(), deps)
        })
        .collect()
}

/// One cycle in `graph`, as the path `a -> b -> … -> a`, if there is one.
fn find_cycle(graph: &[(String, Vec<String>)]) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        graph: &[(String, Vec<String>)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut cycle = path[i..].to_vec();
            cycle.push(at.to_string());
            return Some(cycle);
        }
        if done.iter().any(|d| d == at) {
            return None;
        }
        path.push(at.to_string());
        let deps = graph.iter().find(|(m, _)| m == at).map(|(_, d)| d.clone());
        for d in deps.unwrap_or_default() {
            if let Some(c) = visit(&d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.push(at.to_string());
        None
    }
    let mut done = Vec::new();
    graph
        .iter()
        .find_map(|(m, _)| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_cycle_between_its_top_level_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut cycles = Vec::new();
    for src in ["src", "client/src", "listener/src", "simfs/src"] {
        let graph = module_graph(&root.join(src));
        assert!(
            graph.len() >= 4,
            "{src}: found only {} top-level modules",
            graph.len()
        );
        if let Some(c) = find_cycle(&graph) {
            cycles.push(format!("{src}: {}", c.join(" -> ")));
        }
    }
    assert_eq!(
        cycles,
        Vec::<String>::new(),
        "move what both sides use below both"
    );
}

#[test]
fn the_cycle_finder_names_a_cycle_and_passes_a_layered_graph() {
    let g = |edges: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
        edges
            .iter()
            .map(|(m, d)| (m.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect()
    };
    let layered = g(&[
        ("verify", &["file", "ledger"]),
        ("file", &["ledger"]),
        ("ledger", &[]),
    ]);
    assert_eq!(find_cycle(&layered), None);
    let knot = g(&[
        ("verify", &["file"]),
        ("file", &["ledger"]),
        ("ledger", &["verify"]),
    ]);
    assert_eq!(
        find_cycle(&knot).unwrap(),
        ["verify", "file", "ledger", "verify"]
    );
    let mods = ["file".to_string(), "ledger".to_string(), "net".to_string()];
    assert_eq!(
        crate_refs(
            "use crate::{ledger::fetch, net};\n// crate::file\nlet x = crate::file::y;",
            &mods
        ),
        ["ledger", "net", "file"]
    );
}
