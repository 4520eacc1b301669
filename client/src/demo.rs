//! `plugpull demo`: the whole procedure on this machine, without hardware.
//!
//! Starts a listener on loopback, runs the file workload on a scratch file, "pulls
//! the plug" on the writer mid-run (SIGKILL: the page cache survives, so nothing
//! acknowledged may be lost), then verifies against the listener's ledger. Leaves
//! nothing running or behind, also when interrupted with Ctrl-C.

use crate::Failure;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Options of `plugpull demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Seconds of writing before the cut.
    #[arg(long, default_value_t = 3.0)]
    pub cut_after: f64,
    /// Keep the scratch directory (listener data, target) for inspection.
    #[arg(long)]
    pub keep: bool,
}

/// A child process killed (SIGKILL) and reaped on drop.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A binary installed beside this one (`plugpull-listener`, `plugpull-simfs`).
pub fn sibling(name: &str) -> Result<PathBuf, Failure> {
    let me =
        std::env::current_exe().map_err(|e| Failure(format!("cannot locate plugpull: {e}")))?;
    let p = me.with_file_name(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(Failure(format!(
            "{} not found beside {}: build the workspace (cargo build --release --workspace)",
            name,
            me.display()
        )))
    }
}

fn start_listener(dir: &Path) -> Result<(Guard, String), Failure> {
    let mut child = Command::new(sibling("plugpull-listener")?)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("listener-data"))
        .stdout(Stdio::piped())
        .stderr(
            std::fs::File::create(dir.join("listener.log")).map_err(|e| Failure(e.to_string()))?,
        )
        .spawn()
        .map_err(|e| Failure(format!("cannot start plugpull-listener: {e}")))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .map_err(|e| Failure(e.to_string()))?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| Failure(format!("listener said {line:?}")))?
        .to_string();
    Ok((Guard(Some(child)), addr))
}

/// Runs the demo; `Ok(true)` when every verdict came out as expected.
pub async fn demo(args: &DemoArgs) -> Result<bool, Failure> {
    let dir = std::env::temp_dir().join(format!("plugpull-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure(format!("cannot create {}: {e}", dir.display())))?;
    let result = tokio::select! {
        r = run(&dir, args) => r,
        _ = tokio::signal::ctrl_c() => Err(Failure("interrupted".into())),
    };
    // Guards inside `run` are dropped by now: nothing is left running.
    if args.keep {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run(dir: &Path, args: &DemoArgs) -> Result<bool, Failure> {
    let (_listener, addr) = start_listener(dir)?;
    println!(
        "== listener on {addr} (ledger in {})",
        dir.join("listener-data").display()
    );
    let target = dir.join("target.dat");
    let me = std::env::current_exe().map_err(|e| Failure(e.to_string()))?;
    println!(
        "== writing checksummed blocks to {} with 4 jobs; the cut comes after {} s",
        target.display(),
        args.cut_after
    );
    let writer = Command::new(&me)
        .args([
            "write",
            "file",
            "--listener",
            &addr,
            "--size",
            "64MiB",
            "--jobs",
            "4",
            "--duration",
            "10m",
            "-P",
            "1",
            "--target",
        ])
        .arg(&target)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Failure(format!("cannot start the writer: {e}")))?;
    let mut writer = Guard(Some(writer));
    tokio::time::sleep(Duration::from_secs_f64(args.cut_after)).await;
    println!("== cut: SIGKILL of the writer mid-run (stands in for pulling the plug)");
    if let Some(mut c) = writer.0.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    println!("== verify");
    let vargs = crate::verify::VerifyArgs {
        run: None,
        host: None,
        target: None,
        json: false,
        show: 10,
    };
    let secret = plugpull::auth::Secret::default();
    let l = crate::verify::fetch(&addr, &secret, None, &crate::common::hostname()).await?;
    let plugpull::ledger::Workload::File(fm) = &l.manifest.workload else {
        return Err(Failure(
            "the listener returned a run of another workload".into(),
        ));
    };
    let report = crate::verify::verify_file(&l, fm, &vargs)?;
    crate::verify::print_file_report(&report, 10);
    println!();
    println!(
        "local device after a writer crash: {}, {} acknowledged, {} lost",
        if report.ok { "PASS" } else { "FAIL" },
        report.acknowledged,
        report.verdicts.failures()
    );
    Ok(report.ok)
}
