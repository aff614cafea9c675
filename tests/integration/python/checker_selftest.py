#!/usr/bin/env python3
"""check_python_stacks.py on made-up traces: frames as the preload must
write them pass, and each way of getting them wrong fails with a message
that names it (README.md here). Standard library only; exit 0 when the
checker behaves, 1 otherwise."""
import copy
import json
import os
import subprocess
import sys
import tempfile

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_python_stacks.py")
PID = 4242
TID = 4243


def native(fn, module):
    return {"ip": "0x7f0000001000", "fn": fn, "module": module, "off": "0x1000"}


FFI = [native("ffi_call_unix64", "/lib/x86_64-linux-gnu/libffi.so.8"),
       native("ffi_call", "/lib/x86_64-linux-gnu/libffi.so.8"),
       native("_ctypes_callproc", "/py/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"),
       native("_PyEval_EvalFrameDefault", "/py/lib/libpython3.11.so.1.0")]
CLOSURE = [native("_CallPythonObject", "/py/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"),
           native("ffi_closure_unix64_inner", "/lib/x86_64-linux-gnu/libffi.so.8")]
LIBC = [native("msort_with_tmp", "/lib/x86_64-linux-gnu/libc.so.6")]
MAIN = [native("Py_BytesMain", "/py/lib/libpython3.11.so.1.0"), native("main", "/py/bin/python3.11")]


def py(fn, file, line):
    return {"py": True, "fn": fn, "file": file, "line": line}


def mframe(fn, file, line):
    return {"fn": fn, "name": fn.rsplit(".", 1)[-1], "file": file, "line": line}


APP = "/app/prog.py"
PLAIN = [(("leaf", APP, 10), ("Outer.mid", APP, 20), ("<module>", APP, 30))]
CALLBACK = [("compare", APP, 40)], [("sort_with", APP, 50), ("<module>", APP, 60)]
GENERATED = [("fn_002", "/generated/gen_002.py", 3), ("<module>", APP, 70)]


def good():
    """(manifest, trace events) that the checker must accept."""
    stacks = [[mframe(*f) for f in PLAIN[0]],
              [mframe(*f) for f in CALLBACK[0] + CALLBACK[1]],
              [mframe(*f) for f in GENERATED]]
    entries = [
        {"kind": "alloc", "api": "cudaMalloc", "case": "plain", "tid": TID, "thread": "MainThread",
         "size": 10003, "py_stack": 0},
        {"kind": "alloc", "api": "cudaMalloc", "case": "qsort", "tid": TID, "thread": "MainThread",
         "size": 10005, "py_stack": 1, "native_between": [1]},
        {"kind": "oom", "api": "cudaMalloc", "case": "oom", "tid": TID, "thread": "MainThread",
         "size": (1 << 40) + 7, "py_stack": 0},
        {"kind": "error", "api": "cudaFree", "case": "bad_free", "tid": TID, "thread": "MainThread",
         "ptr": "0xbad010", "py_stack": 0},
        {"kind": "alloc", "api": "cuMemAlloc_v2", "case": "codereuse", "tid": TID, "thread": "MainThread",
         "size": 10007, "py_stack": 2},
        {"kind": "free", "api": "cudaFree", "case": "free", "tid": TID, "thread": "MainThread",
         "ptr": "0x7f0000200000", "py_stack": 0},
    ]
    manifest = {"format": "pystack-manifest", "version": 1, "pid": PID, "group": "selftest",
                "python": "3.11.7", "implementation": "CPython", "expect_end": True,
                "py_stacks": stacks, "entries": entries}
    plain = FFI + [py(*f) for f in PLAIN[0]] + MAIN
    callback = (FFI + [py(*f) for f in CALLBACK[0]] + CLOSURE + LIBC + FFI
                + [py(*f) for f in CALLBACK[1]] + MAIN)
    generated = FFI + [py(*f) for f in GENERATED] + MAIN
    events = [
        {"ev": "header", "format": "cumemtrace", "version": 1, "pid": PID, "ppid": 1,
         "config": {"stacks": 256, "python": "auto", "python_frames": "CPython 3.11.7 (frames walked)"}},
        {"ev": "stack", "t": 1, "id": 1, "frames": plain},
        {"ev": "alloc", "t": 2, "tid": TID, "api": "cudaMalloc", "kind": "device", "dev": 0,
         "ptr": "0x7f0000200000", "size": 10003, "stack": 1},
        {"ev": "stack", "t": 3, "id": 2, "frames": callback},
        {"ev": "alloc", "t": 4, "tid": TID, "api": "cudaMalloc", "kind": "device", "dev": 0,
         "ptr": "0x7f0000300000", "size": 10005, "stack": 2},
        {"ev": "oom", "t": 5, "tid": TID, "api": "cudaMalloc", "dev": 0, "size": (1 << 40) + 7, "stack": 1},
        {"ev": "error", "t": 6, "tid": TID, "api": "cudaFree", "ptr": "0xbad010",
         "what": "unknown_pointer", "stack": 1},
        {"ev": "stack", "t": 7, "id": 3, "frames": generated},
        {"ev": "alloc", "t": 8, "tid": TID, "api": "cuMemAlloc_v2", "kind": "device", "dev": 0,
         "ptr": "0x7f0000400000", "size": 10007, "stack": 3},
        {"ev": "free", "t": 9, "tid": TID, "api": "cudaFree", "kind": "device", "dev": 0,
         "ptr": "0x7f0000200000", "size": 10003, "stack": 0},
        {"ev": "end", "t": 10, "reason": "exit", "live": 2, "live_bytes": 20012, "dropped": 0},
    ]
    return manifest, events


