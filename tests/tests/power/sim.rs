//! `simfs://MOUNTPOINT`, the simulated machine, on real simfs mounts: each action is
//! a separate `plugpull power` process (the state lives in the machine's directory),
//! the boot command is a shell script that records its argv, environment, process
//! id and working directory and writes to the mount in a loop; it also starts a
//! process that leaves its session (`setsid`, as PostgreSQL's backends do) holding
//! a file on the mount open, which `off` must kill too.

use super::{fails, ok, power, write_mode};
use plugpull_client::rig::proc;
use plugpull_tests::machine::Machine;
use plugpull_tests::simfs::{is_mountpoint, skip_without_fuse};
use plugpull_tests::{stderr, stdout, wait_for};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// SIGKILLs a process tree on drop, also when the test panics.
struct KillTree(u32);

impl Drop for KillTree {
    fn drop(&mut self) {
        // Only while the group's leader is still our child (unreaped, so its id
        // cannot have been reused by another process).
        if proc::stat_of(self.0).is_some_and(|(_, ppid)| ppid == std::process::id()) {
            let _ = proc::kill_group(Some(self.0), None, &[], Duration::from_secs(10));
        }
    }
}

/// The boot script: `boot.sh OUT [escape] --simulated-boot-id ID`.
const BOOT: &str = r#"#!/bin/sh
out=$1
printf '%s\n' "$@" > "$out/argv"
printf '%s\n' "$PLUGPULL_SIMULATED_BOOT_ID" > "$out/env"
pwd > "$out/cwd"
if [ "$2" = escape ]; then
  sh -c 'setsid sleep 1000 >> mnt/held & echo $! > "$1/escaped"' sh "$out"
fi
echo $$ > "$out/pid"
i=0
while :; do
  i=$((i+1))
  echo "$i" >> mnt/counter
  sleep 0.05
done
"#;

/// A machine in `tmp/m` booting `tmp/boot.sh tmp/out [escape]`; `tmp/out` made.
fn machine(tmp: &Path, mode: &str, escape: bool) -> Machine {
    let (script, out) = (tmp.join("boot.sh"), tmp.join("out"));
    write_mode(&script, BOOT, 0o755);
    std::fs::create_dir_all(&out).unwrap();
    let (script, out) = (script.to_str().unwrap(), out.to_str().unwrap());
    let mut boot = vec!["/bin/sh", script, out];
    if escape {
        boot.push("escape");
    }
    Machine::create(
        &tmp.join("m"),
        mode,
        5,
        &["--destage-delay-ms", "50"],
        &boot,
    )
}

/// A file the boot script writes in `out`, once it is there and ends with a newline.
fn recorded(out: &Path, name: &str) -> String {
    let p = out.join(name);
    let mut text = String::new();
    let there = wait_for(Duration::from_secs(10), || {
        text = std::fs::read_to_string(&p).unwrap_or_default();
        text.ends_with('\n')
    });
    assert!(there, "{} never written", p.display());
    text
}

/// Process `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    proc::alive(pid)
}

/// The session id of `pid` (field 6 of /proc/PID/stat).
fn session_of(pid: u32) -> u32 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(3).unwrap().parse().unwrap()
}

