//! Fetches a run's ledger from a listener as `plugpull verify` does (`FetchLedger`,
//! then its `LedgerChunk`s) and keeps none of it: prints `ledger bytes = N` and
//! `seconds = S`. Used by bench/ledger_memory.sh to measure the listener's memory
//! while it serves a big ledger, apart from the verifier's.

use clap::Parser;
use plugpull::auth::Secret;
use plugpull::wire::{Request, Response};
use plugpull::RunId;
use plugpull_client::net;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Listener address.
    #[arg(long)]
    listener: String,
    /// The run whose ledger to fetch.
    #[arg(long)]
    run: RunId,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = Args::parse();
    let start = Instant::now();
    let (mut r, mut w) = net::connect(&a.listener, &Secret::default())
        .await
        .expect("connect");
    w.send(&Request::FetchLedger {
        run: Some(a.run),
        host: String::new(),
    })
    .await
    .unwrap();
    w.flush().await.unwrap();
    let mut total = 0u64;
    loop {
        match r.recv().await.unwrap() {
            Response::LedgerChunk { bytes, last, .. } => {
                total += bytes.len() as u64;
                if last {
                    break;
                }
            }
            other => panic!("listener answered FetchLedger with {other:?}"),
        }
    }
    println!("ledger bytes = {total}");
    println!("seconds = {:.2}", start.elapsed().as_secs_f64());
}