def stack(events, sid):
    return next(e for e in events if e["ev"] == "stack" and e["id"] == sid)["frames"]


def py_positions(frames):
    return [i for i, f in enumerate(frames) if f.get("py")]


# Each: (name, mode, mutation of (manifest, events), text the output must hold)
def m_drop(m, ev):
    del stack(ev, 1)[py_positions(stack(ev, 1))[1]]


def m_repeat(m, ev):
    s = stack(ev, 1)
    i = py_positions(s)[0]
    s.insert(i, copy.deepcopy(s[i]))


def m_line(m, ev):
    stack(ev, 1)[py_positions(stack(ev, 1))[0]]["line"] = 11


def m_stale_name(m, ev):
    # code-object reuse: the frame named after the function that had the address before
    f = stack(ev, 3)[py_positions(stack(ev, 3))[0]]
    f["fn"], f["file"] = "fn_001", "/generated/gen_001.py"


def m_order(m, ev):
    s = stack(ev, 1)
    a, b = py_positions(s)[:2]
    s[a], s[b] = s[b], s[a]


def m_py_innermost(m, ev):
    s = stack(ev, 1)
    pys = [f for f in s if f.get("py")]
    rest = [f for f in s if not f.get("py")]
    s[:] = pys + rest


def m_no_libc(m, ev):
    s = stack(ev, 2)
    s[:] = [f for f in s if "libc.so" not in str(f.get("module"))]


def m_line_string(m, ev):
    stack(ev, 1)[py_positions(stack(ev, 1))[0]]["line"] = "10"


def m_py_not_true(m, ev):
    stack(ev, 1)[py_positions(stack(ev, 1))[0]]["py"] = 1


def m_no_py(m, ev):
    for sid in (1, 2, 3):
        s = stack(ev, sid)
        s[:] = [f for f in s if not f.get("py")]


def m_note(m, ev):
    ev[0]["config"]["python_frames"] = "native stacks only: CPython 3.8.18 is not supported"


def m_version(m, ev):
    ev[0]["config"]["python_frames"] = "CPython 3.12.1"


def m_free_stack(m, ev):
    next(e for e in ev if e["ev"] == "free")["stack"] = 1


def m_no_end(m, ev):
    ev.pop()


def m_tid(m, ev):
    next(e for e in ev if e["ev"] == "alloc")["tid"] = TID + 1


def m_missing_event(m, ev):
    ev[:] = [e for e in ev if e["ev"] != "oom"]


def m_extra_event(m, ev):
    ev.insert(3, {"ev": "alloc", "t": 2, "tid": TID, "api": "cudaMalloc", "kind": "device", "dev": 0,
                  "ptr": "0x7f0000500000", "size": 999, "stack": 1})


def m_twice(m, ev):
    ev.insert(3, dict(ev[2]))


def m_undefined_stack(m, ev):
    next(e for e in ev if e["ev"] == "alloc")["stack"] = 77


def m_zero_stack(m, ev):
    next(e for e in ev if e["ev"] == "error")["stack"] = 0


def m_no_ffi(m, ev):
    s = stack(ev, 1)
    s[:] = [f for f in s if "ffi" not in str(f.get("module")) and "_ctypes" not in str(f.get("module"))]


def m_free_stacks_kept_but_zero(m, ev):
    ev[0]["config"]["free_stacks"] = True


def m_free_stacks_wrong_frames(m, ev):
    ev[0]["config"]["free_stacks"] = True
    next(e for e in ev if e["ev"] == "free")["stack"] = 3


def m_dropped(m, ev):
    ev[-1]["dropped"] = 3