/// Boot `boot` is running as the state says: a UUID boot id, the script started
/// with it (argv, env, cwd), its pid the boot group; returns (boot id, pgid).
fn assert_booted(m: &Machine, out: &Path, boot: u32, escape: bool) -> (String, u32) {
    let st = m.state();
    assert!(st.on, "{st:?}");
    assert_eq!(st.boots, boot);
    let id = st.boot_id.clone().unwrap();
    let parts: Vec<usize> = id.split('-').map(str::len).collect();
    assert_eq!(parts, [8, 4, 4, 4, 12], "{id}");
    assert!(
        id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
        "{id}"
    );
    let pgid = st.boot_pgid.unwrap();
    let dir = m.dir.to_str().unwrap();
    let flag = if escape { "escape\n" } else { "" };
    let want_argv = format!("{}\n{flag}--simulated-boot-id\n{id}\n", out.display());
    let argv_done = wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(out.join("argv")).is_ok_and(|a| a == want_argv)
    });
    assert!(argv_done, "{:?}", std::fs::read_to_string(out.join("argv")));
    assert_eq!(recorded(out, "env"), format!("{id}\n"));
    assert_eq!(recorded(out, "cwd"), format!("{dir}\n"));
    assert!(running(pgid));
    assert_eq!(
        session_of(pgid),
        pgid,
        "the boot runs in a session of its own"
    );
    assert!(is_mountpoint(&m.mnt));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts = plugpull::probe::mountinfo::parse(&info);
    let mine = mounts
        .iter()
        .find(|x| x.mountpoint == m.mnt.to_str().unwrap())
        .unwrap();
    // The source names the machine's fault model (machine.json's `mode`).
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(m.dir.join("machine.json")).unwrap())
            .unwrap();
    let source = format!("plugpull-simfs:{}", spec["mode"].as_str().unwrap());
    assert_eq!(
        (mine.fstype.as_str(), mine.source.as_str()),
        ("fuse", source.as_str())
    );
    let writing = wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(m.mnt.join("counter")).is_ok_and(|c| c.lines().count() >= 3)
    });
    assert!(writing, "the boot script writes to the mount");
    (id, pgid)
}

/// After `off`: not mounted, no process of the boot tree, the state off, and boot
/// `boot`'s ground truth a cut in `mode` with seed 5 + boot.
fn assert_cut(m: &Machine, pids: &[u32], boot: u32, mode: &str) {
    let st = m.state();
    assert!(
        !st.on && st.boot_pgid.is_none() && st.simfs_pid.is_none(),
        "{st:?}"
    );
    assert_eq!(st.boots, boot);
    assert!(!is_mountpoint(&m.mnt));
    for &p in pids {
        assert!(!running(p), "process {p} survived off");
    }
    let truth = m.truth(boot);
    assert!(truth.summary.cut, "{:?}", truth.summary);
    assert_eq!(truth.summary.mode, mode);
    assert_eq!(truth.summary.seed, 5 + u64::from(boot));
    assert!(truth.summary.writes_total > 0, "{:?}", truth.summary);
}

#[test]
fn sim_on_off_on_across_processes() {
    if skip_without_fuse("sim_on_off_on_across_processes") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let m = machine(tmp.path(), "honest", true);
    let uri = m.uri.clone();
    assert_eq!(ok(&uri, "status"), "off\n");
    assert_eq!(m.boots(), 0);
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, simulated)\n"));
    assert_eq!(ok(&uri, "status"), "on\n");
    let (id1, pgid1) = assert_booted(&m, &out, 1, true);
    assert_eq!(recorded(&out, "pid"), format!("{pgid1}\n"));
    let escaped: u32 = recorded(&out, "escaped").trim().parse().unwrap();
    assert!(running(escaped));
    assert_ne!(
        session_of(escaped),
        pgid1,
        "the escapee left the boot's session"
    );
    // Orphaned by its `sh -c`, it was taken in by the boot process (a subreaper).
    assert_eq!(proc::stat_of(escaped).map(|s| s.1), Some(pgid1));

    // Already on: nothing changes.
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, simulated)\n"));
    assert_eq!(m.state().boot_id, Some(id1.clone()));
    assert_eq!((m.boots(), m.state().boot_pgid), (1, Some(pgid1)));

    // The whole tree at the cut: the script, its `sleep 0.05`, the escapee.
    let tree = proc::group_tree(pgid1, None);
    assert!(tree.contains(&pgid1) && tree.contains(&escaped), "{tree:?}");
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, simulated)\n"));
    assert_cut(&m, &tree, 1, "honest");
    assert!(proc::group_tree(pgid1, None).is_empty());
    assert_eq!(ok(&uri, "status"), "off\n");
    // Already off: nothing changes.
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, simulated)\n"));
    assert_eq!(m.boot_id(), Some(id1.clone()));

    let o = power(&uri, "on", true);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"uri": uri, "kind": "simulated", "action": "on", "ok": true})
    );
    let (id2, pgid2) = assert_booted(&m, &out, 2, true);
    assert_ne!(id2, id1);
    assert_ne!(pgid2, pgid1);
    let o = power(&uri, "status", true);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"uri": uri, "kind": "simulated", "action": "status", "ok": true,
                           "state": "on", "load_w": null})
    );
    let escaped2: u32 = recorded(&out, "escaped").trim().parse().unwrap();
    assert_ne!(escaped2, escaped);
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, simulated)\n"));
    assert_cut(&m, &[pgid2, escaped2], 2, "honest");
    assert_eq!(m.boot_id(), Some(id2));
}

