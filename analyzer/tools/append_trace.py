#!/usr/bin/env python3
"""Appends a trace's lines to another file at a steady rate, as a traced
program's writer would: for `cumemtrace top` (its CPU use while following,
its tests).

    analyzer/tools/make_synthetic_trace.py 1100000 /tmp/src.jsonl
    analyzer/tools/append_trace.py /tmp/src.jsonl /tmp/live.jsonl --rate 100000 &
    cumemtrace top /tmp/live.jsonl

Every --chunk-ms it writes the lines due by then, so the reader sees the file
grow in small steps. --split cuts each write inside a line (the rest comes
with the next write), as a writer caught mid-line leaves it. --no-end holds
back the `end` line; --hold-ms waits that long after the last write before
exiting. --own-pid puts this process's pid in the header, so that `top`
sees the writer go when it exits.
"""
import argparse
import os
import re
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source")
    parser.add_argument("dest")
    parser.add_argument("--rate", type=float, default=100000, help="lines per second")
    parser.add_argument("--chunk-ms", type=float, default=10)
    parser.add_argument("--split", action="store_true")
    parser.add_argument("--no-end", action="store_true")
    parser.add_argument("--hold-ms", type=float, default=0)
    parser.add_argument("--own-pid", action="store_true")
    args = parser.parse_args()

    with open(args.source, "rb") as f:
        lines = f.readlines()
    if args.no_end and lines and b'"ev":"end"' in lines[-1]:
        lines.pop()
    if args.own_pid and lines:
        lines[0] = re.sub(rb'"pid":[0-9]+', b'"pid":%d' % os.getpid(), lines[0], count=1)
    fd = os.open(args.dest, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = time.monotonic()
    done = 0
    carry = b""
    while done < len(lines):
        due = min(len(lines), max(done + 1, int((time.monotonic() - start) * args.rate)))
        data = carry + b"".join(lines[done:due])
        done = due
        carry = b""
        if args.split and done < len(lines) and len(data) > 1:
            cut = len(data) - max(1, len(lines[done - 1]) // 2)
            data, carry = data[:cut], data[cut:]
        os.write(fd, data)
        time.sleep(args.chunk_ms / 1000.0)
    if carry:
        os.write(fd, carry)
    os.close(fd)
    time.sleep(args.hold_ms / 1000.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
