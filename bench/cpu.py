#!/usr/bin/env python3
"""Runs one side of a benchmark and prints "RATE CPU_US_PER_UNIT", and with --steady
"STEADY_CPU_US [MACHINE_US WATCHED_US] RUNTIME_US" after it (each described below).

Usage: bench/cpu.py [--steady [--watch PID]] KIND COMMAND [ARG...], KIND one of:
  raw       bench/src/raw_fsync_loop.rs: "writes/s = R" and "writes = N" lines
  plugpull  `plugpull write file|files --json`: writes_per_sec, writes_issued
  fio       `fio --output-format=json --group_reporting`: jobs[0].write.iops, total_ios
  pgbench   pgbench or `plugpull write pgbench`: "tps = R" and
            "number of transactions actually processed: N" lines

The CPU time is the command's user+sys time from wait4(2) (its rusage, which
includes its threads and any children it waited for), divided by the units it
counted (writes, transactions), in microseconds. It includes start-up: connecting,
the probe of the stack, preparing statements.

--steady (for a command run with `-P 1`, whose stderr has pgbench's "progress: T s,
R tps" lines) adds a third figure without start-up and shut-down: the process's
user+sys time (/proc/PID/stat, all threads) between its first and its last
progress line, divided by the units those lines count between them.

--watch PID (with --steady) adds two more over the same steady window, also in
microseconds per unit: the whole machine's busy CPU time (/proc/stat: user, nice,
system, irq and softirq, summed over all cores; on a benchmark machine that is the
database server, both clients and anything else running) and process PID's
user+sys time (the listener, which stands in for the witness host and on real
hardware runs elsewhere). They say where the machine's CPU goes per transaction
when the CPU, not the disk, decides the rate.

--steady adds, last on the line, the same steady figure for the process's threads
named "tokio-rt-worker" (/proc/PID/task/*/stat, counting the threads alive at both
ends of the window): in plugpull that is the async runtime, whose work during a run
is the reporter's (batching the acknowledgements, sending them to the listener,
taking its confirmations) and the -P progress line's (tokio's blocking pool has the
same name; the probe that uses it is done before the first progress line); pgbench
has no such thread (0). It says how much of the client's CPU per unit the witness's
hand-over costs.
"""
import json
import os
import re
import subprocess
import sys
import threading

PROGRESS = re.compile(r"^progress: ([0-9.]+) s, ([0-9.]+) (?:tps|writes/s)")


def parse(kind, out):
    if kind == "raw":
        rate = float(re.search(r"^writes/s = ([0-9.]+)", out, re.M).group(1))
        n = int(re.search(r"^writes = ([0-9]+)", out, re.M).group(1))
    elif kind == "plugpull":
        s = json.loads(out)
        rate, n = s["writes_per_sec"], s["writes_issued"]
    elif kind == "fio":
        w = json.loads(out[out.index("{"):])["jobs"][0]["write"]
        rate, n = w["iops"], w["total_ios"]
    elif kind == "pgbench":
        rate = float(re.search(r"^tps = ([0-9.]+)", out, re.M).group(1))
        n = int(re.search(r"actually processed: ([0-9]+)", out).group(1))
    else:
        sys.exit(f"bench/cpu.py: unknown kind {kind!r}")
    return rate, n


def cpu_ticks(pid):
    """utime + stime of process `pid` (all its threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def thread_ticks(pid, name):
    """{thread id: utime + stime in clock ticks} of the threads of process `pid`
    named `name` (a thread that ends between the listing and the read is left out)."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, fields = f.read().rsplit(")", 1)
        except OSError:
            continue
        if head.split("(", 1)[1] == name:
            fields = fields.split()
            ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


def machine_ticks():
    """Busy clock ticks of the whole machine: /proc/stat's first line, user + nice +
    system + irq + softirq (not idle or iowait, nor steal, the hypervisor's; guest
    time is already inside user)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:7]) - v[3] - v[4]


def steady(samples, k=2):
    """CPU us per unit of the tick counts in column `k` of `samples` between the
    first and the last progress line, or None. A column of {thread id: ticks}
    counts the threads present at both lines (one that ended in between took its
    time with it, so counting it would subtract that time)."""
    if len(samples) < 3:
        return None
    units = sum(s[1] * (s[0] - samples[i][0]) for i, s in enumerate(samples[1:]))
    first, last = samples[0][k], samples[-1][k]
    if isinstance(first, dict):
        ticks = sum(v - first[t] for t, v in last.items() if t in first)
    else:
        ticks = last - first
    return ticks / os.sysconf("SC_CLK_TCK") / max(units, 1) * 1e6


def main():
    args = sys.argv[1:]
    want_steady = bool(args) and args[0] == "--steady"
    if want_steady:
        args = args[1:]
    watch_pid = None
    if want_steady and len(args) >= 2 and args[0] == "--watch":
        watch_pid, args = int(args[1]), args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    kind, cmd = args[0], args[1:]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # (seconds, rate, CPU ticks[, machine busy ticks, PID's ticks], {runtime thread:
    # ticks}) at each progress line
    samples = []
    errors = []  # the other stderr lines, shown when the command fails

    def watch():
        for line in p.stderr:
            m = PROGRESS.match(line)
            if not m:
                errors.append(line)
            if m:
                try:
                    sample = (float(m.group(1)), float(m.group(2)), cpu_ticks(p.pid))
                    if watch_pid is not None:
                        sample += (machine_ticks(), cpu_ticks(watch_pid))
                    sample += (thread_ticks(p.pid, "tokio-rt-worker"),)
                    samples.append(sample)
                except OSError:
                    pass

    w = threading.Thread(target=watch)
    w.start()
    out = p.stdout.read()
    w.join()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    why = "" if p.returncode == 0 else f"{cmd[0]} exited {p.returncode}"
    try:
        rate, n = parse(kind, out)
    except (AttributeError, KeyError, ValueError) as e:
        why = why or f"cannot read the output of {cmd[0]} ({e})"
    if why:
        sys.exit(f"bench/cpu.py: {why}:\n{out}{''.join(errors[-20:])}")
    cpu = ru.ru_utime + ru.ru_stime
    line = f"{rate:.1f} {cpu / max(n, 1) * 1e6:.2f}"
    if want_steady:
        s = steady(samples)
        if s is None:
            sys.exit(f"bench/cpu.py: --steady needs at least 3 progress lines from {cmd[0]}, "
                     f"got {len(samples)} (run it with -P 1 for 3 s or more)")
        line += f" {s:.2f}"
        if watch_pid is not None:
            line += f" {steady(samples, 3):.2f} {steady(samples, 4):.2f}"
        line += f" {steady(samples, len(samples[0]) - 1):.2f}"
    print(line)


if __name__ == "__main__":
    main()
