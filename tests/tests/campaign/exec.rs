//! Campaigns whose machine is a shell script (`exec:` driver): a refused target, a
//! driver that cuts nothing, a machine that does not come back, the listener's
//! durable record across a restart.

use super::*;
use plugpull_tests::wait_for;
use std::path::Path;
use std::time::Duration;

/// The script machine: `on` starts the agent for `host` with a new boot id in its
/// own process group (pid in `DIR/pgid`), `off` SIGKILLs the group and zeroes the
/// volatile canaries in the witness's directory (where its file targets live): the
/// memory a real power cut would take, taken by hand. With
/// `cuts_nothing`, `off` does nothing; with `stays_off`, `on` does nothing once the
/// machine was off. Its driver has no status action ([`machine_with_status`] has).
fn machine(w: &Witness, host: &str, cuts_nothing: bool, stays_off: bool) -> String {
    machine_with(w, host, cuts_nothing, stays_off, false)
}

pub(super) fn machine_with(
    w: &Witness,
    host: &str,
    cuts_nothing: bool,
    stays_off: bool,
    status: bool,
) -> String {
    let d = w.path(host);
    std::fs::create_dir_all(&d).unwrap();
    let argv = w.agent_argv(host).join(" ");
    let off = if cuts_nothing && status {
        "echo off-ignored >> $D/log; echo off > $D/state".to_string()
    } else if cuts_nothing {
        "echo off-ignored >> $D/log".to_string()
    } else {
        // Only the agent's own group: a process id may be reused once it is gone.
        // (`kill` here is dash's builtin, which takes `-PGID`; never /usr/bin/kill.)
        "P=$(cat $D/pgid 2>/dev/null); [ -n \"$P\" ] && grep -q simulated-boot-id /proc/$P/cmdline 2>/dev/null && kill -KILL -$P; rm -f $D/pgid; for f in $D/../.plugpull-canary-*; do [ -f \"$f\" ] && truncate -s 0 \"$f\" && truncate -s 65536 \"$f\"; done; echo off > $D/state".into()
    };
    let on_guard = if stays_off {
        "[ -f $D/state ] && exit 0;"
    } else {
        ""
    };
    let status = if status {
        "status) [ -f $D/state ] && echo off || echo on ;;\n"
    } else {
        ""
    };
    let body = format!(
        "D={d}\ncase \"$1\" in\noff) {off} ;;\non) {on_guard} [ -f $D/pgid ] && exit 0; setsid {argv} --simulated-boot-id $(cat /proc/sys/kernel/random/uuid) >> $D/agent.log 2>&1 < /dev/null & echo $! > $D/pgid; rm -f $D/state ;;\n{status}esac\n",
        d = d.display()
    );
    let s = script(&d, "power", &body);
    format!("exec:{} {{action}}", s.display())
}

/// Stops whatever the script machine left running.
pub(super) struct Off(pub(super) PathBuf);
impl Drop for Off {
    fn drop(&mut self) {
        if let Ok(p) = std::fs::read_to_string(self.0.join("pgid")) {
            let p = p.trim();
            // Only the agent's own group: a process id may be reused once it is gone.
            let ours = std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("simulated-boot-id"));
            // kill(2) on the group, never /usr/bin/kill: procps's `kill -KILL -PGID`
            // without `--` reads the group as an option and signals every process
            // (kill(-1)), which is how this guard once took the machine down.
            let pgid: i32 = p.parse().unwrap_or(0);
            if ours && pgid > 1 {
                // SAFETY: kill(2) with integer arguments, on a group checked above.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
        }
    }
}

pub(super) fn power_on(uri: &str) {
    let s = uri.strip_prefix("exec:").unwrap().replace("{action}", "on");
    let st = std::process::Command::new("sh")
        .args(["-c", &s])
        .status()
        .unwrap();
    assert!(st.success());
}

