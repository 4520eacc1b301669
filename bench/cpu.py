#!/usr/bin/env python3
"""Runs one side of a benchmark and prints "RATE CPU_US_PER_UNIT" on one line.

Usage: bench/cpu.py KIND COMMAND [ARG...], KIND one of:
  raw       bench/src/raw_fsync_loop.rs: "writes/s = R" and "writes = N" lines
  plugpull  `plugpull write file|files --json`: writes_per_sec, writes_issued
  fio       `fio --output-format=json --group_reporting`: jobs[0].write.iops, total_ios
  pgbench   pgbench or `plugpull write pgbench`: "tps = R" and
            "number of transactions actually processed: N" lines

The CPU time is the command's user+sys time from wait4(2) (its rusage, which
includes its threads and any children it waited for), divided by the units it
counted (writes, transactions), in microseconds.
"""
import json
import os
import re
import subprocess
import sys


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


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    kind, cmd = sys.argv[1], sys.argv[2:]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    try:
        rate, n = parse(kind, out)
    except (AttributeError, KeyError, ValueError) as e:
        sys.exit(f"bench/cpu.py: {cmd[0]} exited {p.returncode}; cannot read its output ({e}):\n{out}")
    cpu = ru.ru_utime + ru.ru_stime
    print(f"{rate:.1f} {cpu / max(n, 1) * 1e6:.2f}")


if __name__ == "__main__":
    main()
