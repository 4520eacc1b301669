#!/usr/bin/env bash
# Side by side, in one run: `plugpull verify` of a fully written file run against
# `dd iflag=direct bs=1M` of the same file (the least a reader of the medium can do),
# and `dd iflag=direct bs=4M` (verify's own read size), with the page cache dropped
# before each. Alternates them ROUNDS times and compares the medians of their read
# rates (MiB/s of the target), and the ratios paired by round with their 95 % interval.
#
# The file is written once by `plugpull write file --pattern sequential` with as many
# writes as it has blocks, on the repository's disk (it must be a real filesystem:
# O_DIRECT). The write limit is shared by the 4 jobs, so a faster job wraps round its
# own blocks while a slower one leaves a few unwritten (verify's blocks_checked, printed
# below, counts the blocks with an acknowledged write); every read covers the whole file.
# Usage: bench/verify.sh [SIZE_MIB=1024] [BLOCK_SIZE=4096] [ROUNDS=4]
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}; bs=${2:-4096}; rounds=${3:-4}
[ "$(id -u)" = 0 ] || { echo "bench/verify.sh: needs root (it drops the page cache)" >&2; exit 2; }
cargo build --release --workspace -q
. bench/lib.sh
bench_setup verify
t="$work/target.dat"
writes=$((mib * 1048576 / bs))
echo "== writing $mib MiB in $writes blocks of $bs bytes (sequential, 4 jobs, fdatasync)"
start=$(date +%s.%N)
target/release/plugpull write file --listener "$addr" --target "$t" --size "${mib}MiB" --block-size "$bs" \
    --jobs 4 --pattern sequential --writes "$writes" --json >"$work/write.json"
run=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$work/write.json")
echo "run $run written in $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s"
rate() { python3 -c "print(f'{$mib / ($2 - $1):.1f}')"; }
dd_run() { # $1: dd's block size
    sync; echo 3 >/proc/sys/vm/drop_caches
    local s e; s=$(date +%s.%N)
    dd if="$t" of=/dev/null iflag=direct bs="$1" status=none
    e=$(date +%s.%N); rate "$s" "$e" >>"$work/dd$1"
}
pp_run() {
    sync; echo 3 >/proc/sys/vm/drop_caches
    local s e; s=$(date +%s.%N)
    target/release/plugpull verify --listener "$addr" --run "$run" --read-back --json >"$work/verify.json" || {
        echo "verify did not pass:" >&2; cat "$work/verify.json" >&2; exit 1; }
    e=$(date +%s.%N); rate "$s" "$e" >>"$work/pp"
    python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v["read_mode"], v["blocks_checked"], v["ok"])' \
        "$work/verify.json" >>"$work/modes"
}
: >"$work/dd1M"; : >"$work/dd4M"; : >"$work/pp"; : >"$work/modes"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then dd_run 1M; dd_run 4M; pp_run; else pp_run; dd_run 4M; dd_run 1M; fi
done
dd=$(median <"$work/dd1M"); dd4=$(median <"$work/dd4M"); pp=$(median <"$work/pp")
echo "dd iflag=direct bs=1M MiB/s:  $(tr '\n' ' ' <"$work/dd1M")(median $dd)"
echo "dd iflag=direct bs=4M MiB/s:  $(tr '\n' ' ' <"$work/dd4M")(median $dd4)"
echo "plugpull verify MiB/s:        $(tr '\n' ' ' <"$work/pp")(median $pp; read mode, blocks checked, ok: $(sort -u "$work/modes" | tr '\n' ' '))"
printf 'verify of %s MiB, %s-byte blocks, %s rounds: ratio plugpull/dd-1M %.3f, plugpull/dd-4M %.3f\n' \
    "$mib" "$bs" "$rounds" "$(python3 -c "print($pp/$dd)")" "$(python3 -c "print($pp/$dd4)")"
# Paired by round (bench/src/paired_ratio.rs), against issue 16's target: 0.95 of dd.
paste "$work/dd1M" "$work/pp" |
    target/release/paired-ratio --label "MiB/s plugpull/dd-1M" --target 0.95 --better higher
