//! A campaign's headline lines, the same in `campaign status`, at the end of
//! `campaign run`, in `plugpull report --campaign` and at the top of its page: each
//! host's roll-up and bound first, then a bound pooled only over hosts whose verified
//! probes show one stack ([`Campaign::configurations`]), saying which hosts it pooled;
//! then the campaign's count of cuts and, while it runs, its plan.

use super::print::CONFIDENCE;
use plugpull::campaign::{Campaign, RollUp};
use plugpull::stats;

/// One headline line and how a page colours it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Headline {
    /// The line, as `status` prints it (indented lines start with two spaces).
    pub text: String,
    /// `pass` (valid cuts, none failed), `fail` (a valid cut failed) or `""`.
    pub class: &'static str,
}

impl Headline {
    /// A line coloured by `r`: `fail` when a valid cut failed, `pass` when valid cuts
    /// all passed, none when no cut was valid.
    fn of(text: String, r: &RollUp) -> Headline {
        let class = match (r.valid, r.failed) {
            (0, _) => "",
            (_, 0) => "pass",
            _ => "fail",
        };
        Headline { text, class }
    }

    /// An uncoloured line.
    fn plain(text: String) -> Headline {
        Headline { text, class: "" }
    }
}

/// `r`'s roll-up line headed by `head` (none for a one-host campaign), then its
/// bound and its atomic-write line, indented under it when headed.
fn block(out: &mut Vec<Headline>, head: Option<String>, r: &RollUp) {
    let indent = if head.is_some() { "  " } else { "" };
    let line = match head {
        Some(h) => format!("{h}: {}", r.line()),
        None => r.line(),
    };
    out.push(Headline::of(line, r));
    out.push(Headline::of(
        format!("{indent}{}", r.bound_line(CONFIDENCE)),
        r,
    ));
    if let Some(a) = r.atomic_line(CONFIDENCE) {
        out.push(Headline::plain(format!("{indent}{a}")));
    }
}

/// The headline lines of `c`.
///
/// One host: its roll-up, its bound (`0 of 5 valid cuts failed: the loss rate per cut
/// is below 45.1 % with 95 % confidence`), the atomic-write line when its runs
/// expected atomic writes.
///
/// Several hosts: each host's roll-up and bound (`db1: 3 cuts: …` / `  0 of 3 …`);
/// for each stack two or more hosts share, their pooled roll-up and bound (`pooled
/// over db1, db2 (their probes show one stack): …`); `not pooled: …` naming the hosts
/// that run other stacks or were not probed yet; then the campaign's count (`2 hosts:
/// 6 cuts: …`).
///
/// Then, while the campaign runs and no valid cut has failed, what its planned cuts
/// would show (`plan: …`).
pub fn headlines(c: &Campaign) -> Vec<Headline> {
    let d = &c.definition;
    let mut out = Vec::new();
    let roll = c.roll_up();
    if d.hosts.len() == 1 {
        block(&mut out, None, &roll);
    } else {
        for h in &d.hosts {
            block(
                &mut out,
                Some(h.host.clone()),
                &RollUp::of(&c.host(&h.host).cuts),
            );
        }
        let groups = c.configurations();
        for (config, hosts) in groups.iter().filter(|g| g.1.len() > 1) {
            let what = if groups.len() == 1 {
                "their probes show one stack".to_string()
            } else {
                format!("their probes show one stack: {config}")
            };
            let head = format!("pooled over {} ({what})", hosts.join(", "));
            block(&mut out, Some(head), &c.roll_up_of(hosts));
        }
        if groups.len() > 1 {
            let stacks: Vec<String> = groups
                .iter()
                .map(|(config, hosts)| format!("{}: {config}", hosts.join(", ")))
                .collect();
            out.push(Headline::plain(format!(
                "not pooled across stacks: the hosts' probes show {} stacks ({}); \
                 `plugpull campaign compare` tests two campaigns against each other",
                groups.len(),
                stacks.join("; ")
            )));
        }
        let unprobed: Vec<&str> = d
            .hosts
            .iter()
            .map(|h| h.host.as_str())
            .filter(|h| !groups.iter().any(|g| g.1.iter().any(|x| x == h)))
            .collect();
        if !unprobed.is_empty() {
            out.push(Headline::plain(format!(
                "not pooled: {} (no verified cut has shown {} stack yet)",
                unprobed.join(", "),
                if unprobed.len() == 1 { "its" } else { "their" }
            )));
        }
        out.push(Headline::of(
            format!("{} hosts: {}", d.hosts.len(), roll.line()),
            &roll,
        ));
    }
    if !c.done() && c.cancelled().is_none() && roll.failed == 0 {
        if let Ok(plan) = stats::plan_sentence(d.cuts * d.hosts.len() as u32, CONFIDENCE) {
            out.push(Headline::plain(format!("plan: {plan}")));
        }
    }
    out
}

/// The hosts one campaign-wide bound may pool: the only host, or every host when
/// their verified probes all show one stack; `None` otherwise (the `--json` `bound`
/// is then `null` and each host and configuration carries its own).
pub fn pooled(c: &Campaign) -> Option<Vec<String>> {
    let d = &c.definition;
    if d.hosts.len() == 1 {
        return Some(vec![d.hosts[0].host.clone()]);
    }
    let mut groups = c.configurations();
    (groups.len() == 1 && groups[0].1.len() == d.hosts.len()).then(|| groups.remove(0).1)
}

/// The headline as text, one line each, ending with a newline.
pub fn text(c: &Campaign) -> String {
    headlines(c).into_iter().map(|h| h.text + "\n").collect()
}
