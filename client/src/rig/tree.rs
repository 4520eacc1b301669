//! Process trees of the simulated machine: find, freeze and kill a boot's processes
//! (`crate::power` `simfs://`), safely across process-id reuse.

use super::proc::{alive, all_pids, reap_exited, signal, stat3, stat_of};
use std::time::{Duration, Instant};

/// Whether process `pid`'s environment (`/proc/PID/environ`) holds `entry`
/// (`NAME=value`) exactly.
pub fn has_env(pid: u32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|b| b.split(|&c| c == 0).any(|e| e == entry.as_bytes()))
}

/// The live processes (see [`alive`]) of process group `pgid` — only those whose
/// environment holds `marker` (`NAME=value`) when given — and, transitively, their
/// live descendants, also those that left the group or session (`setsid`, as
/// PostgreSQL's backends do) while their parent chain stays in the tree.
///
/// The marker is what makes a recorded group id safe to signal later: process ids
/// are reused (`pid_max` may be 32768), so a group whose processes all died may
/// name someone else's processes by the next cut; a unique marker in the
/// environment (the simulated boot id) does not.
pub fn group_tree(pgid: u32, marker: Option<&str>) -> Vec<u32> {
    if pgid <= 1 {
        // 0 holds the kernel's threads, 1 is init's: never anyone's machine.
        return Vec::new();
    }
    let procs: Vec<(u32, u32, u32)> = all_pids()
        .into_iter()
        .filter_map(|p| {
            stat3(p)
                .filter(|s| s.0 != 'Z' && s.0 != 'X')
                .map(|s| (p, s.1, s.2))
        })
        .collect();
    let mut tree: Vec<u32> = procs
        .iter()
        .filter(|p| p.2 == pgid && marker.is_none_or(|m| has_env(p.0, m)))
        .map(|p| p.0)
        .collect();
    loop {
        let more: Vec<u32> = procs
            .iter()
            .filter(|p| !tree.contains(&p.0) && tree.contains(&p.1))
            .map(|p| p.0)
            .collect();
        if more.is_empty() {
            return tree;
        }
        tree.extend(more);
    }
}

/// Freezes [`group_tree`]`(pgid)` at once, as a power cut does: SIGSTOPs every
/// process in it, again until no new one appears (one may fork before its stop),
/// then waits (up to 1 s: a process in the kernel stops when its call returns) until
/// each one is stopped (`T`) or gone. Returns the processes sent SIGSTOP.
pub fn freeze_group(pgid: u32, marker: Option<&str>) -> Vec<u32> {
    let mut stopped: Vec<u32> = Vec::new();
    loop {
        let fresh: Vec<u32> = group_tree(pgid, marker)
            .into_iter()
            .filter(|p| !stopped.contains(p))
            .collect();
        if fresh.is_empty() {
            let end = Instant::now() + Duration::from_secs(1);
            let still =
                |p: &u32| stat_of(*p).is_some_and(|s| !matches!(s.0, 'T' | 't' | 'Z' | 'X'));
            while stopped.iter().any(still) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(2));
            }
            return stopped;
        }
        for &p in &fresh {
            signal(p, rustix::process::Signal::STOP, false);
        }
        stopped.extend(fresh);
    }
}

/// Reaps `pid` if it is our child and has exited (a zombie); never blocks.
pub fn reap(pid: u32) {
    if !alive(pid) {
        reap_exited(pid);
    }
}

/// SIGKILLs `pids` and what [`group_tree`]`(pgid)` still finds (when `pgid` is
/// given), reaps those that are our children, and waits up to `limit` until none is
/// [`alive`]. `Err` lists the survivors.
pub fn kill_group(
    pgid: Option<u32>,
    marker: Option<&str>,
    pids: &[u32],
    limit: Duration,
) -> Result<(), Vec<u32>> {
    let end = Instant::now() + limit;
    let mut victims = pids.to_vec();
    loop {
        for p in pgid.map(|g| group_tree(g, marker)).unwrap_or_default() {
            if !victims.contains(&p) {
                victims.push(p);
            }
        }
        for &v in &victims {
            // Only a live one is signalled, so a reused pid is not hit later.
            if alive(v) {
                signal(v, rustix::process::Signal::KILL, false);
            }
            reap_exited(v);
        }
        std::thread::sleep(Duration::from_millis(10));
        let left: Vec<u32> = victims.iter().copied().filter(|&v| alive(v)).collect();
        if left.is_empty() {
            victims.iter().for_each(|&v| reap(v));
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(left);
        }
    }
}
