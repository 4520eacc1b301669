#!/usr/bin/env bash
# Side by side, in one run: `plugpull write file` against a raw pwrite+fdatasync loop
# (same file, block size and jobs; bench/src/raw_fsync_loop.rs) and against fio
# (`--rw=randwrite --bs=4k --fdatasync=1 --ioengine=psync`, without and with
# `--verify=crc32c --do_verify=0`, a peer that also writes checksummed headers), on the
# repository's disk and on tmpfs. Alternates the four ROUNDS times and compares
# medians. Also prints the CPU time (user+sys) each side spent per write, from
# getrusage of its children, which is steadier than writes/s on a shared machine,
# and the ratios paired by round with their 95 % interval (target/release/paired-ratio).
# Usage: bench/file.sh [SECONDS_PER_RUN=10] [JOBS=4] [ROUNDS=4]
# Environment: PLACES ("disk tmpfs": where to run), BASELINE (another plugpull
# binary, e.g. an older build, whose `write file` runs beside this one's each round),
# PLUGPULL (the plugpull measured as this build, default target/release/plugpull;
# e.g. the release tarball's) and LISTENER (bench/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v fio >/dev/null 2>&1 || scripts/deps --bench # fio, for the benchmark only
secs=${1:-10}; jobs=${2:-4}; rounds=${3:-4}; size=256MiB
cargo build --release --workspace -q
. bench/lib.sh
bench_setup file
# The medians of the two columns "RATE CPU" on stdin, each taken on its own.
median_pair() { python3 -c 'import sys, statistics as s; r = [l.split() for l in sys.stdin if l.strip()]
print(s.median(float(x[0]) for x in r), s.median(float(x[1]) for x in r))'; }
places=${PLACES:-disk tmpfs}
sides="raw pp fio fiov${BASELINE:+ base}"
for name in $places; do
    case $name in disk) dir=$work ;; tmpfs) dir=$shm ;; *) echo "PLACES: disk or tmpfs, not $name" >&2; exit 2 ;; esac
    t="$dir/target.dat"
    for side in $sides; do : >"$dir/$side"; done
    # Written through once, so neither side pays for converting preallocated
    # (unwritten) extents on its first touch of a block; the order alternates.
    dd if=/dev/zero of="$t" bs=1M count=256 conv=fsync status=none
    # Each side runs under `bench/cpu.py`, which prints "RATE CPU_US_PER_WRITE".
    raw_run() {
        python3 bench/cpu.py raw target/release/raw-fsync-loop --target "$t" --size $size --jobs "$jobs" --duration "${secs}s" >>"$dir/raw"
    }
    pp_run() { # $1: the binary (default this build's), $2: the output file (pp)
        python3 bench/cpu.py plugpull "${1:-${PLUGPULL:-target/release/plugpull}}" write file --listener "$addr" --target "$t" --size $size \
            --jobs "$jobs" --duration "${secs}s" --force --json >>"$dir/${2:-pp}"
    }
    base_run() { if [ -n "${BASELINE:-}" ]; then pp_run "$BASELINE" base; fi; }
    fio_run() { # $1: the output file; the rest: extra fio options
        local out=$1; shift
        python3 bench/cpu.py fio fio --name=bench --filename="$t" --size=$size --rw=randwrite --bs=4k \
            --ioengine=psync --fdatasync=1 --numjobs="$jobs" --thread --runtime="$secs" --time_based \
            --group_reporting --output-format=json "$@" >>"$dir/$out"
    }
    for r in $(seq "$rounds"); do
        if [ $((r % 2)) -eq 1 ]; then
            raw_run; pp_run; base_run; fio_run fio; fio_run fiov --verify=crc32c --do_verify=0 --verify_state_save=0
        else
            fio_run fiov --verify=crc32c --do_verify=0 --verify_state_save=0; fio_run fio; base_run; pp_run; raw_run
        fi
    done
    for side in $sides; do
        read -r "${side}_rate" "${side}_cpu" < <(median_pair <"$dir/$side")
    done
    printf '%-6s jobs=%s block=4096 %ss x %s rounds (median writes/s, CPU us per write):\n' "$name" "$jobs" "$secs" "$rounds"
    printf '  raw fdatasync loop  %10.1f  %6.1f us\n' "$raw_rate" "$raw_cpu"
    printf '  fio                 %10.1f  %6.1f us\n' "$fio_rate" "$fio_cpu"
    printf '  fio verify=crc32c   %10.1f  %6.1f us\n' "$fiov_rate" "$fiov_cpu"
    printf '  plugpull write file %10.1f  %6.1f us\n' "$pp_rate" "$pp_cpu"
    if [ -n "${BASELINE:-}" ]; then
        printf '  baseline (%s) %10.1f  %6.1f us  (this build / baseline: %.3f)\n' "$BASELINE" "$base_rate" "$base_cpu" \
            "$(python3 -c "print($pp_rate/$base_rate)")"
    fi
    printf '  ratios: plugpull/raw %.3f  plugpull/fio %.3f  plugpull/fio-crc32c %.3f\n' \
        "$(python3 -c "print($pp_rate/$raw_rate)")" "$(python3 -c "print($pp_rate/$fio_rate)")" \
        "$(python3 -c "print($pp_rate/$fiov_rate)")"
    # Paired by round (bench/src/paired_ratio.rs), against issue 16's targets: on the
    # disk 0.97 of the raw loop; on tmpfs 0.85 of it and 1.2 of fio with crc32c. The
    # issue sets no target for fio on the disk nor for the CPU per write (plugpull
    # does more per write than the raw loop: records, checksums, the witness): those
    # lines are measurements only.
    case $name in disk) raw_target=0.97 fiov_target=() ;; tmpfs) raw_target=0.85 fiov_target=(--target 1.2 --better higher) ;; esac
    paste <(awk '{print $1}' "$dir/raw") <(awk '{print $1}' "$dir/pp") |
        target/release/paired-ratio --label "  writes/s plugpull/raw" --target $raw_target --better higher
    paste <(awk '{print $1}' "$dir/fiov") <(awk '{print $1}' "$dir/pp") |
        target/release/paired-ratio --label "  writes/s plugpull/fio-crc32c" "${fiov_target[@]}"
    paste <(awk '{print $2}' "$dir/raw") <(awk '{print $2}' "$dir/pp") |
        target/release/paired-ratio --label "  CPU per write plugpull/raw"
done
