//! Fetches a run's ledger from a listener and folds it with verify's own code
//! (`plugpull_client::ledger::fetch`: the `LedgerReader` verify reads with), then
//! computes everything verify and `plugpull report` take from the fold besides the
//! target: the cut evidence (`judge_cut`), the device-error rule and the report's
//! rate timeline. Prints a digest of those (the same for two builds that judge alike),
//! the wall time and its own peak RSS (`VmHWM`). Used by bench/fold_memory.sh to
//! measure verify's memory for a run of any length, and the time to verify a big
//! ledger's record, without a target whose blocks match the ledger.

use clap::Parser;
use plugpull::auth::Secret;
use plugpull::RunId;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Listener address.
    #[arg(long)]
    listener: String,
    /// The run whose ledger to fold.
    #[arg(long)]
    run: RunId,
}

/// This process's peak resident set, kB (`VmHWM` of /proc/self/status).
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = Args::parse();
    let start = Instant::now();
    let l = plugpull_client::ledger::fetch(&a.listener, &Secret::default(), Some(a.run), "")
        .await
        .unwrap_or_else(|e| panic!("the ledger did not fold: {e}"));
    let folded = start.elapsed().as_secs_f64();
    let missing = plugpull::verdict::cut::CanaryRead::Missing("bench".into());
    let cut = plugpull::verdict::cut::judge_cut(&l, None, missing);
    let rule = plugpull::verdict::device_error_rule(&l);
    let acks = plugpull_client::report::run::ack_times(&l);
    let (end_ms, label) = plugpull_client::report::run::run_end(&l, &acks);
    let t = plugpull_client::report::run::timeline(&acks, end_ms, label);
    let seconds = start.elapsed().as_secs_f64();
    let acknowledged: u64 = acks.iter().map(|a| a.1).sum();
    println!("acknowledgements = {acknowledged}");
    println!("milliseconds holding acknowledgements = {}", acks.len());
    if let Some(f) = &l.file_acks {
        println!(
            "blocks acknowledged = {}, table acks = {}, end ms = {}",
            f.table.acked_blocks().count(),
            f.table.acknowledged,
            f.table.end_ms
        );
    }
    println!("cut = {:?}", cut.lines());
    println!("device-error rule = {rule:?}");
    let total: f64 = t.rates.iter().sum();
    println!(
        "timeline = {} bins of {} s, rate sum {total}, end {} s ({})",
        t.rates.len(),
        t.bin_secs,
        t.end_secs,
        t.end_label
    );
    println!("fold seconds = {folded:.2}");
    println!("seconds = {seconds:.2}");
    println!("peak RSS kB = {}", peak_rss_kb());
}
