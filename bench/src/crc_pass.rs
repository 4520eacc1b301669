//! The CPU a CRC-32 pass over a target's bytes costs by itself: `--mib` MiB hashed
//! 512 bytes at a time with crc32fast (as verify checks each sector), from a 4 MiB
//! buffer of random bytes hashed over and over, on one thread, nothing read. Prints
//! `cpu_s = S` (user+sys seconds of this process, getrusage) and `mib = N`. Used by
//! bench/verify_speed.sh: verify's CPU per GiB is compared with fio's plus this.

use clap::Parser;
use rand::RngCore;

#[derive(Parser)]
struct Args {
    /// MiB to hash.
    #[arg(long)]
    mib: u64,
}

/// User+sys CPU seconds of this process so far.
fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

fn main() {
    let args = Args::parse();
    let mut buf = vec![0u8; 4 << 20];
    rand::rng().fill_bytes(&mut buf);
    let start = cpu_s();
    let mut x = 0u32;
    for _ in 0..args.mib.div_ceil(4) {
        for s in buf.chunks_exact(512) {
            x ^= crc32fast::hash(s);
        }
    }
    let cpu = cpu_s() - start;
    println!("cpu_s = {cpu:.4}");
    println!("mib = {}", args.mib);
    // Printed so the hashing cannot be optimised away.
    println!("xor of the crcs = {x:08x}");
}
