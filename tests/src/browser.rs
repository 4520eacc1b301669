//! Loading an HTML report in a real headless browser (Debian's
//! `chromium-headless-shell`) and reading back what it drew.
//!
//! A report has no script. [`load`] injects two into a copy: the first, in `<head>`,
//! records window errors; the last, at the end of `<body>`, writes into `<body
//! data-check>` how many `<figure>`s there are, how many have an SVG with a non-zero
//! bounding box, and how many errors were seen. `--dump-dom` prints the DOM after
//! that ran, and [`Loaded::check`] reads the attribute back.

use crate::{skipped, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian's package `chromium-headless-shell` puts the browser.
pub const BROWSER: &str = "/usr/bin/chromium-headless-shell";

/// Set first in `<head>`: collects window errors before anything else runs.
const ERRORS_JS: &str = "<script>window.__errs=[];window.addEventListener('error',\
function(e){window.__errs.push(String(e.message));});</script>";

/// Set last in `<body>`: what was drawn, into `<body data-check>`.
const CHECK_JS: &str = "<script>(function(){var f=document.querySelectorAll('figure');\
var shown=0;for(var i=0;i<f.length;i++){var s=f[i].querySelector('svg');\
if(s){var r=s.getBoundingClientRect();if(r.width>0&&r.height>0){shown++;}}}\
document.body.setAttribute('data-check','figures='+f.length+';shown='+shown+\
';errors='+window.__errs.length);})();</script>";

/// True (after saying so loudly) when the browser is missing and the test may skip;
/// panics when it is missing where tests must not skip (`PLUGPULL_REQUIRE_FUSE` set,
/// as CI sets it).
pub fn skip_without_browser(test: &str) -> bool {
    if Path::new(BROWSER).exists() {
        return false;
    }
    let required = std::env::var("PLUGPULL_REQUIRE_FUSE").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "{test}: PLUGPULL_REQUIRE_FUSE is set but {BROWSER} is missing (package chromium-headless-shell)"
    );
    skipped(
        test,
        &format!("{BROWSER} is missing (package chromium-headless-shell)"),
    );
    true
}

/// What the browser made of a page.
pub struct Loaded {
    /// The DOM after the scripts ran.
    pub dom: String,
    /// The browser's stderr (console messages are logged there as `CONSOLE`).
    pub log: String,
}

impl Loaded {
    /// The `data-check` attribute: `figures=N;shown=N;errors=N`.
    pub fn check(&self) -> &str {
        let key = "data-check=\"";
        let at = self
            .dom
            .find(key)
            .unwrap_or_else(|| panic!("no data-check in the DOM: {}", self.dom))
            + key.len();
        self.dom[at..].split('"').next().unwrap()
    }

    /// The console lines the page logged (`INFO:CONSOLE` and the like).
    pub fn console(&self) -> Vec<&str> {
        self.log.lines().filter(|l| l.contains("CONSOLE")).collect()
    }
}

/// Loads a copy of `html` (written as `copy.html` in `dir`) with the check scripts.
pub fn load(html: &Path, dir: &Path) -> Loaded {
    let text = std::fs::read_to_string(html).unwrap();
    let copy: PathBuf = dir.join("copy.html");
    let injected = text
        .replacen("<head>", &format!("<head>{ERRORS_JS}"), 1)
        .replacen("</body>", &format!("{CHECK_JS}</body>"), 1);
    std::fs::write(&copy, injected).unwrap();
    let o = Command::new("timeout")
        .arg("120")
        .arg(BROWSER)
        .args([
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
        ])
        .arg(format!("file://{}", copy.display()))
        .output()
        .expect("run the browser");
    assert_eq!(o.status.code(), Some(0), "browser: {}", stderr(&o));
    Loaded {
        dom: stdout(&o),
        log: stderr(&o),
    }
}
