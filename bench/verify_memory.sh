#!/usr/bin/env bash
# Verify's peak memory against issue 45's target: peak RSS <= 64 MB + 16 bytes per
# block written, the same for a short and a long run of the same target. In one run:
# a 64 MiB target of 4 KiB blocks (16,384) on tmpfs written for SHORT seconds, then
# for LONG seconds (4 jobs, random blocks, fdatasync), each verified once with its
# peak RSS taken by /usr/bin/time; then a 16 GiB sparse target of 4 KiB blocks (4 M
# blocks) on the repository's disk (a file, so only the blocks written take space)
# written for SHORT seconds and verified: memory must not grow with the target's
# blocks, only with those written. Prints each run's acknowledgements, blocks written,
# verify's peak RSS and wall time, and "met" / "not met" against the target (one
# measurement each: RSS does not wander with the machine's load as rates do).
# Usage: bench/verify_memory.sh [SHORT=4] [LONG=60] [SPARSE_GIB=16]
set -euo pipefail
cd "$(dirname "$0")/.."
short=${1:-4}; long=${2:-60}; sparse=${3:-16}
cargo build --release --workspace -q
. bench/lib.sh
bench_setup verify-memory
# one NAME TARGET SIZE BLOCK SECONDS: writes, verifies and prints one line.
one() {
    local name=$1 t=$2 size=$3 bs=$4 secs=$5
    rm -f "$t"
    target/release/plugpull write file --listener "$addr" --target "$t" --size "$size" --block-size "$bs" \
        --jobs 4 --duration "${secs}s" --json >"$work/write.json"
    local run; run=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$work/write.json")
    /usr/bin/time -f "%e %M" -o "$work/time" target/release/plugpull verify --listener "$addr" --run "$run" --read-back --json \
        >"$work/verify.json" || { echo "bench: verify of $name did not pass:" >&2; cat "$work/verify.json" >&2; exit 1; }
    read -r wall kib <"$work/time"
    python3 - "$work/verify.json" "$name" "$wall" "$kib" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
name, wall, kib = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
written = v["blocks_checked"]
limit = 64e6 + 16 * written
rss = kib * 1024
print(f"  {name:<34} acks {v['acknowledged']:>11,}  blocks written {written:>7,}  verify peak RSS {rss / 1e6:7.1f} MB"
      f" (target {limit / 1e6:.1f} MB: {'met' if rss <= limit else 'not met'}), {rss / max(v['acknowledged'], 1):.1f} B per ack, wall {wall:.2f} s")
PY
}
echo "verify peak RSS (issue 45: <= 64 MB + 16 B per block written, whatever the run's length)"
one "64 MiB, 4 KiB blocks, ${short} s" "$shm/target.dat" 64MiB 4096 "$short"
one "64 MiB, 4 KiB blocks, ${long} s" "$shm/target.dat" 64MiB 4096 "$long"
rm -f "$shm/target.dat"
one "${sparse} GiB sparse, 4 KiB blocks, ${short} s" "$work/sparse.dat" "${sparse}GiB" 4096 "$short"
