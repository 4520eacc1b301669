#!/usr/bin/env bash
# Side by side, in one run: `plugpull write file` against a raw pwrite+fdatasync loop
# (same file, block size and jobs; bench/src/raw_fsync_loop.rs), on the repository's
# disk and on tmpfs. Alternates the two ROUNDS times and compares medians.
# Usage: bench/file.sh [SECONDS_PER_RUN=10] [JOBS=4] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}; jobs=${2:-4}; rounds=${3:-3}; size=256MiB
cargo build --release --workspace -q
work=$(mktemp -d "$PWD/target/bench-file.XXXX")
shm=$(mktemp -d /dev/shm/plugpull-bench.XXXX)
# The listener stands in for the witness host: its ledger lives on tmpfs so its own
# fdatasyncs do not queue on the disk under test (on real hardware it is another host).
target/release/plugpull-listener --listen 127.0.0.1:0 --data-dir "$shm/ledger" >"$work/l.out" 2>"$work/l.err" &
lpid=$!
trap 'kill $lpid 2>/dev/null; rm -rf "$work" "$shm"' EXIT
for _ in $(seq 50); do grep -q listening "$work/l.out" && break; sleep 0.1; done
addr=$(awk '/listening on/ {print $3}' "$work/l.out")
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for place in "disk:$work" "tmpfs:$shm"; do
    name=${place%%:*}; dir=${place#*:}; t="$dir/target.dat"
    : >"$dir/raw"; : >"$dir/pp"
    # Written through once, so neither side pays for converting preallocated
    # (unwritten) extents on its first touch of a block; the order alternates.
    dd if=/dev/zero of="$t" bs=1M count=256 conv=fsync status=none
    raw_run() { target/release/raw-fsync-loop --target "$t" --size $size --jobs "$jobs" --duration "${secs}s" | awk '{print $3}' >>"$dir/raw"; }
    pp_run() {
        target/release/plugpull write file --listener "$addr" --target "$t" --size $size --jobs "$jobs" --duration "${secs}s" --force --json \
            | python3 -c 'import json,sys; print(json.load(sys.stdin)["writes_per_sec"])' >>"$dir/pp"
    }
    for r in $(seq "$rounds"); do
        if [ $((r % 2)) -eq 1 ]; then raw_run; pp_run; else pp_run; raw_run; fi
    done
    raw=$(median <"$dir/raw"); pp=$(median <"$dir/pp")
    printf '%-6s jobs=%s block=4096 %ss x %s rounds: raw fdatasync loop %10.1f writes/s | plugpull %10.1f writes/s | ratio %.3f\n' \
        "$name" "$jobs" "$secs" "$rounds" "$raw" "$pp" "$(python3 -c "print($pp/$raw)")"
done
