#!/usr/bin/env bash
# Side by side, in one run, on tmpfs (read with O_DIRECT, the fastest medium here):
# `plugpull verify` of a fully written file run against `fio --rw=read --direct=1
# --bs=1M` with as many jobs as verify reads with (each job its own share of the
# file) and `dd iflag=direct bs=4M`, alternating ROUNDS times. Prints each side's
# MiB/s of the target (wall time of the whole command, start-up included) and its
# CPU per GiB (user+sys of the command, /usr/bin/time), the CPU of a CRC-32 pass over
# the same bytes by itself (bench/src/crc_pass.rs), and the ratios paired by round
# (target/release/paired-ratio) against issue 45's targets: verify >= 0.90 of fio's
# and of dd's rate, and verify's CPU per GiB <= 1.2 of fio's plus the CRC-32 pass.
#
# The file is written once by `plugpull write file --pattern sequential` with as many
# writes as it has blocks (2 jobs share the limit: a few blocks may stay unwritten;
# every read covers the whole file). tmpfs needs no cache drop: its pages are the
# medium.
# Usage: bench/verify_speed.sh [SIZE_MIB=2048] [BLOCK_SIZE=65536] [ROUNDS=6]
# Environment: BASELINE (another plugpull binary, e.g. a build of main, whose verify
# runs beside this one's each round), LISTENER (bench/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v fio >/dev/null 2>&1 || scripts/deps --bench # fio, for the benchmark only
mib=${1:-2048}; bs=${2:-65536}; rounds=${3:-6}
cargo build --release --workspace -q
. bench/lib.sh
bench_setup verify-speed
# Verify's threads (client/src/file/parallel.rs, `threads`): the cores, 2 to 8.
jobs=$(nproc); [ "$jobs" -lt 2 ] && jobs=2; [ "$jobs" -gt 8 ] && jobs=8
t="$shm/target.dat"
writes=$((mib * 1048576 / bs))
echo "== writing $mib MiB in $writes blocks of $bs bytes on tmpfs (sequential, 2 jobs)"
target/release/plugpull write file --listener "$addr" --target "$t" --size "${mib}MiB" --block-size "$bs" \
    --jobs 2 --pattern sequential --writes "$writes" --json >"$work/write.json"
run=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$work/write.json")
# timed SIDE CMD...: appends "MIB/S CPU_S_PER_GIB" of one run of CMD to $work/SIDE.
timed() {
    local side=$1; shift
    /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" >"$work/out" 2>"$work/err" || {
        echo "bench: $side failed:" >&2; cat "$work/out" "$work/err" >&2; exit 1; }
    read -r wall user sys <"$work/time"
    python3 -c "print(f'{$mib / $wall:.1f} {($user + $sys) * 1024 / $mib:.4f}')" >>"$work/$side"
}
pp_run() { # $1: the binary, $2: the side's name
    timed "$2" "$1" verify --listener "$addr" --run "$run" --read-back --json
    python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v["read_mode"], v["blocks_checked"], v["ok"])' \
        "$work/out" >>"$work/modes"
}
fio_run() {
    timed fio fio --name=read --filename="$t" --rw=read --direct=1 --bs=1M --ioengine=psync \
        --numjobs="$jobs" --size=$((mib / jobs))M --offset_increment=$((mib / jobs))M --thread \
        --group_reporting --output-format=terse
}
crc_run() {
    target/release/crc-pass --mib "$mib" | sed -n 's/^cpu_s = //p' |
        python3 -c "import sys; print(f'{float(sys.stdin.read()) * 1024 / $mib:.4f}')" >>"$work/crc"
}
sides="pp fio dd crc${BASELINE:+ base}"
for s in $sides; do : >"$work/$s"; done
: >"$work/modes"
base_run() { if [ -n "${BASELINE:-}" ]; then pp_run "$BASELINE" base; fi; }
for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
        pp_run target/release/plugpull pp; base_run; fio_run; timed dd dd if="$t" of=/dev/null iflag=direct bs=4M status=none; crc_run
    else
        crc_run; timed dd dd if="$t" of=/dev/null iflag=direct bs=4M status=none; fio_run; base_run; pp_run target/release/plugpull pp
    fi
done
col() { awk -v c="$1" '{print $c}' "$work/$2"; }
echo "verify of $mib MiB, $bs-byte blocks, $rounds rounds on tmpfs, $jobs jobs (read mode, blocks checked, ok: $(sort -u "$work/modes" | tr '\n' ' '))"
printf '  %-28s %-44s %s\n' "side" "MiB/s by round (median)" "CPU s per GiB (median)"
for s in pp ${BASELINE:+base} fio dd; do
    case $s in pp) name="plugpull verify" ;; base) name="baseline verify" ;; fio) name="fio read direct bs=1M x$jobs" ;; dd) name="dd iflag=direct bs=4M" ;; esac
    printf '  %-28s %-44s %s\n' "$name" "$(col 1 "$s" | tr '\n' ' ')($(col 1 "$s" | median))" "$(col 2 "$s" | median)"
done
printf '  %-28s %-44s %s\n' "CRC-32 pass (crc32fast)" "-" "$(median <"$work/crc")"
paste <(col 1 fio) <(col 1 pp) | target/release/paired-ratio --label "  MiB/s verify/fio" --target 0.90 --better higher
paste <(col 1 dd) <(col 1 pp) | target/release/paired-ratio --label "  MiB/s verify/dd-4M" --target 0.90 --better higher
paste <(paste <(col 2 fio) "$work/crc" | awk '{print $1 + $2}') <(col 2 pp) |
    target/release/paired-ratio --label "  CPU per GiB verify/(fio + CRC-32)" --target 1.2 --better lower
if [ -n "${BASELINE:-}" ]; then
    paste <(col 1 base) <(col 1 pp) | target/release/paired-ratio --label "  MiB/s verify this build/baseline"
    paste <(col 2 base) <(col 2 pp) | target/release/paired-ratio --label "  CPU per GiB this build/baseline"
fi
