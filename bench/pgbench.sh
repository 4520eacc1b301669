#!/usr/bin/env bash
# Benchmark of the PostgreSQL workload, on one throwaway cluster in one run:
#
#  1. throughput: alternates `pgbench -M prepared -c C -j J -T $T` and
#     `plugpull write pgbench --protocol prepared` with the same C, J and scale,
#     at C=1 and C=8, $ROUNDS rounds each; prints each tps, the ratio
#     plugpull/pgbench of the means, and each client process's CPU time (user+sys)
#     per transaction: over the whole run (wait4's rusage, start-up included) and
#     in the steady state between its first and last `-P 1` progress line
#     (/proc/PID/stat; bench/cpu.py --steady), which is far steadier than tps on
#     a shared machine; in the same steady window, the whole machine's busy CPU
#     per transaction (server, client and listener together; /proc/stat), the
#     listener's share of it (it stands in for the witness host, which on real
#     hardware is another machine), and the machine ratio with and without that
#     share, which is what the tps ratio follows once two cores are saturated;
#     then, paired by round (`paired-ratio`, bench/src/paired_ratio.rs), the
#     ratios of tps, steady client CPU and machine CPU per transaction with their
#     spread, a 95 % interval and whether the target (parity) is met beyond noise,
#     and how plugpull's steady client CPU splits between its async runtime's
#     threads (the reporter: batches to the listener, confirmations back) and the
#     rest (the jobs' threads);
#     then the same with the transaction pipelined
#     on both sides (a pgbench script between \startpipeline and \endpipeline vs
#     `plugpull write pgbench --pipeline`);
#  2. verification time: a run of $MILLION acknowledged commits (fsync=off and
#     synchronous_commit=off with --allow-unsafe-config, to get there fast: the
#     verifier's work does not depend on how durable the commits were), then
#     `plugpull verify` timed, with and without amcheck.
#
# Needs the release binaries (`cargo build --release --workspace`) and PostgreSQL's
# server binaries (PGBIN, default: the newest /usr/lib/postgresql/*/bin).
# Environment knobs: SCALE (10), T (seconds per run, 20), ROUNDS (4), MILLION
# (1000000), PARTS ("throughput verify": which parts to run), CLIENTS ("1 8": the
# client counts; J is 1 for one client, else 2), MODES ("builtin pipelined": which
# transactions), BASELINE (another
# plugpull binary, e.g. an older build, whose verify is timed beside this one's),
# KEEP=1 keeps the work directory.
set -euo pipefail

cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
PLUGPULL=${PLUGPULL:-$TARGET/release/plugpull}
LISTENER=${LISTENER:-$TARGET/release/plugpull-listener}
PAIRED=$TARGET/release/paired-ratio
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
SCALE=${SCALE:-10}
T=${T:-20}
ROUNDS=${ROUNDS:-4}
MILLION=${MILLION:-1000000}
PARTS=${PARTS:-throughput verify}
CLIENTS=${CLIENTS:-1 8}
MODES=${MODES:-builtin pipelined}

for f in "$PLUGPULL" "$LISTENER" "$PAIRED" "$PGBIN/initdb" "$PGBIN/pgbench"; do
    [ -x "$f" ] || { echo "missing $f (build with cargo build --release --workspace; set PGBIN)" >&2; exit 2; }
done

WORK=$(mktemp -d /tmp/pp-pgbench.XXXXXX)
PORT=$((20000 + RANDOM % 20000))
AS=()
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$WORK"
    AS=(runuser -u postgres --)
fi
lpid=""
cleanup() {
    "${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate -w stop >/dev/null 2>&1 || true
    [ -n "$lpid" ] && kill "$lpid" 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] && echo "kept $WORK" || rm -rf "$WORK"
    [ -n "${LEDGER:-}" ] && rm -rf "$LEDGER"
}
trap cleanup EXIT

echo "== cluster: PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), scale $SCALE, $(nproc) cores"
"${AS[@]}" "$PGBIN/initdb" -D "$WORK/data" -U postgres -A trust -N --locale=C >/dev/null
cat >>"$WORK/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$WORK'
max_connections = 50
shared_buffers = 256MB
max_wal_size = 4GB
EOF
"${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/postgres.log" -w start >/dev/null
export PGHOST=$WORK PGPORT=$PORT PGUSER=postgres PGDATABASE=bench
"$PGBIN/psql" -X -q -d postgres -c "CREATE DATABASE bench"
"$PGBIN/pgbench" -i -s "$SCALE" -q bench 2>&1 | tail -1

