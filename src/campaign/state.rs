//! A campaign's state as a pure function of its definition and events: what each
//! host's agent must do next, where each host's controller resumes, the roll-up.

use super::{CutRecord, Definition, Event, Instruction, Outcome, Pulling, RollUp, Validity};
use crate::RunId;

/// A campaign: its definition and its events, in the order they were recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Campaign {
    /// The plan.
    pub definition: Definition,
    /// Every recorded event, oldest first.
    pub events: Vec<Event>,
}

/// One run set an agent started.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSet {
    /// 1, 2, …
    pub number: u32,
    /// Its runs, in workload order.
    pub runs: Vec<RunId>,
    /// The boot id they started under.
    pub boot_id: String,
    /// When they started (agent clock), ms since the epoch.
    pub at_ms: u64,
}

/// The verify of one run set.
#[derive(Clone, Debug, PartialEq)]
pub struct Verification {
    /// The run set.
    pub number: u32,
    /// One outcome per run.
    pub outcomes: Vec<Outcome>,
    /// The boot id of the agent that verified.
    pub boot_id: String,
}

/// What the events say of one host.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostView {
    /// Every boot id announced, oldest first, with when (listener clock).
    pub boots: Vec<(String, u64)>,
    /// The run sets started, oldest first.
    pub run_sets: Vec<RunSet>,
    /// The run sets verified.
    pub verified: Vec<Verification>,
    /// The judged cuts, oldest first.
    pub cuts: Vec<CutRecord>,
    /// The cut in progress: pulled (or about to be) but not judged yet.
    pub pulling: Option<Pulling>,
    /// What the controller saw after "off" of the cut in progress.
    pub pulled: Option<Event>,
    /// When the controller called "on" for the cut in progress (listener clock), once
    /// it recorded doing so.
    pub restored: Option<u64>,
    /// The last refusal after the last run set started, if any.
    pub refused: Option<String>,
    /// The last pause after the last judged cut and the last controller start, if any.
    pub paused: Option<String>,
}

impl HostView {
    /// The newest boot id announced, if any.
    pub fn boot_id(&self) -> Option<&str> {
        self.boots.last().map(|(b, _)| b.as_str())
    }

    /// The verification of run set `number`, if it was verified.
    pub fn verification(&self, number: u32) -> Option<&Verification> {
        self.verified.iter().find(|v| v.number == number)
    }

    /// The newest run set, when it has not been verified (it is running, or it was
    /// cut and awaits its verify).
    pub fn open_run_set(&self) -> Option<&RunSet> {
        self.run_sets
            .last()
            .filter(|s| self.verification(s.number).is_none())
    }

    /// Cuts made: judged, plus the one in progress.
    pub fn cuts_made(&self) -> u32 {
        self.cuts.len() as u32 + u32::from(self.pulling.is_some())
    }

    /// When `boot_id` was first announced after `after_ms` (listener clock) and
    /// differs from `old`: the machine came back.
    pub fn came_back(&self, old: &str, after_ms: u64) -> Option<&str> {
        self.boots
            .iter()
            .find(|(b, at)| b != old && *at >= after_ms)
            .map(|(b, _)| b.as_str())
    }
}

impl Campaign {
    /// The events of `host`, folded.
    pub fn host(&self, host: &str) -> HostView {
        let mut v = HostView::default();
        let mine = |e: &&Event| e.host() == host || matches!(e, Event::Controller { .. });
        for e in self.events.iter().filter(mine) {
            match e {
                Event::Booted { boot_id, at_ms, .. } => v.boots.push((boot_id.clone(), *at_ms)),
                Event::Started {
                    number,
                    runs,
                    boot_id,
                    at_ms,
                    ..
                } => {
                    v.refused = None;
                    v.run_sets.push(RunSet {
                        number: *number,
                        runs: runs.clone(),
                        boot_id: boot_id.clone(),
                        at_ms: *at_ms,
                    });
                }
                Event::Verified {
                    number,
                    outcomes,
                    boot_id,
                    ..
                } => v.verified.push(Verification {
                    number: *number,
                    outcomes: outcomes.clone(),
                    boot_id: boot_id.clone(),
                }),
                Event::Refused { reason, .. } => v.refused = Some(reason.clone()),
                Event::Pulling(p) => {
                    v.pulling = Some(p.clone());
                    v.pulled = None;
                    v.restored = None;
                }
                Event::Pulled { .. } => v.pulled = Some(e.clone()),
                Event::Restored { on_at_ms, .. } => v.restored = Some(*on_at_ms),
                Event::Cut(c) => {
                    if v.pulling.as_ref().is_some_and(|p| p.index == c.index) {
                        v.pulling = None;
                        v.pulled = None;
                        v.restored = None;
                    }
                    v.paused = None;
                    v.cuts.push(c.clone());
                }
                Event::Paused { reason, .. } => v.paused = Some(reason.clone()),
                // A new controller resumes every paused host.
                Event::Controller { .. } => v.paused = None,
                Event::Cancelled { .. } => {}
                Event::Ended { number, detail, .. } => {
                    // Not ended by a cut of real power: the host stops (no new run
                    // set) until a controller starts again.
                    let cut = v.pulling.as_ref().is_some_and(|p| p.number == *number)
                        || v.cuts.iter().any(|c| {
                            c.number == *number && !matches!(c.validity, Validity::NotMeasured(_))
                        });
                    if !cut {
                        v.paused = Some(format!("run set {number} ended before its cut: {detail}"));
                    }
                }
            }
        }
        v
    }

