#!/usr/bin/env bash
# Verify's memory for a pgbench run of any length (issue 45): listener-load sends the
# ledger of a pgbench run of CLIENTS clients that lasted SPAN seconds (BPS batches a
# second, each one range of PER commits per client, as the agent seals them), to a
# listener whose ledger is on the repository's disk; then `plugpull verify` of that
# run, with no PostgreSQL to connect to (`--pg-wait 0s`: it exits 2, "is PostgreSQL
# running?"), after it has fetched and folded the ledger and read the ranges as the
# verdict needs them (merged ranges, the run's end), which is where a run's length
# shows; peak RSS by /usr/bin/time. With BASELINE=<another build's plugpull> each
# run is verified by both.
# Usage: bench/pg_verify_memory.sh [SPANS="60 3600"]
# Environment: CLIENTS (8), BPS (200), PER (1), CARGO_TARGET_DIR, BASELINE.
set -euo pipefail
cd "$(dirname "$0")/.."
spans=${1:-"60 3600"}
clients=${CLIENTS:-8}
bps=${BPS:-200}
per=${PER:-1}
bin=${CARGO_TARGET_DIR:-target}/release
cargo build --release -q -p plugpull-bench -p plugpull-listener -p plugpull-client
LISTENER=$bin/plugpull-listener
. bench/lib.sh
disk_setup pg-verify-memory
# verify BINARY RUN NAME: prints one line (exit code, seconds, peak RSS).
verify() {
    /usr/bin/time -f "%e %M" -o "$work/time" "$1" verify --listener "$addr" --run "$2" \
        --pg-wait 0s --json >"$work/$3.json" 2>"$work/$3.err" && rc=0 || rc=$?
    read -r secs kb < <(tail -n 1 "$work/time")
    printf '  %-9s exit %s, %6.2f s, peak RSS %7.1f MB\n' "$3" "$rc" "$secs" "$(echo "$kb / 1000" | bc -l)"
}
echo "pgbench verify, peak RSS by run length: $clients clients, $bps batches/s, $per commits per client per batch"
for s in $spans; do
    out=$("$bin/listener-load" --listener "$addr" --agents 1 --batch "$per" --workload pgbench \
        --clients "$clients" --span-secs "$s" --batches-per-sec "$bps" --seconds 100000)
    run=$(echo "$out" | sed -n 's/^runs = //p')
    ranges=$((s * bps * clients))
    echo "run of $s s: $ranges ranges; ledger $(stat -c %s "$work/ledger/runs/$run.ledger" 2>/dev/null || echo '?') bytes"
    # The writer lets go of the run after WRITER_IDLE (2 s) with no connection.
    sleep 3
    verify "$bin/plugpull" "$run" this
    if [ -n "${BASELINE:-}" ]; then
        verify "$BASELINE" "$run" baseline
    fi
done
