#!/usr/bin/env bash
# The listener's memory while it serves a big ledger, against issue 45's target: a
# listener serving a 200 M-acknowledgement ledger stays under 64 MB of RSS. One agent
# of target/release/listener-load speaks the protocol and sends ACKS file
# acknowledgements (8192 a batch) to a listener whose ledger is on the repository's
# disk; then the listener's peak RSS is reset (/proc/PID/clear_refs) and the ledger is
# fetched as verify fetches it (target/release/ledger-fetch, which keeps none of it);
# the listener's peak RSS over the fetch is printed with "met" / "not met". Then
# target/release/ledger-fold fetches it again and folds it with verify's own code
# (what verify does with a ledger before it reads the target, and what it computes
# from the fold: the cut evidence, the device-error rule, the report's timeline):
# its wall time against the target's other half (a verify of it in under a minute)
# and its peak RSS are printed with "met" / "not met".
# Usage: bench/ledger_memory.sh [ACKS=200000000]
# Environment: LISTENER (bench/lib.sh: another listener binary, e.g. a build of main),
# CARGO_TARGET_DIR (where the binaries are).
set -euo pipefail
cd "$(dirname "$0")/.."
acks=${1:-200000000}
[ "$(id -u)" = 0 ] || { echo "bench/ledger_memory.sh: needs root (it resets the listener's peak RSS)" >&2; exit 2; }
cargo build --release --workspace -q
bin=${CARGO_TARGET_DIR:-target}/release
LISTENER=${LISTENER:-$bin/plugpull-listener}
. bench/lib.sh
disk_setup ledger
out=$("$bin/listener-load" --listener "$addr" --agents 1 --acks "$acks" --seconds 3600)
echo "$out" | grep -v '^runs'
run=$(echo "$out" | sed -n 's/^runs = //p')
echo "ledger of run $run: $(stat -c %s "$work"/ledger/runs/*.ledger) bytes; listener peak RSS while it was written: $(awk '/VmHWM/ {print $2, $3}' /proc/$lpid/status)"
# The writer lets go of the run after WRITER_IDLE (2 s) with no connection.
sleep 3
echo 5 >/proc/$lpid/clear_refs
"$bin/ledger-fetch" --listener "$addr" --run "$run"
kib=$(awk '/VmHWM/ {print $2}' /proc/$lpid/status)
python3 -c "r = $kib * 1024; print(f'listener peak RSS serving it: {r / 1e6:.1f} MB (target < 64 MB: {\"met\" if r < 64e6 else \"not met\"})')"
"$bin/ledger-fold" --listener "$addr" --run "$run" >"$work/fold.out"
python3 - "$work/fold.out" <<'PY'
import sys
kv = dict(l.split(" = ", 1) for l in open(sys.argv[1]).read().splitlines() if " = " in l)
secs, rss = float(kv["seconds"]), int(kv["peak RSS kB"]) * 1024
print(f"verify's fold of it through the listener: {int(kv['acknowledgements']):,} acknowledgements in {secs:.2f} s"
      f" (target < 60 s: {'met' if secs < 60 else 'not met'}), peak RSS {rss / 1e6:.1f} MB")
PY
