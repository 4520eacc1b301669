#!/usr/bin/env bash
# Verify's peak memory for a files run (`write files`) against its length: a short
# and a long run (4 jobs, 256 names, at most MAX_UNCONFIRMED acks awaiting the
# listener, default 16 as `write files`'s, tmpfs), each verified once by this build and,
# when BASELINE names another build's `plugpull`, by that one too, with peak RSS and
# wall time by /usr/bin/time (`--read-back`: the run finished, nothing was cut, so a
# sound verify says NOT MEASURED, exit 2, with every name intact). Prints each run's
# acknowledged steps and each verify's peak RSS; every name must be intact.
# Usage: [BASELINE=path/to/plugpull] [MAX_UNCONFIRMED=16] bench/verify_files_memory.sh [SHORT=10] [LONG=60]
set -euo pipefail
cd "$(dirname "$0")/.."
short=${1:-10}; long=${2:-60}
bin=${CARGO_TARGET_DIR:-target}/release
cargo build --release --workspace -q
LISTENER=$bin/plugpull-listener
export LISTENER
. bench/lib.sh
bench_setup verify-files-memory
# measure NAME PLUGPULL RUN: verifies RUN with PLUGPULL, prints one line.
measure() {
    local name=$1 pp=$2 run=$3
    local rc=0
    /usr/bin/time -f "%e %M" -o "$work/time" "$pp" verify --listener "$addr" --run "$run" --read-back --json \
        >"$work/verify.json" || rc=$?
    python3 -c 'import json,sys; v = json.load(open(sys.argv[1])); sys.exit(v["verdicts"]["intact"] != v["names_checked"])' \
        "$work/verify.json" && [ "$rc" -le 2 ] || { echo "bench: verify of $name found damage:" >&2; cat "$work/verify.json" >&2; exit 1; }
    tail -n 1 "$work/time" >"$work/time1"
    read -r wall kib <"$work/time1"
    python3 - "$work/verify.json" "$name" "$wall" "$kib" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
name, wall, kib = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
print(f"  {name:<28} acked steps {v['acknowledged']:>10,}  names {v['names_checked']:>4}  verify peak RSS {kib * 1024 / 1e6:6.1f} MB, wall {wall:.2f} s")
PY
}
# one SECONDS: writes a files run for SECONDS and verifies it with each build.
one() {
    local secs=$1 dir="$shm/files"
    rm -rf "$dir"
    "$bin/plugpull" write files --listener "$addr" --target "$dir" --jobs 4 --files 256 \
        --max-unconfirmed "${MAX_UNCONFIRMED:-16}" --duration "${secs}s" --json >"$work/write.json"
    local run; run=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$work/write.json")
    measure "${secs} s, this build" "$bin/plugpull" "$run"
    [ -z "${BASELINE:-}" ] || measure "${secs} s, BASELINE" "$BASELINE" "$run"
}
echo "verify peak RSS of a files run (issue 45: not growing with the run's length)"
one "$short"
one "$long"
