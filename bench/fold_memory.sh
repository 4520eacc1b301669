#!/usr/bin/env bash
# Verify's memory for runs of any length, against issue 45's target (peak RSS <= 64 MB
# + 16 bytes per block written, the same for a short and a long run), without
# writing for an hour: target/release/listener-load sends the ledger of a run that
# lasted SPAN seconds (its acknowledgements stamped over the span: BPS batches a
# second, BATCH acks each, all of a batch's acks in one ms so each such ms holds
# more than 255, as a fast run's do), to a listener whose ledger is on the
# repository's disk; then target/release/ledger-fold fetches and folds it with
# verify's own code (plugpull_client::ledger::fetch) and computes what verify and
# report take from the fold besides the target (the cut evidence, the device-error
# rule, the rate timeline), and prints its peak RSS. The target's table (blocks of a
# 1 GiB target, 262,144) is part of it, as in verify.
# With BASELINE_FOLD=<another build's ledger-fold> each ledger is folded by both and
# their digests (every figure but time, memory and the number of (ms, count) pairs
# the clock gives, which is per second for its older seconds) must be the same.
# Usage: bench/fold_memory.sh [SPANS="4 600 3600"]
# Environment: BATCH (256), BPS (500), CARGO_TARGET_DIR (where the binaries are),
# LISTENER, LOAD, FOLD (other builds of plugpull-listener, listener-load, ledger-fold).
set -euo pipefail
cd "$(dirname "$0")/.."
spans=${1:-"4 600 3600"}
batch=${BATCH:-256}
bps=${BPS:-500}
bin=${CARGO_TARGET_DIR:-target}/release
cargo build --release -q -p plugpull-bench -p plugpull-listener
LISTENER=${LISTENER:-$bin/plugpull-listener}
LOAD=${LOAD:-$bin/listener-load}
FOLD=${FOLD:-$bin/ledger-fold}
. bench/lib.sh
disk_setup fold-memory
# fold BINARY RUN NAME: folds run RUN's ledger with BINARY, prints one line, leaves
# the digest in $work/NAME.digest.
fold() {
    "$1" --listener "$addr" --run "$2" >"$work/$3.out"
    grep -v -e '^milliseconds holding' -e '^fold seconds' -e '^seconds' -e '^peak RSS' "$work/$3.out" >"$work/$3.digest"
    python3 - "$work/$3.out" "$3" <<'PY'
import sys
kv = dict(l.split(" = ", 1) for l in open(sys.argv[1]).read().splitlines() if " = " in l)
rss = int(kv["peak RSS kB"]) * 1024
limit = 64e6 + 16 * 262144
print(f"  {sys.argv[2]:<9} acks {int(kv['acknowledgements']):>12,}  fold {float(kv['fold seconds']):7.2f} s,"
      f" all {float(kv['seconds']):7.2f} s  peak RSS {rss / 1e6:6.1f} MB"
      f" (target {limit / 1e6:.1f} MB: {'met' if rss <= limit else 'not met'})")
PY
}
echo "verify's fold, peak RSS by run length (issue 45: <= 64 MB + 16 B per block written, whatever the length)"
echo "simulated: $bps batches/s, $batch acks each, 1 agent; ledger on the disk"
for s in $spans; do
    out=$("$LOAD" --listener "$addr" --agents 1 --batch "$batch" \
        --span-secs "$s" --batches-per-sec "$bps" --seconds 100000)
    run=$(echo "$out" | sed -n 's/^runs = //p')
    echo "run of $s s: $(echo "$out" | sed -n 's/^agents = 1, //p'); ledger $(stat -c %s "$work/ledger/runs/$run.ledger" 2>/dev/null || echo '?') bytes"
    # The writer lets go of the run after WRITER_IDLE (2 s) with no connection.
    sleep 3
    fold "$FOLD" "$run" this
    if [ -n "${BASELINE_FOLD:-}" ]; then
        fold "$BASELINE_FOLD" "$run" baseline
        if cmp -s "$work/this.digest" "$work/baseline.digest"; then
            echo "  digests: the same"
        else
            echo "  digests DIFFER:"; diff "$work/baseline.digest" "$work/this.digest" || true
        fi
    fi
done
