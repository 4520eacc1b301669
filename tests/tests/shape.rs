//! The shape of the source tree (issue 10's "done when"): no Rust file over 500 lines
//! and no function over 120 lines, so a newcomer finds rooms, not god-files.
//!
//! Exempt: `simfs/src/fs.rs` (the FUSE adapter: one `fuser::Filesystem` impl whose
//! methods belong together). Lines are counted as `wc -l` does; a function runs from
//! its `fn` line to the line of its closing brace (braces in strings, chars and `//`
//! comments are skipped).

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
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            too_big.push(format!("{rel}: {n} lines (at most {MAX_FILE_LINES})"));
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
