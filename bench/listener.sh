#!/usr/bin/env bash
# Listener load, in one run: 16 agents over loopback send acks as fast as the
# listener confirms them, with the ledger on the repository's disk (durable: group
# commit + fdatasync). Prints acks/s and ledger bytes per ack.
# Usage: bench/listener.sh [SECONDS=10] [AGENTS=16]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}; agents=${2:-16}
cargo build --release --workspace -q
. bench/lib.sh
disk_setup listener
out=$(target/release/listener-load --listener "$addr" --agents "$agents" --seconds "$secs")
echo "$out" | grep -v '^runs'
acks=$(echo "$out" | sed -n 's/.*acks confirmed = \([0-9]*\).*/\1/p')
bytes=$(cat "$work"/ledger/runs/*.ledger | wc -c)
python3 -c "print(f'ledger bytes = $bytes, bytes per ack = {$bytes/$acks:.2f}')"
echo "listener peak RSS: $(awk '/VmHWM/ {print $2, $3}' /proc/$lpid/status)"