CASES = [
    ("a frame missing", "frames", m_drop, "Python frame #1 missing: expected Outer.mid (/app/prog.py:20)"),
    ("a frame repeated", "frames", m_repeat, "(a repeated frame)"),
    ("a wrong line", "frames", m_line, "expected leaf (/app/prog.py:10), got leaf (/app/prog.py:11)"),
    ("a stale name after code-object reuse", "frames", m_stale_name,
     "expected fn_002 (/generated/gen_002.py:3), got fn_001 (/generated/gen_001.py:3)"),
    ("frames out of order", "frames", m_order, "Python frame #"),
    ("Python frames innermost of the ctypes path", "frames", m_py_innermost,
     "the innermost frame is a Python frame"),
    ("no libc between callback and caller", "frames", m_no_libc, "no libc frame between Python frames #0"),
    ("a line that is not an integer", "frames", m_line_string, "(not an integer)"),
    ("py not true", "frames", m_py_not_true, '"py" is 1, expected true'),
    ("no Python frames (the preload before the change)", "frames", m_no_py,
     "no Python frames in the stack; expected 3, innermost leaf (/app/prog.py:10)"),
    ("a native-only note where frames are expected", "frames", m_note,
     "expected a string starting 'CPython 3.11.7'"),
    ("another interpreter's version", "frames", m_version, "expected a string starting 'CPython 3.11.7'"),
    ("a free with a stack", "frames", m_free_stack, "1 of 1 free events carry a stack"),
    ("no end line", "frames", m_no_end, "no end line"),
    ("free stacks kept, a free without one", "frames", m_free_stacks_kept_but_zero,
     "free cudaFree ptr=0x7f0000200000 case=free thread=MainThread (trace line 10, stack 0): no stack"),
    ("free stacks kept, a free with another stack", "frames", m_free_stacks_wrong_frames,
     "expected leaf (/app/prog.py:10), got fn_002 (/generated/gen_002.py:3)"),
    ("events dropped", "frames", m_dropped, "3 events were dropped"),
    ("the wrong thread", "frames", m_tid, "tid 4244, expected 4243"),
    ("an event missing", "frames", m_missing_event, "no oom event for oom cudaMalloc"),
    ("an event not in the manifest", "frames", m_extra_event, "event not in the manifest (size 999"),
    ("an event recorded twice", "frames", m_twice, "recorded 2 times"),
    ("a stack id never defined", "frames", m_undefined_stack, "uses stack 77, not defined before it"),
    ("an event without a stack", "frames", m_zero_stack, "no stack (stack 0)"),
    ("no ctypes/libffi frames", "frames", m_no_ffi, "no libffi/_ctypes frame innermost"),
    ("Python frames with CUMEMTRACE_PYTHON=off", "off", None, "stacks hold Python frames"),
    ("Python frames on an interpreter not walked", "native-only", None, "stacks hold Python frames"),
]


def write(directory, manifest, events):
    trace = os.path.join(directory, "trace.%d.jsonl" % PID)
    with open(trace, "w") as out:
        for e in events:
            out.write(json.dumps(e, separators=(",", ":")) + "\n")
    path = os.path.join(directory, "manifest.%d.json" % PID)
    with open(path, "w") as out:
        json.dump(manifest, out)
    return trace, path


def run_checker(directory, manifest, events, mode):
    trace, path = write(directory, manifest, events)
    done = subprocess.run([sys.executable, CHECKER, "--mode", mode, "--trace", trace, "--manifest", path],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return done.returncode, done.stdout.decode(errors="replace")


def main():
    problems = 0
    with tempfile.TemporaryDirectory() as directory:
        manifest, events = good()
        code, output = run_checker(directory, manifest, events, "frames")
        if code != 0:
            print("FAIL a right trace is rejected (exit %d):\n%s" % (code, output))
            problems += 1
        else:
            print("ok   a right trace passes: " + output.strip().splitlines()[-1])
        manifest, events = good()
        events[0]["config"]["free_stacks"] = True
        next(e for e in events if e["ev"] == "free")["stack"] = 1
        code, output = run_checker(directory, manifest, events, "frames")
        if code != 0:
            print("FAIL a right trace with free stacks is rejected (exit %d):\n%s" % (code, output))
            problems += 1
        else:
            print("ok   a right trace with free stacks passes: " + output.strip().splitlines()[-1])
        for mode, note in (("off", None), ("native-only", "native stacks only: CPython 3.8.18")):
            manifest, events = good()
            m_no_py(manifest, events)
            events[0]["config"]["python"] = mode if mode == "off" else "auto"
            events[0]["config"]["python_frames"] = note
            code, output = run_checker(directory, manifest, events, mode)
            if code != 0:
                print("FAIL a right %s trace is rejected (exit %d):\n%s" % (mode, code, output))
                problems += 1
            else:
                print("ok   a right %s trace passes" % mode)
        for name, mode, mutate, expected in CASES:
            manifest, events = good()
            if mutate is not None:
                mutate(manifest, events)
            if mode == "off":
                events[0]["config"]["python"] = "off"
            if mode == "native-only":
                events[0]["config"]["python_frames"] = "native stacks only: too old"
            code, output = run_checker(directory, manifest, events, mode)
            if code != 1 or expected not in output:
                print("FAIL %s: exit %d, expected 1 and a line holding %r; output:\n%s"
                      % (name, code, expected, output))
                problems += 1
            else:
                line = next(l for l in output.splitlines() if expected in l)
                print("ok   %s -> %s" % (name, line[:160]))
    print("%d of %d checker cases wrong" % (problems, len(CASES) + 3) if problems
          else "all %d checker cases behave" % (len(CASES) + 4))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