#[test]
fn sim_crash_is_named_and_off_still_cuts() {
    if skip_without_fuse("sim_crash_is_named_and_off_still_cuts") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let m = machine(tmp.path(), "lying", false);
    let uri = m.uri.clone();
    ok(&uri, "on");
    let (_, pgid) = assert_booted(&m, &tmp.path().join("out"), 1, false);
    // SAFETY: kill(2) of the boot's own process group.
    unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
    assert!(wait_for(Duration::from_secs(10), || !running(pgid)));
    let dir = m.dir.display();
    let crashed = format!(
        "plugpull: simfs: the simulated machine crashed: {dir}/machine-state.json says on \
         (boot 1), but no process of its boot group {pgid} runs; {dir}/boot-1.log ends:\n"
    );
    let e = fails(&uri, "status");
    assert!(e.starts_with(&crashed), "{e}");
    let e = fails(&uri, "on");
    assert!(e.starts_with(&crashed), "{e}");
    assert!(
        e.ends_with(&format!(
            "\nturn it off first: plugpull power --power {uri} off\n"
        )),
        "{e}"
    );
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, simulated)\n"));
    assert_cut(&m, &[pgid], 1, "lying");
}

#[test]
fn sim_missing_or_bad_machine_json_and_failed_mounts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let uri = format!("simfs://{}/mnt", dir.display());
    let missing = format!(
        "plugpull: simfs: {}/machine.json not found: the simulated machine is set up by \
         `plugpull demo --cuts` or the tests (see docs/power.md)\n",
        dir.display()
    );
    for action in ["on", "off", "status"] {
        assert_eq!(fails(&uri, action), missing, "{action}");
    }
    let o = power(&uri, "status", true);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let error = missing.strip_prefix("plugpull: ").unwrap().trim_end();
    assert_eq!(v, serde_json::json!({"ok": false, "error": error}));

    std::fs::write(dir.join("machine.json"), "{\"mode\": \"honest\"").unwrap();
    assert_eq!(
        fails(&uri, "status"),
        format!(
            "plugpull: simfs: {}/machine.json is not a machine description: EOF while \
             parsing an object at line 1 column 17\n",
            dir.display()
        )
    );

    // simfs refuses its arguments: `on` quotes its log and the machine stays off.
    let m = Machine::create(&dir, "honest", 1, &["--bogus"], &["/bin/true"]);
    let e = fails(&m.uri, "on");
    let head = format!(
        "plugpull: simfs: plugpull-simfs mount at {} exited with exit status: 2 without \
         mounting; {}/simfs.log ends:\n",
        m.mnt.display(),
        dir.display()
    );
    assert!(e.starts_with(&head), "{e}");
    assert!(e.contains("unexpected argument '--bogus'"), "{e}");
    assert_eq!(ok(&m.uri, "status"), "off\n");
    assert_eq!(m.boots(), 0);
}

