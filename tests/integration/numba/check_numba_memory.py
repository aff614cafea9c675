#!/usr/bin/env python3
"""One ctest of tests/integration/numba (README.md there): numba_memory.py
runs under cumemtrace (LD_PRELOAD, the caching pool or passthrough) on the
simulated device, and the trace it leaves must say exactly what Numba says it
allocated and freed.

    check_numba_memory.py --mode caching|passthrough --python P [--python P...]
        --sim-dir SIM --preload LIBCUMEMTRACE --cli CUMEMTRACE --workdir DIR

Skips (77) without an interpreter that imports numba.cuda, except under
CI=true. Standard library only.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

# The modules beside this one, without leaving __pycache__ in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_suite  # noqa: E402  (finding the interpreter, the environment)

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "numba_memory.py")
FREE_API = {"cuMemAlloc_v2": "cuMemFree_v2", "cuMemHostAlloc": "cuMemFreeHost",
            "cuMemAllocManaged": "cuMemFree_v2"}


def read_trace(path):
    events, stacks = [], {}
    with open(path) as f:
        for line in f:
            event = json.loads(line)
            if event.get("ev") == "stack":
                stacks[event["id"]] = event["frames"]
            events.append(event)
    return events, stacks


def our_frame(frames, program):
    """The innermost Python frame of numba_memory.py in a stack, or None."""
    for frame in frames:
        if frame.get("py") and frame.get("file") and os.path.realpath(frame["file"]) == program:
            return frame
    return None


def covered(ptr, size, segments):
    """Whether segments (ptr/size events) cover [ptr, ptr + size) with no gap."""
    at, end = ptr, ptr + size
    for start, length in sorted((int(s["ptr"], 16), s["size"]) for s in segments):
        if start <= at < start + length:
            at = start + length
        if at >= end:
            return True
    return False


def check(manifest, events, stacks, mode):
    problems = []
    program = os.path.realpath(manifest["file"])

    # What Numba says of itself first: a wrong figure there is not the trace's fault.
    if not manifest.get("finished"):
        problems.append("numba_memory.py did not finish")
    if not manifest.get("round_trip_equal"):
        problems.append("to_device then copy_to_host did not give the data back")
    if manifest.get("pending_before_clear") != 3 or manifest.get("pending_after_clear") != 0:
        problems.append("Numba held %s pending frees before clear() and %s after (3 and 0 expected)"
                        % (manifest.get("pending_before_clear"), manifest.get("pending_after_clear")))
    for a in manifest["allocations"]:
        if a["size"] != a["nbytes"]:
            problems.append("%s: Numba allocated %d bytes for an array of %d" % (a["name"], a["size"], a["nbytes"]))
        if a.get("gpu_data_ptr", a["ptr"]) != a["ptr"]:
            problems.append("%s: device_ctypes_pointer %#x but gpu_data %#x"
                            % (a["name"], a["ptr"], a["gpu_data_ptr"]))

    header = events[0] if events and events[0].get("ev") == "header" else {}
    if header.get("pool") != mode:
        problems.append("the trace's header says pool %r, not %s" % (header.get("pool"), mode))

    # Every allocation, in Numba's order, at its pointer with its size and kind,
    # its stack naming the line of numba_memory.py that made it; nothing else.
    allocs = [e for e in events if e.get("ev") == "alloc"]
    expected = manifest["allocations"]
    if len(allocs) != len(expected):
        problems.append("the trace has %d allocs, Numba made %d:\n    trace: %s\n    numba: %s"
                        % (len(allocs), len(expected), [(e["api"], e["ptr"], e["size"]) for e in allocs],
                           [(a["api"], hex(a["ptr"]), a["size"]) for a in expected]))
    for a, e in zip(expected, allocs):
        want = {"api": a["api"], "kind": a["kind"], "dev": 0, "ptr": "%#x" % a["ptr"], "size": a["size"]}
        got = {k: e.get(k) for k in want}
        if got != want:
            problems.append("%s: the trace says %s, Numba %s" % (a["name"], got, want))
        frame = our_frame(stacks.get(e.get("stack"), []), program)
        if frame is None:
            problems.append("%s: its stack has no frame of numba_memory.py" % a["name"])
        elif frame.get("line") != a["line"] or frame.get("fn") != "main":
            problems.append("%s: its stack names %s line %s, Numba allocated it in main line %d"
                            % (a["name"], frame.get("fn"), frame.get("line"), a["line"]))

    # The three given back, each once, with the size and kind of its alloc,
    # from the line of clear(); the rest still live at the end.
    frees = [e for e in events if e.get("ev") == "free"]
    freed = [a for a in expected if a["freed"]]
    want_frees = sorted(("%#x" % a["ptr"], a["size"], a["kind"], FREE_API[a["api"]]) for a in freed)
    got_frees = sorted((e.get("ptr"), e.get("size"), e.get("kind"), e.get("api")) for e in frees)
    if got_frees != want_frees:
        problems.append("the trace's frees %s are not Numba's %s" % (got_frees, want_frees))
    for e in frees:
        frame = our_frame(stacks.get(e.get("stack"), []), program)
        line = freed[0]["free_line"] if freed else None
        if frame is None or frame.get("line") != line:
            problems.append("the free of %s does not name numba_memory.py line %s (CUMEMTRACE_FREE_STACKS=1): %s"
                            % (e.get("ptr"), line, frame))
    errors = [e for e in events if e.get("ev") == "error"]
    if errors:
        problems.append("error events: %s" % errors)
    end = events[-1] if events and events[-1].get("ev") == "end" else None
    live = [a for a in expected if not a["freed"]]
    if end is None:
        problems.append("the trace has no end event")
    elif (end.get("live"), end.get("live_bytes"), end.get("dropped")) != (len(live), sum(a["size"] for a in live), 0):
        problems.append("the end event says live %s, live_bytes %s, dropped %s; Numba still holds %d arrays of "
                        "%d bytes" % (end.get("live"), end.get("live_bytes"), end.get("dropped"), len(live),
                                      sum(a["size"] for a in live)))

    # Where the memory came from: passthrough has a segment twin for each
    # allocation; the caching pool serves cuMemAlloc_v2 from its segments and
    # passes the others (pinned, managed) through.
    segments = [e for e in events if e.get("ev") == "segment_alloc"]
    for a in expected:
        ptr = a["ptr"]
        if mode == "passthrough" or a["api"] != "cuMemAlloc_v2":
            twin = [s for s in segments if s["ptr"] == "%#x" % ptr and s["size"] == a["size"] and s["api"] == a["api"]]
            if len(twin) != 1:
                problems.append("%s: %d segment_alloc twins (one expected)" % (a["name"], len(twin)))
        elif not covered(ptr, a["size"], [s for s in segments if s["api"] in ("cuMemAlloc_v2", "cuMemMap")]):
            # (An expandable segment is mapped 2 MiB at a time: a large block
            # can span several adjacent segment_allocs.)
            problems.append("%s: [%#x, +%d) is not within the pool's segments" % (a["name"], ptr, a["size"]))

    # Numba's memory_info(): the device the trace names, and free memory that
    # went down by at least the device memory still allocated.
    devices = [e for e in events if e.get("ev") == "device"]
    info = manifest["memory_info"]
    totals = {info[k]["total"] for k in info}
    if len(devices) != 1 or devices[0].get("dev") != 0 or totals != {devices[0].get("total")}:
        problems.append("device events %s; Numba's total memory %s" % (devices, sorted(totals)))
    on_device = sum(a["size"] for a in expected if a["kind"] in ("device", "managed"))
    if not (info["start"]["free"] <= info["start"]["total"]
            and info["start"]["free"] - info["live"]["free"] >= on_device
            and info["end"]["free"] >= info["live"]["free"]):
        problems.append("Numba's free memory %s does not account for the %d bytes allocated" % (info, on_device))
    return problems, len(allocs), len(frees)


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True, choices=["caching", "passthrough"])
    parser.add_argument("--python", action="append", required=True)
    parser.add_argument("--sim-dir", required=True)
    parser.add_argument("--preload", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)
    for path in ("sim_dir", "preload", "cli", "workdir"):
        setattr(args, path, os.path.abspath(getattr(args, path)))
    args.devices = 1
    name = "numba.memory.%s" % args.mode

    python, version, missing = run_suite.numba_python_or_exit(name, args.python)
    if python is None:
        return missing

    os.makedirs(args.workdir, mode=0o700, exist_ok=True)
    os.chmod(args.workdir, 0o700)
    for stale in glob.glob(os.path.join(args.workdir, "*.json*")):
        os.unlink(stale)
    manifest_path = os.path.join(args.workdir, "manifest.json")
    env = run_suite.suite_env(args, args.mode, args.workdir)
    env["CUMEMTRACE_FREE_STACKS"] = "1"
    command = [python, PROGRAM, manifest_path]
    print("$ %s %s" % (" ".join("%s=%s" % (k, env[k]) for k in sorted(env)
                                if k.startswith(("CUMEMTRACE_", "NUMBA_", "LD_", "SIMCUDA_"))), " ".join(command)))
    run = subprocess.run(command, env=env, cwd=args.workdir, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    print(run.stdout[-4000:], end="")
    if run.returncode != 0:
        print("FAIL %s: numba_memory.py (Numba %s, %s) exited %d" % (name, version, python, run.returncode))
        return 1
    traces = glob.glob(os.path.join(args.workdir, "trace.*.jsonl"))
    if len(traces) != 1:
        print("FAIL %s: %d traces in %s, one expected" % (name, len(traces), args.workdir))
        return 1
    report = subprocess.run([args.cli, "report", traces[0]], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    with open(manifest_path) as f:
        manifest = json.load(f)
    events, stacks = read_trace(traces[0])
    problems, allocs, frees = check(manifest, events, stacks, args.mode)
    if report.returncode != 0:
        problems.append("`cumemtrace report %s` exited %d:\n%s" % (traces[0], report.returncode, report.stdout[-3000:]))
    if problems:
        print("FAIL %s:" % name)
        for problem in problems:
            print("  - " + problem)
        return 1
    print("PASS %s: %d allocations and %d frees of Numba %s, each where Numba says (%s)"
          % (name, allocs, frees, version, traces[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