    /// What `host`'s agent does next: verify its open run set (a run set still open
    /// when its agent asks was ended by a cut or a restart), start the next run set
    /// while the campaign wants more cuts of this host, or wait.
    pub fn next_for(&self, host: &str) -> Instruction {
        let name = self.definition.name.clone();
        if !self.definition.hosts.iter().any(|h| h.host == host) {
            return Instruction::Wait {
                reason: format!("host {host:?} is not in campaign {name:?}"),
            };
        }
        let v = self.host(host);
        if let Some(s) = v.open_run_set() {
            return Instruction::Verify {
                campaign: name,
                number: s.number,
                runs: s.runs.clone(),
                workloads: self.definition.workloads.clone(),
            };
        }
        if let Some(why) = self.cancelled() {
            return Instruction::Wait {
                reason: format!("campaign {name:?} was cancelled: {why}"),
            };
        }
        if let Some(why) = &v.paused {
            return Instruction::Wait {
                reason: format!("campaign {name:?} is paused for {host}: {why}"),
            };
        }
        if v.cuts_made() >= self.definition.cuts {
            return Instruction::Wait {
                reason: format!(
                    "campaign {name:?} has made its {} cuts of {host}",
                    self.definition.cuts
                ),
            };
        }
        Instruction::Run {
            campaign: name,
            number: v.run_sets.len() as u32 + 1,
            workloads: self.definition.workloads.clone(),
        }
    }

