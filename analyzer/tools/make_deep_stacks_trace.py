#!/usr/bin/env python3
"""Writes a trace of many distinct deep call stacks, for sizing and timing
the HTML report's flame graphs (analyzer/render/README.md has the figures).

    analyzer/tools/make_deep_stacks_trace.py /tmp/deep.jsonl
    cumemtrace report /tmp/deep.jsonl --format html -o /tmp/deep.html
    node tests/js/flame_measure.mjs /tmp/deep.html

STACKS distinct stacks (default 10,000) of DEPTH frames (default 60), native
and Python frames alike, in the shape of a Python program through PyTorch:
the outermost frames are shared by all, then each further quarter of the
stack branches ten ways per caller (10, 100, 1,000 callers, then every stack
its own), so a flame graph has wide frames near the root and thousands of
narrow ones below. One allocation per stack (sizes spread over two orders of
magnitude): every third one freed at once (so it weighs in the allocated
view only), a fifth of the others after the peak (live at the peak, not
leaked), the rest leaked; so the three views differ. Seeded: the same
arguments always give the same bytes.
"""
import argparse
import json
import random

HEADER = {"ev": "header", "format": "cumemtrace", "version": 1, "pid": 4300, "ppid": 4000, "host": "node7",
          "exe": "/usr/bin/python3.12", "argv": ["python3", "train.py"], "start_unix_ns": 1763740000000000000,
          "pool": "passthrough", "config": {"stacks": 64}}
OUTER = [("_start", "/usr/bin/python3.12"), ("__libc_start_main", "/lib/x86_64-linux-gnu/libc.so.6"),
         ("Py_RunMain", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0")]
INNER = [("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType)", "libtorch_cuda.so"),
         ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long)",
          "libc10_cuda.so")]
LIBPYTHON = "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"


def native(fn, module, ip):
    return {"ip": "0x%x" % ip, "fn": fn, "module": module, "off": "0x%x" % (ip & 0xfffff)}


def python(fn, file, line):
    return {"py": True, "fn": fn, "file": file, "line": line}


def frames_of(i, depth, branch, shared_names):
    """Outermost first: shared frames, then `depth` frames whose names depend
    on ever longer prefixes of i's base-`branch` digits (with `shared_names`,
    on the last digit only: the same functions called from many places, as
    in most programs, so far fewer distinct names)."""
    digits = []
    n = i
    for _ in range(4):
        digits.append(n % branch)
        n //= branch
    digits.reverse()  # most significant first: the first quarter branches least
    out = [native(fn, module, 0x7f0000001000 + 16 * k) for k, (fn, module) in enumerate(OUTER)]
    middle = depth - len(OUTER) - len(INNER)
    for level in range(middle):
        quarter = min(3, level * 4 // middle)
        prefix = str(digits[quarter]) if shared_names else "_".join(str(d) for d in digits[:quarter + 1])
        if level % 3 == 2:  # the interpreter's loop between Python frames
            out.append(native("_PyEval_EvalFrameDefault", LIBPYTHON, 0x7f5000080000 + level))
        else:
            out.append(python("Layer%d.forward_%s" % (level, prefix), "/work/model/layer%d.py" % level, 10 + level))
    out += [native(fn, "/opt/venv/lib/python3.12/site-packages/torch/lib/" + module, 0x7f1000000000 + 64 * k)
            for k, (fn, module) in enumerate(INNER)]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output")
    parser.add_argument("--stacks", type=int, default=10000)
    parser.add_argument("--depth", type=int, default=60)
    parser.add_argument("--branch", type=int, default=10, help="callees per caller at each quarter")
    parser.add_argument("--shared-names", action="store_true",
                        help="name frames by level and last digit only (realistic), not by the whole path")
    args = parser.parse_args()
    if args.depth < len(OUTER) + len(INNER) + 4:
        parser.error("--depth must be at least %d" % (len(OUTER) + len(INNER) + 4))
    rng = random.Random(7)
    dump = lambda event: json.dumps(event, separators=(",", ":")) + "\n"
    t = 1000
    with open(args.output, "w", encoding="utf-8") as out:
        out.write(dump(HEADER))
        out.write(dump({"ev": "device", "t": t, "dev": 0, "name": "NVIDIA H100 80GB HBM3", "total": 85045870592}))
        live = []
        for i in range(args.stacks):
            t += 10
            # Innermost first, as the preload writes them.
            out.write(dump({"ev": "stack", "t": t, "id": i + 1, "frames": frames_of(i, args.depth, args.branch, args.shared_names)[::-1]}))
            size = 512 * rng.randint(1, 200)
            ptr = "0x%x" % (0x7f3a00000000 + i * 0x100000)
            out.write(dump({"ev": "alloc", "t": t + 1, "tid": 4300, "api": "cudaMalloc", "kind": "device", "dev": 0,
                            "ptr": ptr, "size": size, "stack": i + 1}))
            if i % 3 == 0:
                out.write(dump({"ev": "free", "t": t + 2, "tid": 4300, "api": "cudaFree", "kind": "device", "dev": 0,
                                "ptr": ptr, "size": size, "stack": 0}))
            else:
                live.append((ptr, size))
        t += 1000
        kept = []
        for k, (ptr, size) in enumerate(live):
            if k % 5 == 0:
                t += 10
                out.write(dump({"ev": "free", "t": t, "tid": 4300, "api": "cudaFree", "kind": "device", "dev": 0,
                                "ptr": ptr, "size": size, "stack": 0}))
            else:
                kept.append(size)
        out.write(dump({"ev": "end", "t": t + 1000, "reason": "exit", "live": len(kept), "live_bytes": sum(kept),
                        "dropped": 0}))


if __name__ == "__main__":
    main()