/// Creates campaign `name`, one cut of host `h1` behind `uri` with workload `wl`
/// (boot timeout 5 s), powers the machine on and runs the campaign.
fn one_cut(w: &Witness, name: &str, uri: &str, wl: &str) -> std::process::Output {
    let o = w.campaign(
        "create",
        &[
            "--name",
            name,
            "--host",
            "h1",
            "--power",
            uri,
            "--workload",
            wl,
            "--cuts",
            "1",
            "--boot-timeout",
            "5s",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    power_on(uri);
    w.campaign("run", &["--name", name])
}

/// An agent whose configuration does not list the campaign's target refuses it,
/// logs why, writes nothing; the controller pauses and exits 2 naming the refusal.
#[test]
fn a_target_the_agent_does_not_list_is_refused() {
    let w = Witness::start(&["allowed.dat"]);
    let uri = machine(&w, "h1", false, false);
    let _off = Off(w.path("h1"));
    let target = w.path("other.dat");
    let wl = format!("file --target {} --size 1MiB", target.display());
    let o = one_cut(&w, "r", &uri, &wl);
    let why = format!(
        "the agent refused: target {} is not in {}'s `targets`: this agent writes only the targets listed there",
        target.display(),
        w.config.display()
    );
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        format!("plugpull: campaign r stopped: h1: {why}; rerun `plugpull campaign run --name r` to resume")
    );
    assert!(!target.exists(), "the refused target was created");
    let log = std::fs::read_to_string(w.path("h1/agent.log")).unwrap();
    assert!(
        log.contains(&format!("refused run set 1: target {}", target.display())),
        "{log}"
    );
    let v = w.status("r");
    assert_eq!(v["hosts"][0]["paused"], json!(why));
    assert_eq!(v["cuts"], json!([]));
}

/// Issue 42, item 2: a symlink planted at a listed path (by user `nobody`, in a
/// world-writable directory) pointing into a root-only directory: the root agent
/// refuses the target naming the directory others can write, and writes nothing —
/// neither the link's target nor anything through it.
#[test]
fn a_symlink_planted_at_a_listed_path_is_refused_and_nothing_is_written() {
    if !plugpull_tests::is_root() {
        plugpull_tests::skipped(
            "a_symlink_planted_at_a_listed_path_is_refused_and_nothing_is_written",
            "needs root to plant a symlink owned by another user",
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let w = Witness::start(&["open/t.dat"]);
    let open = w.path("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let secret = w.path("rootonly");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let target = open.join("t.dat");
    std::os::unix::fs::symlink(secret.join("nologin"), &target).unwrap();
    std::os::unix::fs::lchown(&target, Some(65534), Some(65534)).unwrap();
    let uri = machine(&w, "h1", false, false);
    let _off = Off(w.path("h1"));
    let wl = format!("file --target {} --size 1MiB", target.display());
    let o = one_cut(&w, "s", &uri, &wl);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let why = format!(
        "the agent refused: target {} is refused: directory {} is writable by others (mode 0777): anyone who can write there can make the agent (root) write elsewhere with a symlink (sshd's StrictModes rule); keep the target under directories only root can write",
        target.display(),
        open.display()
    );
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        format!("plugpull: campaign s stopped: h1: {why}; rerun `plugpull campaign run --name s` to resume")
    );
    assert_eq!(
        std::fs::read_dir(&secret).unwrap().count(),
        0,
        "written through the link"
    );
    assert_eq!(
        std::fs::read_dir(&open).unwrap().count(),
        1,
        "only the planted link"
    );
}

/// `plugpull write` processes whose command line names `target`.
fn writers_of(target: &Path) -> usize {
    let t = target.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(" write file ") && c.contains(&t))
        .count()
}

/// Issue 42, item 3: `campaign cancel` stops the agent's runs within seconds and
/// frees it: cancelled while its run set writes, no writer is left, and the next
/// campaign for the host gets its cut.
#[test]
fn cancel_stops_the_runs_and_frees_the_agent_for_the_next_campaign() {
    let w = Witness::start(&["t.dat"]);
    let uri = machine(&w, "h1", false, false);
    let _off = Off(w.path("h1"));
    let target = w.path("t.dat");
    let wl = format!("file --target {} --size 1MiB", target.display());
    let plan = |name: &'static str, after: &'static str| {
        let o = w.campaign(
            "create",
            &[
                "--name",
                name,
                "--host",
                "h1",
                "--power",
                &uri,
                "--workload",
                &wl,
                "--cuts",
                "1",
                "--cut-after",
                after,
                "--off",
                "0s",
                "--boot-timeout",
                "30s",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    };
    plan("a", "120s");
    power_on(&uri);
    let mut first = w.run_in_background("a");
    let log = || std::fs::read_to_string(w.path("h1/agent.log")).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(30), || log()
            .contains("run set 1 started")),
        "{}",
        log()
    );
    assert_eq!(writers_of(&target), 1);
    let o = w.campaign("cancel", &["--name", "a", "--reason", "wrong plan"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t0 = std::time::Instant::now();
    assert!(
        wait_for(Duration::from_secs(5), || writers_of(&target) == 0),
        "the writer still runs {:.1} s after cancel",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        wait_for(Duration::from_secs(5), || log().contains(
            "run set 1 stopped: the campaign wants no more cuts (done or cancelled)"
        )),
        "{}",
        log()
    );
    let _ = first.kill();
    let _ = first.wait();
    // The agent serves the next campaign for the host.
    plan("b", "2s");
    let o = w.campaign("run", &["--name", "b"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        cuts(&w.status("b")),
        vec![(1, "valid".into(), String::new())]
    );
}

/// A driver that does not cut the machine: the agent keeps acknowledging after
/// "off", so every cut is "not measured" with that reason, nothing is verified, and
/// with no valid cut the campaign exits 2 ("nothing was measured").
#[test]
fn a_driver_that_cuts_nothing_gives_not_measured_cuts() {
    let w = Witness::start(&["t.dat"]);
    let uri = machine(&w, "h1", true, false);
    let _off = Off(w.path("h1"));
    let wl = format!("file --target {} --size 1MiB", w.path("t.dat").display());
    let args = [
        "--name",
        "n",
        "--host",
        "h1",
        "--power",
        &uri,
        "--workload",
        &wl,
    ];
    let o = w.campaign(
        "create",
        &[
            &args[..],
            &["--cuts", "2", "--cut-after", "1s", "--off", "0s"],
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    power_on(&uri);
    let o = w.campaign("run", &["--name", "n"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    // It ends as `status` does: the roll-up, then the confidence line.
    assert!(
        stdout(&o).ends_with(
            "2 cuts: 0 valid (0 failed, 0 passed), 2 not measured, 0 invalid\n\
             no valid cut: the loss rate per cut was not measured\n"
        ),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        stderr(&o),
        "plugpull: no valid cut (2 cuts: 0 valid (0 failed, 0 passed), 2 not measured, 0 invalid): nothing was measured\n"
    );
    // `status` prints the campaign (one JSON object) and exits 2 as `run` did; its
    // JUnit file holds an error, never a green build.
    let junit = w.path("n.xml");
    let o = w.campaign(
        "status",
        &["--name", "n", "--json", "--junit", junit.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert_eq!(
        stderr(&o),
        "plugpull: no valid cut (2 cuts: 0 valid (0 failed, 0 passed), 2 not measured, 0 invalid): nothing was measured\n"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(r#"<testsuites name="plugpull campaign n" tests="3" failures="0" errors="1""#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"<error message="no valid cut (2 cuts: 0 valid (0 failed, 0 passed), 2 not measured, 0 invalid): nothing was measured"/>"#),
        "{xml}"
    );
    let v = w.status("n");
    for (i, (index, validity, reason)) in cuts(&v).into_iter().enumerate() {
        assert_eq!((index, validity.as_str()), (i as u64 + 1, "not measured"));
        assert!(
            reason.starts_with("the agent kept acknowledging writes ")
                && reason
                    .ends_with(" s after the driver's off: the driver did not cut this machine"),
            "{reason}"
        );
    }
    // Both cuts interrupted the same run set, which was never verified.
    assert_eq!(v["cuts"][0]["runs"], v["cuts"][1]["runs"]);
    assert_eq!(v["hosts"][0]["cuts_judged"], json!(2));
}

/// A machine that does not come back after "on": the cut is recorded invalid with
/// the reason, the campaign pauses (exit 2), and `status` shows both. The record
/// survives a listener restart.
#[test]
fn a_machine_that_does_not_come_back_pauses_the_campaign() {
    let mut w = Witness::start(&["t.dat"]);
    let uri = machine(&w, "h1", false, true);
    let _off = Off(w.path("h1"));
    let wl = format!("file --target {} --size 1MiB", w.path("t.dat").display());
    let args = [
        "--name",
        "b",
        "--host",
        "h1",
        "--power",
        &uri,
        "--workload",
        &wl,
    ];
    let plan = [
        "--cuts",
        "3",
        "--cut-after",
        "1s",
        "--off",
        "0s",
        "--boot-timeout",
        "3s",
    ];
    assert_eq!(
        w.campaign("create", &[&args[..], &plan[..]].concat())
            .status
            .code(),
        Some(0)
    );
    power_on(&uri);
    let o = w.campaign("run", &["--name", "b"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let why = "cut 1: h1 did not come back within 3 s after power on";
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        format!("plugpull: campaign b stopped: h1: {why}; rerun `plugpull campaign run --name b` to resume")
    );
    w.listener.restart();
    let v = w.status("b");
    assert_eq!(
        cuts(&v),
        vec![(
            1,
            "invalid".into(),
            "h1 did not come back within 3 s after power on".into()
        )]
    );
    assert_eq!(v["hosts"][0]["paused"], json!(why));
    assert_eq!(v["roll_up"]["invalid"], json!(1));
    // The agent's run was killed by the "cut": nothing is left writing.
    assert!(wait_for(Duration::from_secs(5), || !w
        .path("h1/pgid")
        .exists()));
}

/// Two controllers of one campaign: the one started second takes over; the first
/// stops before its cut (exit 2, naming why), so the machine is cut once.
#[test]
fn a_second_controller_takes_over_and_the_first_stops() {
    let w = Witness::start(&["t.dat"]);
    let uri = machine(&w, "h1", false, false);
    let _off = Off(w.path("h1"));
    let wl = format!("file --target {} --size 1MiB", w.path("t.dat").display());
    let args = [
        "--name",
        "two",
        "--host",
        "h1",
        "--power",
        &uri,
        "--workload",
        &wl,
    ];
    let plan = [
        "--cuts",
        "1",
        "--cut-after",
        "3s",
        "--off",
        "0s",
        "--boot-timeout",
        "30s",
    ];
    assert_eq!(
        w.campaign("create", &[&args[..], &plan[..]].concat())
            .status
            .code(),
        Some(0)
    );
    power_on(&uri);
    let file = w.listener.data_dir.join("campaigns/two.campaign");
    let controllers = || {
        std::fs::read_to_string(&file)
            .unwrap()
            .matches("{\"Controller\"")
            .count()
    };
    let first = w.run_in_background("two");
    assert!(wait_for(Duration::from_secs(10), || controllers() == 1));
    let second = w.campaign("run", &["--name", "two"]);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let first = first.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(2));
    assert_eq!(
        stderr(&first).lines().last().unwrap(),
        "plugpull: campaign two stopped: h1: another `plugpull campaign run --name two` started: this one stops so that only one controller cuts; rerun `plugpull campaign run --name two` to resume"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.matches("{\"Pulling\"").count(), 1, "{text}");
    assert_eq!(
        cuts(&w.status("two")),
        vec![(1, "valid".into(), String::new())]
    );
}

/// A run that ends before its cut (here its `plugpull write` is killed by hand):
/// the agent records how it ended, the controller pauses naming it (exit 2), and
/// the agent starts nothing more while the campaign is paused.
#[test]
fn a_run_set_that_ends_before_its_cut_pauses_the_campaign() {
    let w = Witness::start(&["t.dat"]);
    let uri = machine(&w, "h1", false, false);
    let _off = Off(w.path("h1"));
    let target = w.path("t.dat");
    let wl = format!("file --target {} --size 1MiB", target.display());
    let args = [
        "--name",
        "e",
        "--host",
        "h1",
        "--power",
        &uri,
        "--workload",
        &wl,
    ];
    let plan = ["--cuts", "2", "--cut-after", "60s", "--boot-timeout", "30s"];
    assert_eq!(
        w.campaign("create", &[&args[..], &plan[..]].concat())
            .status
            .code(),
        Some(0)
    );
    power_on(&uri);
    let ctl = w.run_in_background("e");
    // The writer of run set 1: the process whose command line names the target.
    let writer = || -> Option<u32> {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.contains(" write file ") && cmd.contains(target.to_str()?)).then_some(pid)
        })
    };
    let mut pid = None;
    assert!(wait_for(Duration::from_secs(30), || {
        pid = writer();
        pid.is_some() && w.status("e")["hosts"][0]["boot_id"].is_string()
    }));
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill(2) with integer arguments, on the writer just found.
    unsafe { libc::kill(pid.unwrap() as i32, libc::SIGKILL) };
    let o = ctl.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let last = stderr(&o).lines().last().unwrap().to_string();
    assert!(
        last.starts_with("plugpull: campaign e stopped: h1: run set 1 ended before its cut: `plugpull write file` signal: 9 (SIGKILL)"),
        "{last}"
    );
    let v = w.status("e");
    assert_eq!(v["cuts"], json!([]));
    assert!(v["hosts"][0]["paused"]
        .as_str()
        .unwrap()
        .starts_with("run set 1 ended before its cut"));
    // Paused: the agent verified run set 1 and started no other.
    std::thread::sleep(Duration::from_secs(2));
    let log = std::fs::read_to_string(w.path("h1/agent.log")).unwrap();
    assert!(!log.contains("run set 2 started"), "{log}");
    assert!(
        log.contains("is paused for h1: run set 1 ended before its cut"),
        "{log}"
    );
}