    /// Why the campaign was cancelled, if it was.
    pub fn cancelled(&self) -> Option<&str> {
        self.events.iter().find_map(|e| match e {
            Event::Cancelled { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
    }

    /// The id of the newest controller, if one ever started.
    pub fn controller(&self) -> Option<u64> {
        self.events.iter().rev().find_map(|e| match e {
            Event::Controller { id, .. } => Some(*id),
            _ => None,
        })
    }

    /// Whether `e` may be appended now: a controller's records must follow its
    /// cuts in order — `Pulling` for the next cut of a host with none in progress, of
    /// a run set that exists; `Pulled` and `Cut` for the cut in progress (once each);
    /// `Restored` for the cut in progress once pulled (once).
    /// Two controllers racing, or one replaying, are refused here.
    ///
    /// Errors: why the event does not fit.
    pub fn check_append(&self, e: &Event) -> Result<(), String> {
        let host = e.host();
        if !host.is_empty() && !self.definition.hosts.iter().any(|h| h.host == host) {
            return Err(format!(
                "host {host:?} is not in campaign {:?}",
                self.definition.name
            ));
        }
        let v = self.host(host);
        let next = v.cuts.len() as u32 + 1;
        let in_progress = v.pulling.as_ref().map(|p| p.index);
        match e {
            Event::Pulling(p) => {
                if let Some(why) = self.cancelled() {
                    return Err(format!(
                        "campaign {:?} was cancelled ({why}): no more cuts",
                        self.definition.name
                    ));
                }
                if let Some(i) = in_progress {
                    return Err(format!(
                        "cut {i} of {host} is in progress: cut {} cannot start",
                        p.index
                    ));
                }
                if p.index != next {
                    return Err(format!("the next cut of {host} is {next}, not {}", p.index));
                }
                if !v
                    .run_sets
                    .iter()
                    .any(|s| s.number == p.number && s.runs == p.runs)
                {
                    return Err(format!(
                        "{host} has no run set {} with those runs",
                        p.number
                    ));
                }
            }
            Event::Pulled { index, .. }
            | Event::Restored { index, .. }
            | Event::Cut(CutRecord { index, .. }) => {
                if in_progress != Some(*index) {
                    return Err(format!("cut {index} of {host} is not in progress"));
                }
                if matches!(e, Event::Pulled { .. }) && v.pulled.is_some() {
                    return Err(format!("cut {index} of {host} was pulled already"));
                }
                if matches!(e, Event::Restored { .. }) {
                    if v.pulled.is_none() {
                        return Err(format!("cut {index} of {host} was not pulled yet"));
                    }
                    if v.restored.is_some() {
                        return Err(format!("cut {index} of {host} was restored already"));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The storage configuration `host` was last verified on: each run's
    /// `storage.probe.configuration` (see [`super::judge::slim_report`]), distinct,
    /// joined with ` + `; `None` before its first verify or when no run was probed.
    pub fn configuration(&self, host: &str) -> Option<String> {
        let v = self.host(host);
        let last = v.verified.last()?;
        let mut configs: Vec<String> = Vec::new();
        for o in &last.outcomes {
            let r: serde_json::Value = serde_json::from_str(&o.report_json).ok()?;
            if let Some(c) = r
                .pointer("/storage/probe/configuration")
                .and_then(|c| c.as_str())
            {
                if !configs.iter().any(|x| x == c) {
                    configs.push(c.to_string());
                }
            }
        }
        (!configs.is_empty()).then(|| configs.join(" + "))
    }

    /// The hosts grouped by configuration ([`Campaign::configuration`]), in the
    /// definition's order of their first host; hosts not verified yet are left out.
    pub fn configurations(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for h in &self.definition.hosts {
            let Some(c) = self.configuration(&h.host) else {
                continue;
            };
            match groups.iter_mut().find(|g| g.0 == c) {
                Some(g) => g.1.push(h.host.clone()),
                None => groups.push((c, vec![h.host.clone()])),
            }
        }
        groups
    }

    /// What an agent said since controller `me` started (its [`Event::Controller`]) that
    /// stops the host: a refusal, or a run set that ended before its cut (not one a cut
    /// of real power ended: a drive-only cut ends its runs with the agent still up).
    pub fn news_since(&self, me: u64, host: &str) -> Option<String> {
        let from = self
            .events
            .iter()
            .position(|e| matches!(e, Event::Controller { id, .. } if *id == me))?;
        let v = self.host(host);
        let cut_for_real = |n: u32| {
            v.cuts
                .iter()
                .any(|k| k.number == n && !matches!(k.validity, Validity::NotMeasured(_)))
                || v.pulling.as_ref().is_some_and(|p| p.number == n)
        };
        self.events[from..].iter().find_map(|e| match e {
            Event::Refused {
                host: h, reason, ..
            } if h == host => Some(format!("the agent refused: {reason}")),
            Event::Ended {
                host: h,
                number,
                detail,
                ..
            } if h == host && !cut_for_real(*number) => {
                Some(format!("run set {number} ended before its cut: {detail}"))
            }
            _ => None,
        })
    }

    /// Every judged cut, host by host in the definition's order, oldest first.
    pub fn cuts(&self) -> Vec<CutRecord> {
        self.definition
            .hosts
            .iter()
            .flat_map(|h| self.host(&h.host).cuts)
            .collect()
    }

    /// The roll-up over all hosts.
    pub fn roll_up(&self) -> RollUp {
        RollUp::of(&self.cuts())
    }

    /// The roll-up of the cuts of `hosts` (a configuration's, a pool's), host by
    /// host in the given order.
    pub fn roll_up_of(&self, hosts: &[String]) -> RollUp {
        let cuts: Vec<CutRecord> = hosts.iter().flat_map(|h| self.host(h).cuts).collect();
        RollUp::of(&cuts)
    }

    /// True when every host has all its cuts judged, or the campaign was cancelled.
    pub fn done(&self) -> bool {
        self.cancelled().is_some()
            || self
                .definition
                .hosts
                .iter()
                .all(|h| self.host(&h.host).cuts.len() as u32 >= self.definition.cuts)
    }
}