#[test]
fn sim_boot_command_that_cannot_start_leaves_it_off() {
    if skip_without_fuse("sim_boot_command_that_cannot_start_leaves_it_off") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let m = Machine::create(
        &tmp.path().join("m"),
        "honest",
        1,
        &[],
        &["/nonexistent/agent"],
    );
    assert_eq!(
        fails(&m.uri, "on"),
        format!(
            "plugpull: simfs: cannot start the boot command /nonexistent/agent (from \
             {}/machine.json): No such file or directory (os error 2)\n",
            m.dir.display()
        )
    );
    assert!(!is_mountpoint(&m.mnt));
    assert_eq!(ok(&m.uri, "status"), "off\n");
    let st = m.state();
    assert!(
        !st.on && st.simfs_pid.is_none() && st.boot_id.is_none(),
        "{st:?}"
    );
}

#[test]
fn sim_driver_in_process_reaps_what_it_started() {
    if skip_without_fuse("sim_driver_in_process_reaps_what_it_started") {
        return;
    }
    // A campaign controller drives the machine through the library: it is then the
    // parent of simfs and of the boot process, and `off` leaves no zombie of them.
    let tmp = tempfile::tempdir().unwrap();
    let m = machine(tmp.path(), "honest", false);
    let uri = plugpull::power::PowerUri::parse(&m.uri).unwrap();
    let driver = plugpull_client::power::open(&uri).unwrap();
    assert_eq!(driver.kind(), plugpull::power::CutKind::Simulated);
    driver.on().unwrap();
    let (_, pgid) = assert_booted(&m, &tmp.path().join("out"), 1, false);
    let simfs = m.state().simfs_pid.unwrap();
    assert_eq!(proc::stat_of(simfs).map(|s| s.1), Some(std::process::id()));
    assert_eq!(
        driver.status().unwrap().state,
        plugpull::power::PowerState::On
    );
    driver.off().unwrap();
    assert_cut(&m, &[pgid, simfs], 1, "honest");
    assert_eq!((proc::stat_of(pgid), proc::stat_of(simfs)), (None, None));
}

#[test]
fn sim_freeze_and_kill_a_tree_that_left_its_group() {
    // No FUSE needed: the rig's process-tree cut on its own. A shell in a session of
    // its own starts a child in its group and one that leaves it (setsid).
    let tmp = tempfile::tempdir().unwrap();
    let pids = tmp.path().join("pids");
    let mut c = proc::session_command("/bin/sh");
    c.arg("-c")
        .arg("sleep 1000 & a=$!; setsid sleep 1000 & echo $a $! > \"$1\"; wait")
        .arg("sh")
        .arg(&pids)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut sh = c.spawn().unwrap();
    let group = sh.id();
    let _guard = KillTree(group);
    assert!(wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(&pids).is_ok_and(|t| t.ends_with('\n'))
    }));
    let text = std::fs::read_to_string(&pids).unwrap();
    let kids: Vec<u32> = text
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // `$!` is known before the child has called setsid(2): wait until it has.
    assert!(
        wait_for(Duration::from_secs(10), || session_of(kids[1]) != group),
        "process {} never left session {group}",
        kids[1]
    );
    let mut tree = proc::group_tree(group, None);
    tree.sort();
    let mut want = vec![group, kids[0], kids[1]];
    want.sort();
    assert_eq!(tree, want);
    let frozen = proc::freeze_group(group, None);
    assert_eq!(frozen.len(), 3);
    for &p in &frozen {
        assert_eq!(proc::stat_of(p).map(|s| s.0), Some('T'), "process {p}");
    }
    assert_eq!(
        proc::kill_group(Some(group), None, &frozen, Duration::from_secs(10)),
        Ok(())
    );
    for p in want {
        assert!(!proc::alive(p), "process {p}");
    }
    assert!(proc::group_tree(group, None).is_empty());
    // kill_group reaped the shell, our child: nothing is left to wait for.
    let e = sh.try_wait().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECHILD));
}
