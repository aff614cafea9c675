#!/usr/bin/env python3
"""Reads `cumemtrace export --format csv` and `cumemtrace timeline` output
with Python's csv module and checks it, field by field, against the trace
read independently with the json module:
  read_csv.py PATH/TO/cumemtrace TRACE.jsonl...
Exit status 0 when every check holds; otherwise one line per failure."""
import csv
import json
import os
import subprocess
import sys
import tempfile

ROW_EVENTS = {"alloc", "free", "segment_alloc", "segment_free", "oom", "pool", "mark", "error"}
FIELDS = ["t", "dev", "tid", "ptr", "size", "block", "api", "kind", "stream", "stack", "name", "cause",
          "what", "allocated", "reserved", "cached_free", "largest_free", "device_free", "device_total",
          "free_blocks", "inactive_split"]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def run(cli, args, out):
    subprocess.run([cli] + args + ["-o", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def check_events(cli, trace, events, tmp):
    rows = run(cli, ["export", trace, "--format", "csv"], os.path.join(tmp, "events.csv"))
    stacks = {}
    expected = []
    for e in events:
        if e.get("ev") == "stack":
            stacks[e["id"]] = e["frames"]
        elif e.get("ev") in ROW_EVENTS:
            expected.append((e, stacks.get(e.get("stack"), [])))
    check(len(rows) == len(expected), f"{trace}: {len(rows)} CSV rows for {len(expected)} events")
    for n, (row, (e, frames)) in enumerate(zip(rows, expected), start=2):
        check(row["ev"] == e["ev"], f"{trace} row {n}: ev {row['ev']!r} != {e['ev']!r}")
        for field in FIELDS:
            if field in e and not (field == "dev" and e["ev"] in ("mark", "error")):
                check(row[field] == str(e[field]), f"{trace} row {n}: {field} {row[field]!r} != {e[field]!r}")
        if e.get("stack"):
            names = [f["fn"] for f in frames if f.get("fn")]
            want = names[0] if names else ""
            check(row["function"] == want, f"{trace} row {n}: function {row['function']!r} != {want!r}")
            # The innermost Python frame, "fn (file:line)", or "fn (file)" when its line is unknown.
            py = [f for f in frames if f.get("py")]
            want = ""
            if py:
                line = py[0].get("line")
                want = f"{py[0]['fn']} ({py[0]['file']}" + (f":{line}" if line is not None else "") + ")"
            check(row["python"] == want, f"{trace} row {n}: python {row['python']!r} != {want!r}")
        else:
            check(row["python"] == "", f"{trace} row {n}: python {row['python']!r} without a stack")


def check_timeline(cli, trace, events, tmp):
    rows = run(cli, ["timeline", trace, "--format", "csv"], os.path.join(tmp, "timeline.csv"))
    # Allocated per device from the trace itself: live pointers and their sizes.
    live, allocated, peak = {}, {}, {}
    for e in events:
        if e.get("ev") == "alloc":
            if e["ptr"] in live:  # its free was lost
                old_dev, old_size = live.pop(e["ptr"])
                allocated[old_dev] -= old_size
            live[e["ptr"]] = (e["dev"], e["size"])
            allocated[e["dev"]] = allocated.get(e["dev"], 0) + e["size"]
            peak[e["dev"]] = max(peak.get(e["dev"], 0), allocated[e["dev"]])
        elif e.get("ev") == "free" and e["ptr"] in live:
            dev, size = live.pop(e["ptr"])
            allocated[dev] -= size
    seen = {}
    for row in rows:
        if row["event"] == "sample":
            dev = int(row["dev"])
            seen[dev] = max(seen.get(dev, 0), int(row["allocated"]))
    check(seen == peak, f"{trace}: timeline peaks {seen} != {peak}")
    marks = [e for e in events if e.get("ev") == "mark"]
    mark_rows = [r for r in rows if r["event"] == "mark"]
    check([r["name"] for r in mark_rows] == [m["name"] for m in marks], f"{trace}: mark names differ")


def main():
    cli = sys.argv[1]
    for trace in sys.argv[2:]:
        with open(trace, encoding="utf-8") as f:
            events = [json.loads(line) for line in f if line.strip()]
        with tempfile.TemporaryDirectory() as tmp:
            check_events(cli, trace, events, tmp)
            check_timeline(cli, trace, events, tmp)
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