# The listener stands in for the witness host, its ledger on tmpfs (bench/lib.sh
# says why).
. bench/lib.sh
LEDGER=$(mktemp -d /dev/shm/plugpull-bench-ledger.XXXX)
start_listener "$LEDGER" "$WORK"
ADDR=$addr

tps_of() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p'; }
mean() { awk '{s += $1; n++} END {printf "%.1f", s / n}'; }

# The same TPC-B transaction with BEGIN and its five statements pipelined, for the
# comparison with `plugpull write pgbench --pipeline`.
cat >"$WORK/tpcb-pipelined.sql" <<'SQL'
\set aid random(1, 100000 * :scale)
\set bid random(1, 1 * :scale)
\set tid random(1, 10 * :scale)
\set delta random(-5000, 5000)
\startpipeline
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
\endpipeline
END;
SQL

# Column K of bench/cpu.py's lines, as both sides run it (--steady --watch): 1 rate,
# 2 CPU/tx, 3 steady CPU/tx, 4 machine CPU/tx, 5 listener CPU/tx, 6 the runtime
# threads' CPU/tx (3-6 steady, µs; without --watch the runtime's column would be 4).
col() { awk -v k="$1" '{print $k}'; }
if [[ " $PARTS " == *" throughput "* ]]; then
for mode in $MODES; do
    if [ "$mode" = builtin ]; then PGARGS=(); PPARGS=(); else PGARGS=(-f "$WORK/tpcb-pipelined.sql"); PPARGS=(--pipeline); fi
    echo "== throughput ($mode transaction): pgbench vs plugpull, -M prepared, -T $T s, $ROUNDS rounds"
    printf '%-4s %-3s %-26s %-26s %-8s %-26s %-26s %-20s %-20s %-20s %s\n' C J "pgbench tps" "plugpull tps" "tps ratio" \
        "pgbench CPU/tx all|steady" "plugpull CPU/tx all|steady" "CPU ratio all|steady" \
        "machine CPU/tx pg|pp" "listener CPU/tx pg|pp" "machine ratio|without listener"
    for C in $CLIENTS; do
        J=$([ "$C" = 1 ] && echo 1 || echo 2)
        : >"$WORK/pg.$C"; : >"$WORK/pp.$C"
        for r in $(seq "$ROUNDS"); do
            # The order alternates, so neither side always runs on a warmer cache.
            pg_side() { python3 bench/cpu.py --steady --watch "$lpid" pgbench "$PGBIN/pgbench" -M prepared -P 1 "${PGARGS[@]}" \
                -c "$C" -j "$J" -T "$T" bench >>"$WORK/pg.$C"; }
            pp_side() { python3 bench/cpu.py --steady --watch "$lpid" pgbench "$PLUGPULL" write pgbench --listener "$ADDR" -P 1 \
                --protocol prepared "${PPARGS[@]}" --clients "$C" --jobs "$J" --duration "${T}s" >>"$WORK/pp.$C"; }
            if [ $((r % 2)) -eq 1 ]; then pg_side; pp_side; else pp_side; pg_side; fi
        done
        PGM=$(col 1 <"$WORK/pg.$C" | mean); PPM=$(col 1 <"$WORK/pp.$C" | mean)
        PGC=$(col 2 <"$WORK/pg.$C" | mean); PPC=$(col 2 <"$WORK/pp.$C" | mean)
        PGS=$(col 3 <"$WORK/pg.$C" | mean); PPS=$(col 3 <"$WORK/pp.$C" | mean)
        printf '%-4s %-3s %-26s %-26s %-8s %-26s %-26s %-20s %-20s %-20s %s\n' "$C" "$J" \
            "$(col 1 <"$WORK/pg.$C" | tr '\n' ' ')(mean $PGM)" "$(col 1 <"$WORK/pp.$C" | tr '\n' ' ')(mean $PPM)" \
            "$(awk -v a="$PPM" -v b="$PGM" 'BEGIN {printf "%.3f", a / b}')" \
            "$(paste -d'|' <(col 2 <"$WORK/pg.$C") <(col 3 <"$WORK/pg.$C") | tr '\n' ' ')us" \
            "$(paste -d'|' <(col 2 <"$WORK/pp.$C") <(col 3 <"$WORK/pp.$C") | tr '\n' ' ')us" \
            "$(awk -v a="$PPC" -v b="$PGC" -v c="$PPS" -v d="$PGS" 'BEGIN {printf "%.3f|%.3f", a / b, c / d}')" \
            "$(col 4 <"$WORK/pg.$C" | mean)|$(col 4 <"$WORK/pp.$C" | mean)us" \
            "$(col 5 <"$WORK/pg.$C" | mean)|$(col 5 <"$WORK/pp.$C" | mean)us" \
            "$(awk -v a="$(col 4 <"$WORK/pp.$C" | mean)" -v b="$(col 5 <"$WORK/pp.$C" | mean)" \
                -v c="$(col 4 <"$WORK/pg.$C" | mean)" -v d="$(col 5 <"$WORK/pg.$C" | mean)" \
                'BEGIN {printf "%.3f|%.3f", a / c, (a - b) / (c - d)}')"
        # Paired by round (bench/src/paired_ratio.rs): the ratios' spread and 95 %
        # interval, and whether the issue's target is met beyond that noise.
        paste <(col 1 <"$WORK/pg.$C") <(col 1 <"$WORK/pp.$C") |
            "$PAIRED" --label "  C=$C $mode tps plugpull/pgbench" --target 1.0 --better higher
        paste <(col 3 <"$WORK/pg.$C") <(col 3 <"$WORK/pp.$C") |
            "$PAIRED" --label "  C=$C $mode client CPU/tx steady plugpull/pgbench" --target 1.0 --better lower
        paste <(col 4 <"$WORK/pg.$C") <(col 4 <"$WORK/pp.$C") |
            "$PAIRED" --label "  C=$C $mode machine CPU/tx plugpull/pgbench" --target 1.0 --better lower
        # Where plugpull's client CPU goes: its async runtime's threads run the
        # reporter (batches to the listener, confirmations back); the rest is the
        # pgbench jobs' threads.
        echo "  C=$C $mode plugpull's client CPU/tx steady by thread kind, medians:" \
            "runtime (reporter) $(col 6 <"$WORK/pp.$C" | median) us," \
            "the rest (jobs) $(paste <(col 3 <"$WORK/pp.$C") <(col 6 <"$WORK/pp.$C") | awk '{print $1 - $2}' | median) us" \
            "(pgbench's runtime threads: $(col 6 <"$WORK/pg.$C" | median) us)"
    done
