//! `plugpull campaign` and `plugpull agent` end to end: a real listener (with a
//! secret), real agents, real `plugpull write`/`verify` children, and power drivers
//! that are real programs. Here the "machine" is a shell script driven through
//! `exec:`: "on" starts `plugpull agent` in a process group of its own with a fresh
//! simulated boot id, "off" SIGKILLs that group (or, for the tests of what a campaign
//! must not count, does nothing). `sim.rs` runs campaigns on the simulated machine
//! (`simfs://`), where a cut drops the device's volatile cache.

use plugpull_tests::{bin, plugpull, stderr, stdout, Listener};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

mod clean;
mod device;
mod evidence;
mod exec;
mod pg;
mod power;
mod redfish;
mod sim;
mod stats;

/// A listener with a secret, a secret file and an agent configuration in a temp dir.
pub struct Witness {
    pub dir: tempfile::TempDir,
    pub listener: Listener,
    pub secret: PathBuf,
    pub config: PathBuf,
}

impl Witness {
    /// Starts the listener; the agent configuration lists `targets` (paths relative
    /// to the temp dir).
    pub fn start(targets: &[&str]) -> Witness {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "campaign test secret\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let config = dir.path().join("agent.toml");
        let list: Vec<String> = targets
            .iter()
            .map(|t| format!("{:?}", dir.path().join(t).display().to_string()))
            .collect();
        std::fs::write(&config, format!("targets = [{}]\n", list.join(", "))).unwrap();
        let listener =
            Listener::start_with(dir.path(), &["--secret-file", secret.to_str().unwrap()]);
        Witness {
            dir,
            listener,
            secret,
            config,
        }
    }

    /// A path in the temp dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `plugpull campaign SUB --listener … --secret-file … ARGS`.
    pub fn campaign(&self, sub: &str, args: &[&str]) -> Output {
        let mut a = vec![
            "campaign",
            sub,
            "--listener",
            self.listener.addr(),
            "--secret-file",
            self.secret.to_str().unwrap(),
        ];
        a.extend_from_slice(args);
        plugpull(&a)
    }

    /// `campaign run --name NAME` started in the background, its output piped.
    pub fn run_in_background(&self, name: &str) -> std::process::Child {
        std::process::Command::new(bin("plugpull"))
            .args([
                "campaign",
                "run",
                "--listener",
                self.listener.addr(),
                "--secret-file",
            ])
            .arg(&self.secret)
            .args(["--name", name])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `campaign create --name NAME --host HOST --power URI --workload WL PLAN…`,
    /// which must succeed.
    pub fn create(&self, name: &str, host: &str, uri: &str, wl: &str, plan: &[&str]) {
        let head = [
            "--name",
            name,
            "--host",
            host,
            "--power",
            uri,
            "--workload",
            wl,
        ];
        let o = self.campaign("create", &[&head[..], plan].concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }

    /// `campaign status --json` of `name`.
    pub fn status(&self, name: &str) -> Value {
        let o = self.campaign("status", &["--name", name, "--json"]);
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&o), stderr(&o)))
    }

    /// The argv of `plugpull agent` for `host` (the driver appends the boot id).
    pub fn agent_argv(&self, host: &str) -> Vec<String> {
        [
            bin("plugpull").to_str().unwrap(),
            "agent",
            "--listener",
            self.listener.addr(),
            "--secret-file",
            self.secret.to_str().unwrap(),
            "--config",
            self.config.to_str().unwrap(),
            "--host",
            host,
            "--poll",
            "0.2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

/// Writes an executable shell script `name` in `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// The cuts of a `status --json` object as `(index, validity, reason)`.
pub fn cuts(v: &Value) -> Vec<(u64, String, String)> {
    v["cuts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["index"].as_u64().unwrap(),
                c["validity"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Bad plans are refused before anything is recorded, naming the problem.
#[test]
fn create_refuses_bad_plans() {
    let w = Witness::start(&["t.dat"]);
    let base = ["--name", "c", "--host", "h1", "--power", "exec:true"];
    let err = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let o = w.campaign("create", &a);
        assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
        stderr(&o)
    };
    assert_eq!(
        err(&["--workload", "file --target /x --size 1MiB -T 30s"]),
        "plugpull: --workload \"file --target /x --size 1MiB -T 30s\": -T is not accepted: every run goes on until its cut\n"
    );
    assert_eq!(
        err(&["--workload", "file --target /x", "--host", "h2"]),
        "plugpull: 2 --host but 1 --power: give one --power per --host, in the same order\n"
    );
    assert_eq!(
        err(&["--workload", "file --target /x", "--cut-after", "9s..2s"]),
        "error: invalid value '9s..2s' for '--cut-after <CUT_AFTER>': range \"9s..2s\": the first duration is longer than the second\n\nFor more information, try '--help'.\n"
    );
    let ok = w.campaign(
        "create",
        &[&base[..], &["--workload", "file --target /x --size 1MiB"]].concat(),
    );
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    // One campaign at a time per machine; a taken name is refused as such.
    let again = w.campaign(
        "create",
        &[
            "--name",
            "c2",
            "--host",
            "h1",
            "--power",
            "exec:true",
            "--workload",
            "file --target /x --size 1MiB",
        ],
    );
    assert_eq!(
        stderr(&again),
        format!(
            "plugpull: listener {} refused: host h1 is in campaign \"c\", which is not done (0 of its 10 cuts judged): let it finish, or `plugpull campaign cancel --name c`\n",
            w.listener.addr()
        )
    );
    let taken = w.campaign(
        "create",
        &[
            "--name",
            "c",
            "--host",
            "h2",
            "--power",
            "exec:true",
            "--workload",
            "file --target /x --size 1MiB",
        ],
    );
    assert_eq!(
        stderr(&taken),
        format!(
            "plugpull: listener {} refused: campaign \"c\" exists already: pick another --name, or `campaign run` it\n",
            w.listener.addr()
        )
    );
    let jobs = w.campaign(
        "create",
        &[
            "--name",
            "c3",
            "--host",
            "h3",
            "--power",
            "exec:true",
            "--workload",
            "file --target /x --size 1MiB -j 0",
        ],
    );
    assert_eq!(
        stderr(&jobs),
        "plugpull: --workload \"file --target /x --size 1MiB -j 0\": --jobs 0 is not between 1 and 1024\n"
    );
    let v = w.status("c");
    assert_eq!(v["definition"]["cuts"], json!(10));
    assert_eq!(v["cancelled"], json!(null));
    // Cancelled, the campaign is done and frees its host.
    let o = w.campaign("cancel", &["--name", "c", "--reason", "typo in the plan"]);
    assert_eq!(stdout(&o), "campaign c cancelled: typo in the plan\n");
    assert_eq!(w.status("c")["cancelled"], json!("typo in the plan"));
    assert_eq!(w.status("c")["done"], json!(true));
    let o = w.campaign(
        "create",
        &[
            "--name",
            "c2",
            "--host",
            "h1",
            "--power",
            "exec:true",
            "--workload",
            "file --target /x --size 1MiB",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(v["definition"]["cut_after_ms"], json!([20000, 90000]));
    assert_eq!(v["cuts"], json!([]));
}
