# Sourced by the bench scripts (`. bench/lib.sh`); defines four functions.
#
# start_listener LEDGER_DIR LOG_DIR: starts a listener (LISTENER, default
# target/release/plugpull-listener) on a free loopback port with its ledger in
# LEDGER_DIR and its output in LOG_DIR/l.out and l.err; sets `lpid` and `addr`
# (HOST:PORT); exits 2, showing its stderr, if it does not start.
#
# bench_setup NAME: a work directory (`work`, target/bench-NAME.XXXX), a tmpfs
# directory (`shm`) and a listener with its ledger in `shm`, so its own fdatasyncs do
# not queue on the disk under test (on real hardware the witness is another host);
# removes it all on exit.
#
# disk_setup NAME: a work directory (`work`, target/bench-NAME.XXXX) and a listener
# with its ledger in it, on the repository's disk (the listener's own fdatasyncs, or
# its ledger's size, are what is measured); removes it all on exit.
# median: the median of the numbers on stdin, one per line (of an even count, the
# mean of the two middle ones).
median() { sort -g | awk '{a[NR] = $1} END {print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

start_listener() {
    "${LISTENER:-target/release/plugpull-listener}" --listen 127.0.0.1:0 --data-dir "$1" \
        >"$2/l.out" 2>"$2/l.err" &
    lpid=$!
    for _ in $(seq 50); do grep -q "listening on" "$2/l.out" 2>/dev/null && break; sleep 0.1; done
    addr=$(sed -n 's/^listening on //p' "$2/l.out")
    [ -n "$addr" ] || { echo "bench: the listener did not start:" >&2; cat "$2/l.err" >&2; exit 2; }
}

bench_setup() {
    work=$(mktemp -d "$PWD/target/bench-$1.XXXX")
    shm=$(mktemp -d /dev/shm/plugpull-bench.XXXX)
    lpid=""
    trap '[ -n "$lpid" ] && kill "$lpid" 2>/dev/null || true; rm -rf "$work" "$shm"' EXIT
    start_listener "$shm/ledger" "$work"
}

disk_setup() {
    work=$(mktemp -d "$PWD/target/bench-$1.XXXX")
    lpid=""
    trap '[ -n "$lpid" ] && kill "$lpid" 2>/dev/null || true; rm -rf "$work"' EXIT
    start_listener "$work/ledger" "$work"
}
