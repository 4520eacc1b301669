#!/usr/bin/env bash
# Listener load, in one run: 16 agents over loopback send acks as fast as the
# listener confirms them, with the ledger on the repository's disk (durable: group
# commit + fdatasync). Prints acks/s and ledger bytes per ack.
# Usage: bench/listener.sh [SECONDS=10] [AGENTS=16]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}; agents=${2:-16}
cargo build --release --workspace -q
work=$(mktemp -d "$PWD/target/bench-listener.XXXX")
target/release/plugpull-listener --listen 127.0.0.1:0 --data-dir "$work/ledger" >"$work/l.out" 2>"$work/l.err" &
lpid=$!
trap 'kill $lpid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do grep -q listening "$work/l.out" && break; sleep 0.1; done
addr=$(awk '/listening on/ {print $3}' "$work/l.out")
out=$(target/release/listener-load --listener "$addr" --agents "$agents" --seconds "$secs")
echo "$out" | grep -v '^runs'
acks=$(echo "$out" | sed -n 's/.*acks confirmed = \([0-9]*\).*/\1/p')
bytes=$(cat "$work"/ledger/runs/*.ledger | wc -c)
python3 -c "print(f'ledger bytes = $bytes, bytes per ack = {$bytes/$acks:.2f}')"
echo "listener peak RSS: $(awk '/VmHWM/ {print $2, $3}' /proc/$lpid/status)"
