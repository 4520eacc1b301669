# Sourced by the bench scripts: a work directory under target/, a tmpfs directory,
# and a listener standing in for the witness host with its ledger on tmpfs, so its
# own fdatasyncs do not queue on the disk under test (on real hardware it is another
# host). Sets `work`, `shm`, `lpid` and `addr` (HOST:PORT); removes it all on exit.
# Usage: . bench/lib.sh NAME   (work directory target/bench-NAME.XXXX)
work=$(mktemp -d "$PWD/target/bench-$1.XXXX")
shm=$(mktemp -d /dev/shm/plugpull-bench.XXXX)
target/release/plugpull-listener --listen 127.0.0.1:0 --data-dir "$shm/ledger" >"$work/l.out" 2>"$work/l.err" &
lpid=$!
trap 'kill $lpid 2>/dev/null; rm -rf "$work" "$shm"' EXIT
for _ in $(seq 50); do grep -q listening "$work/l.out" && break; sleep 0.1; done
addr=$(awk '/listening on/ {print $3}' "$work/l.out")
[ -n "$addr" ] || { echo "bench: the listener did not start:" >&2; cat "$work/l.err" >&2; exit 2; }