done
fi

[[ " $PARTS " == *" verify "* ]] || exit 0
echo "== verification of $MILLION acknowledged commits (fsync=off, synchronous_commit=off)"
"$PGBIN/psql" -X -q -d postgres -c "ALTER SYSTEM SET fsync = off" \
    -c "ALTER SYSTEM SET synchronous_commit = off" -c "SELECT pg_reload_conf()" >/dev/null
PER=$(( (MILLION + 7) / 8 ))
START=$(date +%s.%N)
"$PLUGPULL" write pgbench --listener "$ADDR" --protocol prepared --clients 8 --jobs 2 \
    --transactions "$PER" --pipeline --allow-unsafe-config >"$WORK/million.out" 2>"$WORK/million.err"
END=$(date +%s.%N)
RUN=$(sed -n 's/^run id: //p' "$WORK/million.out")
echo "run $RUN: $(sed -n 's/^acknowledged by listener: //p' "$WORK/million.out") acknowledged in $(awk -v a="$START" -v b="$END" 'BEGIN {printf "%.1f", b - a}') s ($(tps_of <"$WORK/million.out") tps)"
echo "history rows: $("$PGBIN/psql" -X -A -t -c "SELECT count(*) FROM pgbench_history")"
# Each verify twice, in alternating order with BASELINE's when it is set, so the
# second of each pair does not always find PostgreSQL's buffers warm.
BINS=("$PLUGPULL")
[ -n "${BASELINE:-}" ] && BINS+=("$BASELINE")
for round in 1 2; do
for opt in --no-amcheck ""; do
    [ "$round" = 2 ] && [ -z "$opt" ] && continue # amcheck's time is PostgreSQL's, measured once
    ORDER=("${BINS[@]}")
    [ "$round" = 2 ] && [ ${#BINS[@]} = 2 ] && ORDER=("${BINS[1]}" "${BINS[0]}")
    for bin in "${ORDER[@]}"; do
    START=$(date +%s.%N)
    "$bin" verify --listener "$ADDR" --run "$RUN" --json $opt >"$WORK/verify.json" 2>/dev/null || true
    END=$(date +%s.%N)
    echo "$bin:"
    python3 - "$WORK/verify.json" "$START" "$END" "${opt:-with amcheck}" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
t = v["timings"]
wall = float(sys.argv[3]) - float(sys.argv[2])
print(f"verify ({sys.argv[4]}): wall {wall:.2f} s; commits+sums {t['commits_ms']} ms, "
      f"findings {t['findings_ms']} ms, amcheck {t['amcheck_ms']} ms, total {t['total_ms']} ms; "
      f"acknowledged {v['acknowledged_commits']}, present {v['present_commits']}, ok {v['ok']}")
print("  " + v["summary"])
EOF
    done
done
done
