#!/usr/bin/env bash
# Verify's memory for a pgbench run of any length (issue 45): listener-load sends the
# ledger of a pgbench run of CLIENTS clients that lasted SPAN seconds (BPS batches a
# second, each one range of PER commits per client, as the agent seals them), to a
# listener whose ledger is on the repository's disk; then `plugpull verify` of that
# run, with no PostgreSQL to connect to (`--pg-wait 0s`: it exits 2, "is PostgreSQL
# running?"), after it has fetched and folded the ledger and read the ranges as the
# verdict needs them (merged ranges, the run's end), which is where a run's length
# shows; peak RSS by /usr/bin/time. With BASELINE=<another build's plugpull> each
# run is verified by both. With PG_DSN=<conninfo of a database holding pgbench's
# tables> (`pgbench -i`), verify checks the run there instead: pgbench_history is
# emptied and given the run's tags of every seq but each third (so a third of the
# commits are lost: the listing, the lags), and the two builds' JSON reports must be
# the same but for their timings.
# Usage: bench/pg_verify_memory.sh [SPANS="60 600 3600"]
# Environment: CLIENTS (8), BPS (200), PER (1), CARGO_TARGET_DIR, BASELINE, PG_DSN,
# PSQL (psql).
set -euo pipefail
cd "$(dirname "$0")/.."
spans=${1:-"60 600 3600"}
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
    local pg=(--pg-wait 0s)
    [ -n "${PG_DSN:-}" ] && pg=(--dsn "$PG_DSN" --no-amcheck)
    /usr/bin/time -f "%e %M" -o "$work/time" "$1" verify --listener "$addr" --run "$2" \
        "${pg[@]}" --json >"$work/$3.json" 2>"$work/$3.err" && rc=0 || rc=$?
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
    if [ -n "${PG_DSN:-}" ]; then
        # The tag prefix is the run id's low 32 bits; seqs 1..commits per client.
        "${PSQL:-psql}" -X -q -v ON_ERROR_STOP=1 -d "$PG_DSN" -c "TRUNCATE pgbench_history;
            INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler)
            SELECT 1, 1, 1, 0, now(), '${run:8:8}' || lpad(c::text, 4, '0') || lpad(s::text, 10, '0')
            FROM generate_series(0, $clients - 1) AS c, generate_series(1, $((s * bps * per))) AS s
            WHERE s % 3 <> 0; ANALYZE pgbench_history"
    fi
    # The writer lets go of the run after WRITER_IDLE (2 s) with no connection.
    sleep 3
    verify "$bin/plugpull" "$run" this
    if [ -n "${BASELINE:-}" ]; then
        verify "$BASELINE" "$run" baseline
        if [ -n "${PG_DSN:-}" ]; then
            python3 - "$work/this.json" "$work/baseline.json" <<'PY'
import json, sys
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k != "timings"}
    return [strip(x) for x in v] if isinstance(v, list) else v
a, b = (json.load(open(p)) for p in sys.argv[1:])
print("  reports:", "the same but for timings" if strip(a) == strip(b) else "DIFFER")
print("  this:", a["summary"], [x["count"] for x in a["lost_lag_histogram"]])
PY
        fi
    fi
done
