//! The baseline of `bench/file.sh`: the least a durability test can do per write.
//! Each of `--jobs` threads owns every N-th block (as plugpull does), picks one at
//! random, `pwrite`s a fixed random block there and calls `fdatasync`; no records,
//! no checksums, no reporting. Prints `writes/s = X` and `writes = N` at the end.

use clap::Parser;
use plugpull::units::{parse_duration, parse_size};
use rand::{Rng, SeedableRng};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// Existing file to write (preallocate it first).
    #[arg(long)]
    target: std::path::PathBuf,
    /// Bytes of the file to use.
    #[arg(long, value_parser = parse_size)]
    size: u64,
    /// Bytes per write.
    #[arg(long, default_value = "4096", value_parser = parse_size)]
    block_size: u64,
    /// Threads.
    #[arg(long, default_value_t = 1)]
    jobs: u64,
    /// How long to run.
    #[arg(long, value_parser = parse_duration)]
    duration: Duration,
}

fn main() {
    let a = Args::parse();
    let blocks = a.size / a.block_size;
    let start = Instant::now();
    let end = start + a.duration;
    let handles: Vec<_> = (0..a.jobs)
        .map(|j| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&a.target)
                .expect("open target");
            let (bs, jobs) = (a.block_size, a.jobs);
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(j);
                let buf: Vec<u8> = (0..bs).map(|_| rng.random()).collect();
                let own = (blocks - j).div_ceil(jobs);
                let mut n = 0u64;
                while Instant::now() < end {
                    let b = rng.random_range(0..own) * jobs + j;
                    f.write_all_at(&buf, b * bs).expect("pwrite");
                    f.sync_data().expect("fdatasync");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let n: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    println!("writes/s = {:.1}", n as f64 / start.elapsed().as_secs_f64());
    println!("writes = {n}");
}
