#!/usr/bin/env bash
# The listener's memory while it serves a big ledger, against issue 45's target: a
# listener serving a 200 M-acknowledgement ledger stays under 64 MB of RSS. One agent
# of target/release/listener-load speaks the protocol and sends ACKS file
# acknowledgements (8192 a batch) to a listener whose ledger is on the repository's
# disk; then the listener's peak RSS is reset (/proc/PID/clear_refs) and the ledger is
# fetched as verify fetches it (target/release/ledger-fetch, which keeps none of it);
# the listener's peak RSS over the fetch is printed with "met" / "not met".
# Usage: bench/ledger_memory.sh [ACKS=200000000]
# Environment: LISTENER (bench/lib.sh: another listener binary, e.g. a build of main).
set -euo pipefail
cd "$(dirname "$0")/.."
acks=${1:-200000000}
[ "$(id -u)" = 0 ] || { echo "bench/ledger_memory.sh: needs root (it resets the listener's peak RSS)" >&2; exit 2; }
cargo build --release --workspace -q
. bench/lib.sh
disk_setup ledger
out=$(target/release/listener-load --listener "$addr" --agents 1 --acks "$acks" --seconds 3600)
echo "$out" | grep -v '^runs'
run=$(echo "$out" | sed -n 's/^runs = //p')
echo "ledger of run $run: $(stat -c %s "$work"/ledger/runs/*.ledger) bytes; listener peak RSS while it was written: $(awk '/VmHWM/ {print $2, $3}' /proc/$lpid/status)"
# The writer lets go of the run after WRITER_IDLE (2 s) with no connection.
sleep 3
echo 5 >/proc/$lpid/clear_refs
target/release/ledger-fetch --listener "$addr" --run "$run"
kib=$(awk '/VmHWM/ {print $2}' /proc/$lpid/status)
python3 -c "r = $kib * 1024; print(f'listener peak RSS serving it: {r / 1e6:.1f} MB (target < 64 MB: {\"met\" if r < 64e6 else \"not met\"})')"
