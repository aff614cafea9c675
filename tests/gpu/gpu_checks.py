#!/usr/bin/env python3
"""The checks of scripts/gpu-check.sh (issue 7), one subcommand each.

Each reads what a program said it did (a route manifest, or the samples a
framework script took of its own accounting) and what cumemtrace wrote (the
trace, read here line by line, independently of cumemtrace's reader, and
`cumemtrace report --format json`), prints one line of figures, and exits 0
when they agree, 1 when they do not (the line says why), 2 on bad input.
Plain python3: a GPU machine may have no jq and no GoogleTest.
"""
import argparse
import json
import statistics
import sys

# What NVIDIA's runtime calls in the driver for each runtime allocator: a
# program with the runtime linked in (nvcc's default -cudart static) is seen
# only through cuGetProcAddress, so its trace names these.
STATIC_RUNTIME_APIS = {
    "cudaMalloc": {"cuMemAlloc_v2"},
    "cudaFree": {"cuMemFree_v2"},
    "cudaMallocAsync": {"cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync"},
    "cudaFreeAsync": {"cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
    "cudaMallocManaged": {"cuMemAllocManaged"},
    "cudaMallocHost": {"cuMemAllocHost_v2", "cuMemHostAlloc"},
    "cudaHostAlloc": {"cuMemHostAlloc"},
    "cudaFreeHost": {"cuMemFreeHost"},
}
MEMORY_EVENTS = {"alloc", "free", "segment_alloc", "segment_free", "error", "oom"}


class CheckFailed(Exception):
    pass


def read_json_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_json(path):
    with open(path) as f:
        return json.load(f)


# --- routes: a trace against a route manifest (as tests/integration does) ---

def expected_events(manifest):
    """The trace lines a manifest promises, in order (passthrough pool: each
    alloc preceded by its segment twin, each free followed by it; vmm
    handles have their mappings as segments)."""
    out = []
    for m in manifest:
        ev, vmm = m["ev"], m.get("kind") == "vmm"
        if ev in ("alloc", "free"):
            line = {k: m[k] for k in ("api", "kind", "dev", "ptr", "size", "stream", "tid") if k in m}
            line["ev"] = ev
            segment = {"dev": m["dev"], "ptr": m["ptr"], "size": m["size"]}
            if ev == "alloc":
                if not vmm:
                    out.append(dict(segment, ev="segment_alloc", api=m["api"]))
                out.append(line)
            else:
                out.append(line)
                if not vmm:
                    out.append(dict(segment, ev="segment_free"))
        elif ev == "error":
            out.append({"ev": "error", "api": m["api"], "ptr": m["ptr"], "what": m["what"]})
        elif ev in ("map", "unmap"):
            segment = {"ev": "segment_alloc" if ev == "map" else "segment_free",
                       "dev": m["dev"], "ptr": m["ptr"], "size": m["size"]}
            if ev == "map":
                segment["api"] = "cuMemMap"
            out.append(segment)
    return out


def api_matches(want, got, static_runtime, seen):
    if not static_runtime or want not in STATIC_RUNTIME_APIS:
        return got == want
    seen.setdefault(want, set()).add(got)
    return got in STATIC_RUNTIME_APIS[want]


def compare_events(expected, actual, static_runtime, seen):
    """None if the trace says exactly what the manifest does, else why.
    `seen` collects runtime api -> the driver apis the trace named for it."""
    for i, (want, got) in enumerate(zip(expected, actual)):
        for key, value in want.items():
            if key == "api":
                if not api_matches(value, got.get("api"), static_runtime, seen):
                    accepted = sorted(STATIC_RUNTIME_APIS.get(value, {value})) if static_runtime else [value]
                    return (f"event {i}: api is {got.get('api')!r}, expected {' or '.join(accepted)} "
                            f"(the program called {value}): {json.dumps(got)}")
            elif got.get(key) != value:
                return f"event {i}: {key} is {got.get(key)!r}, expected {value!r}: {json.dumps(got)}"
        if want["ev"] in ("alloc", "free") and ("stream" in got) != ("stream" in want):
            return f"event {i}: stream {'present' if 'stream' in got else 'missing'}: {json.dumps(got)}"
        if want["ev"] in ("alloc", "free", "error") and (
                not isinstance(got.get("stack"), int) or got.get("tid", 0) <= 0):
            return f"event {i}: stack/tid missing: {json.dumps(got)}"
    if len(expected) != len(actual):
        extra = actual[len(expected):len(expected) + 3] or expected[len(actual):len(actual) + 3]
        return (f"{len(expected)} memory events expected, {len(actual)} written; "
                f"first difference: {json.dumps(extra)}")
    return None


def frame_problem(trace, manifest):
    """None if header first, end last, t non-decreasing, end's live count
    and bytes those the manifest left allocated; else why."""
    if len(trace) < 2 or trace[0].get("ev") != "header" or trace[-1].get("ev") != "end":
        return "the trace does not start with header and end with end"
    last_t = 0
    for i, line in enumerate(trace[1:], 1):
        if line["t"] < last_t:
            return f"line {i}: t goes back ({line['t']} < {last_t})"
        last_t = line["t"]
    live = {}
    for m in manifest:
        key = (m.get("kind"), m.get("ptr"))
        if m["ev"] == "alloc":
            live[key] = m["size"]
        elif m["ev"] == "free":
            live.pop(key, None)
    end = trace[-1]
    if (end.get("reason"), end.get("dropped"), end.get("live"), end.get("live_bytes")) != (
            "exit", 0, len(live), sum(live.values())):
        return f"end is {json.dumps(end)}, expected live {len(live)} ({sum(live.values())} bytes), nothing dropped"
    return None


def program_counts(path):
    """allocs=, frees=, live_bytes= from the line the program printed."""
    with open(path) as f:
        for line in f:
            if line.startswith("gpu_routes:"):
                return {k: int(v) for k, v in (field.split("=") for field in line.split()[1:])}
    raise CheckFailed(f"{path} has no 'gpu_routes:' line")


def check_routes(args):
    manifest = read_json_lines(args.manifest)
    trace = read_json_lines(args.trace)
    events = [line for line in trace if line.get("ev") in MEMORY_EVENTS]
    expected = expected_events(manifest)
    seen = {}
    why = compare_events(expected, events, args.static_runtime, seen) or frame_problem(trace, manifest)
    if why:
        raise CheckFailed(why)
    allocs = sum(e["ev"] == "alloc" for e in events)
    frees = sum(e["ev"] == "free" for e in events)
    figures = f"{allocs} allocs, {frees} frees, {trace[-1]['live']} live ({trace[-1]['live_bytes']} B) as the manifest"
    if args.program_output:
        counts = program_counts(args.program_output)
        if (counts["allocs"], counts["frees"], counts["live_bytes"]) != (
                allocs, frees, trace[-1]["live_bytes"]):
            raise CheckFailed(f"the program counted {counts}, the trace {allocs} allocs, {frees} frees, "
                              f"{trace[-1]['live_bytes']} live bytes")
        figures += " and the program's own counts"
    if args.static_runtime:
        return figures + "; static runtime seen as " + ", ".join(
            f"{api}->{'/'.join(sorted(driver))}" for api, driver in sorted(seen.items()))
    apis = sorted({e["api"] for e in events if e["ev"] == "alloc"})
    return figures + f"; apis {','.join(apis)}"


# --- the trace's state where a framework sampled its own accounting ---

class TraceState:
    """Live allocations and segments, replayed from the trace in order."""

    def __init__(self):
        self.allocs = {}    # (kind == vmm, ptr) -> (api, kind, size)
        self.segments = {}  # ptr -> (api, size)

    def apply(self, line):
        ev = line.get("ev")
        if ev == "alloc":
            self.allocs[(line["kind"] == "vmm", line["ptr"])] = (line["api"], line["kind"], line["size"])
        elif ev == "free":
            self.allocs.pop((line["kind"] == "vmm", line["ptr"]), None)
        elif ev == "segment_alloc":
            # The caching pool's own segments ("pool": true) are not the
            # program's: a library's cudaMalloc served by the pool is in a
            # range the pool mapped, which is not PyTorch's cuMemMap.
            api = line.get("api", "?")
            self.segments[line["ptr"]] = (api + " (pool)" if line.get("pool") else api, line["size"])
        elif ev == "segment_free":
            self.segments.pop(line["ptr"], None)

    def snapshot(self, rounding):
        alloc_by_api, segment_by_api = {}, {}
        for api, kind, size in self.allocs.values():
            if kind in ("device", "managed", "vmm"):
                rounded = -(-size // rounding) * rounding if rounding > 1 else size
                alloc_by_api[api] = alloc_by_api.get(api, 0) + rounded
        for api, size in self.segments.values():
            segment_by_api[api] = segment_by_api.get(api, 0) + size
        return {"alloc": alloc_by_api, "segment": segment_by_api}


def states_at_marks(trace_path, prefix, rounding):
    """{N: snapshot} at each mark "<prefix> N", in trace order."""
    state, states = TraceState(), {}
    with open(trace_path) as f:
        for text in f:
            line = json.loads(text)
            if line.get("ev") == "mark" and line.get("name", "").startswith(prefix + " "):
                states[int(line["name"][len(prefix) + 1:])] = state.snapshot(rounding)
            else:
                state.apply(line)
    return states


def ours(snapshot, what, apis):
    table = snapshot[what]
    return sum(v for api, v in table.items() if apis == ["*"] or api in apis)


def check_samples(args):
    run = read_json(args.samples)
    for expectation in args.expect:
        field, _, value = expectation.partition("=")
        if str(run.get(field)) != value:
            raise CheckFailed(f"the program ran with {field}={run.get(field)!r}, not {value!r}")
    samples = run["samples"]
    states = states_at_marks(args.trace, args.mark, args.round)
    if not states:
        raise CheckFailed(f"no '{args.mark} N' marks in {args.trace}: cumemtrace_mark was not reached")
    apis = args.api.split(",")
    compared, worst, worst_at, equal = 0, 0.0, None, 0
    for sample in samples:
        if sample["step"] not in states:
            raise CheckFailed(f"no mark '{args.mark} {sample['step']}' in the trace")
        theirs = sample[args.key]
        mine = ours(states[sample["step"]], args.ours, apis)
        compared += 1
        equal += mine == theirs
        if args.relation == "ge":
            error = 0.0 if mine >= theirs else (theirs - mine) / max(theirs, 1)
        else:
            error = abs(mine - theirs) / max(theirs, 1)
        if error > worst or worst_at is None:
            worst, worst_at = max(error, worst), (sample["step"], theirs, mine)
    last = states[samples[-1]["step"]]
    others = {api: v for api, v in last[args.ours].items() if apis != ["*"] and api not in apis}
    figures = (f"{compared} samples, {equal} equal, worst {worst:.2%} (step {worst_at[0]}: "
               f"theirs {worst_at[1]} B, ours {worst_at[2]} B)")
    if others:
        figures += f"; other apis at the end: {others}"
    if compared < args.min_samples:
        raise CheckFailed(f"only {compared} samples: " + figures)
    if ours(last, args.ours, apis) < args.min_bytes:
        raise CheckFailed(f"only {ours(last, args.ours, apis)} B live at the last sample, "
                          f"the program keeps {args.min_bytes} B: " + figures)
    if worst > args.tolerance:
        raise CheckFailed(figures)
    return figures


# --- torch: leak, out-of-memory, time ---

def check_growth(args):
    report = read_json(args.report)
    growth = report.get("growth", [])
    if not growth:
        raise CheckFailed(f"no growth leak reported (iterations: {json.dumps(report.get('iterations'))})")
    top = growth[0]
    named = [fn for fn in top["functions"] if args.function in fn]
    site = named[0] if named else (top["functions"][:1] or ["?"])[0]
    figures = (f"{top['bytes_per_iteration']} B/iteration over {top['iterations']} iterations "
               f"at {site} (iterations from {report['iterations']['source']})")
    if not named:
        raise CheckFailed(figures + f"; no frame names {args.function}: {top['functions'][:12]}")
    if args.python_file:
        line = python_line(top.get("frames", []), args.function, args.python_file)
        if line is None:
            raise CheckFailed(figures + f"; no Python frame {args.function} in {args.python_file} with its line")
        figures += f" ({args.python_file}:{line})"
    if args.expect_bytes and top["bytes_per_iteration"] != args.expect_bytes:
        raise CheckFailed(figures + f"; expected {args.expect_bytes} B/iteration")
    return figures


def python_line(frames, function, file_name):
    """The line of the first Python frame (TRACE_FORMAT.md, "A Python frame")
    whose qualified name ends in `function` and whose file ends in
    `file_name`; None when there is none or it has no line."""
    for frame in frames:
        if (frame.get("py") and str(frame.get("fn", "")).split(".")[-1] == function
                and str(frame.get("file", "")).endswith(file_name) and isinstance(frame.get("line"), int)):
            return frame["line"]
    return None


def check_python_lines(args):
    """The sites live at the allocated peak name the training script's own
    Python lines: each function in --function has a frame, with its line,
    in --python-file in some site of top_at_peak."""
    report = read_json(args.report)
    found = {}
    for site in report.get("top_at_peak", []):
        for function in args.function:
            line = python_line(site.get("frames", []), function, args.python_file)
            if line is not None and function not in found:
                found[function] = line
    figures = ", ".join(f"{f} ({args.python_file}:{line})" for f, line in found.items())
    missing = [f for f in args.function if f not in found]
    if missing:
        raise CheckFailed(f"no Python frame of {', '.join(missing)} in {args.python_file} among the sites live "
                          f"at the peak (found: {figures or 'none'})")
    return "sites at the peak name " + figures


def check_oom(args):
    report = read_json(args.report)
    request = read_json(args.samples)["oom_request"]
    if not request:
        raise CheckFailed("the program provoked no out-of-memory failure")
    events = [e for e in report.get("oom_events", []) if e.get("size", 0) >= request]
    if not events:
        raise CheckFailed(f"no oom event for a request of {request} B "
                          f"({report.get('ooms', 0)} oom events in all)")
    e = events[0]
    if e.get("cause") != "capacity" or not e.get("sentence"):
        raise CheckFailed(f"oom event not explained as a capacity failure: {json.dumps(e)[:400]}")
    return f"{report['ooms']} oom event(s); {e['sentence']}"


def median_step(path):
    return read_json(path)["median_step_seconds"]


def paired_ratio(base_paths, traced_paths):
    """Median over the steps of traced / baseline step time, the runs paired
    step by step: torch_train.py draws the same batch shapes each run, and a
    step's time depends mostly on its shape (one run's steps spread over
    +-20%), so pairing removes that spread. None when the shapes differ."""
    runs = [read_json(p).get("samples") for p in base_paths]
    traced = [read_json(p).get("samples") for p in traced_paths]
    every = runs + traced
    if any(not r or len(r) != len(every[0]) for r in every):
        return None
    shape = lambda s: (s.get("batch"), s.get("length"))
    ratios = []
    for i in range(min(20, len(every[0]) // 4), len(every[0])):
        if any(shape(r[i]) != shape(every[0][i]) for r in every):
            return None
        ratios.append(statistics.mean(r[i]["seconds"] for r in traced) /
                      statistics.mean(r[i]["seconds"] for r in runs))
    return statistics.median(ratios) if ratios else None


def check_time(args):
    base = [median_step(p) for p in args.base]
    traced = statistics.mean(median_step(p) for p in args.traced)
    reference = statistics.mean(base)
    ratio = traced / reference
    figures = f"median step {traced * 1e3:.3f} ms vs {reference * 1e3:.3f} ms: {ratio - 1:+.2%}"
    paired = paired_ratio(args.base, args.traced)
    if paired is not None:
        # The goal is judged on the paired figure, the less noisy one.
        figures += f"; step by step: {paired - 1:+.2%}"
        ratio = paired
    figures += f" (goal < {args.goal:+.0%})"
    if len(base) > 1:
        figures += f"; baseline runs differ by {abs(base[0] - base[1]) / reference:.2%}"
        noise = paired_ratio(args.base[1:], args.base[:1])
        if noise is not None:
            figures += f" ({noise - 1:+.2%} step by step)"
    if ratio - 1 > args.goal:
        raise CheckFailed(figures)
    return figures


def check_peak_reserved(args):
    theirs = read_json(args.samples)["max_reserved"]
    device = read_json(args.report)["devices"]["0"]
    mine = device["peak_reserved"]
    figures = (f"our pool {mine} B vs PyTorch's caching allocator {theirs} B ({mine / theirs:.3f}x); "
               f"peak allocated {device['peak_allocated']} B")
    if mine > theirs * args.goal:
        raise CheckFailed(figures + f" (goal <= {args.goal}x)")
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="check", required=True)

    p = sub.add_parser("routes", help="a route program's trace against its manifest")
    p.add_argument("--manifest", required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--program-output", help="the program's stdout (its own counts)")
    p.add_argument("--static-runtime", action="store_true",
                   help="runtime names in the manifest, driver names in the trace")
    p.set_defaults(run=check_routes)

    p = sub.add_parser("samples", help="the trace's state at each sample mark vs the program's accounting")
    p.add_argument("--samples", required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--key", required=True, help="the sample's field: reserved, allocated, ...")
    p.add_argument("--ours", choices=("alloc", "segment"), required=True,
                   help="live allocations or live segments of the trace")
    p.add_argument("--api", default="*", help="comma-separated apis counted (* for all)")
    p.add_argument("--round", type=int, default=1, help="round each allocation up to this")
    p.add_argument("--relation", choices=("eq", "ge"), default="eq")
    p.add_argument("--tolerance", type=float, default=0.0, help="largest relative difference")
    p.add_argument("--mark", default="sample")
    p.add_argument("--min-samples", type=int, default=1)
    p.add_argument("--min-bytes", type=int, default=0, help="the trace's least live bytes at the last sample")
    p.add_argument("--expect", action="append", default=[], metavar="FIELD=VALUE",
                   help="a top-level field of the samples file (how the program ran)")
    p.set_defaults(run=check_samples)

    p = sub.add_parser("growth", help="a planted growth leak is reported at its site")
    p.add_argument("--report", required=True)
    p.add_argument("--function", required=True, help="a frame of the leak's stack contains this")
    p.add_argument("--expect-bytes", type=int, default=0)
    p.add_argument("--python-file", help="the function must be a Python frame of this file, with its line")
    p.set_defaults(run=check_growth)

    p = sub.add_parser("python-lines", help="the sites at the peak name the script's Python lines")
    p.add_argument("--report", required=True)
    p.add_argument("--python-file", required=True)
    p.add_argument("--function", required=True, action="append", help="a Python function of that file")
    p.set_defaults(run=check_python_lines)

    p = sub.add_parser("oom", help="a provoked out-of-memory failure is explained")
    p.add_argument("--report", required=True)
    p.add_argument("--samples", required=True)
    p.set_defaults(run=check_oom)

    p = sub.add_parser("time", help="median step time against a baseline")
    p.add_argument("--base", required=True, action="append")
    p.add_argument("--traced", required=True, action="append", help="traced runs (their mean)")
    p.add_argument("--goal", type=float, required=True, help="largest slowdown, 0.02 for 2%%")
    p.set_defaults(run=check_time)

    p = sub.add_parser("peak-reserved", help="our pool's peak reserved vs PyTorch's")
    p.add_argument("--samples", required=True, help="PyTorch's own run (its max_reserved)")
    p.add_argument("--report", required=True)
    p.add_argument("--goal", type=float, default=1.0)
    p.set_defaults(run=check_peak_reserved)

    args = parser.parse_args()
    try:
        print(args.run(args))
        return 0
    except CheckFailed as failure:
        print(failure)
        return 1
    except (OSError, ValueError, KeyError, TypeError, IndexError) as bad:
        print(f"cannot check: {type(bad).__name__}: {bad}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
