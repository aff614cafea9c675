#!/usr/bin/env python3
"""Checks the Python frames of cumemtrace traces against the manifests that
the programs of tests/apps/python wrote (tests/integration/python/README.md).

    check_python_stacks.py [--mode frames|native-only|off]
                           --trace T.jsonl... --manifest M.json...

Traces and manifests are paired by pid. For every manifest entry (one
allocation, failing request or bad free, with the Python stack that
traceback.extract_stack() gave on the line of the ctypes call), the trace
must hold exactly one matching event (alloc/oom by api and size, error by api
and pointer) from the same thread, whose stack:
  frames   the Python frames, innermost first, equal the manifest's frame for
           frame (fn = co_qualname, or co_name before 3.11; file; line), none
           missing or repeated; native frames (the ctypes/libffi path) stand
           innermost of the first Python frame; where Python was entered from
           native code (a qsort comparator), a libc frame stands between the
           callback's Python frames and its caller's, or outermost of them
           on a thread that pthread_create started; header config
           "python":"auto" and "python_frames" starting "CPython X.Y.Z" (the
           manifest's interpreter)
  native-only  no Python frame anywhere; "python":"auto" and "python_frames"
           starting "native stacks only:" (an interpreter the preload does not
           walk)
  off      no Python frame anywhere; "python":"off"
In every mode: every Python frame has py:true, a non-empty fn and file and an
integer line; every event's stack id was defined earlier; no alloc/oom/error
event is missing from the manifests; free events carry stack 0 (unless the
header says free stacks are kept); the trace ends with the end line the
process wrote itself (not one `cumemtrace run` completed, reason killed),
unless the manifest says to expect none, and dropped nothing.

Prints one line per mismatch (expected vs got, with the event's trace line and
stack id) and exits 1; 0 when everything matches; 2 for bad usage.
Standard library only.
"""
import argparse
import difflib
import json
import os
import re
import sys

MAX_LINES = 200          # mismatch lines printed in all
MAX_LINES_PER_EVENT = 8  # frame mismatches printed per event
FFI_MODULE = re.compile(r"(libffi|_ctypes)")
LIBC_MODULE = re.compile(r"^libc(\.so|-[0-9])")


class Report:
    def __init__(self):
        self.shown = 0
        self.failures = 0
        self.notes = []

    def fail(self, message):
        self.failures += 1
        if self.shown < MAX_LINES:
            print("FAIL " + message)
            self.shown += 1

    def note(self, message):
        self.notes.append(message)


def fmt_frame(frame):
    fn, file, line = frame
    return "%s (%s:%s)" % (fn, file, line)


def native_names(frames):
    return ", ".join("%s in %s" % (f.get("fn"), os.path.basename(str(f.get("module"))))
                     for f in frames) or "none"


def py_key(frame):
    return (frame.get("fn"), frame.get("file"), frame.get("line"))


class Trace:
    def __init__(self, path):
        self.path = path
        self.header = None
        self.config = {}
        self.stacks = {}        # id -> frames
        self.stack_lines = {}   # id -> line number
        self.events = []        # (line number, event) for alloc/oom/error
        self.frees = []         # (line number, event)
        self.end = None
        self.py_frame_stacks = 0


def validate_frame(trace, stack_id, index, frame, report):
    where = "%s: stack %s frame #%d" % (os.path.basename(trace.path), stack_id, index)
    if not isinstance(frame, dict):
        report.fail("%s: not an object: %r" % (where, frame))
        return False
    if "py" in frame:
        if frame["py"] is not True:
            report.fail('%s: "py" is %r, expected true' % (where, frame["py"]))
        problems = []
        if not isinstance(frame.get("fn"), str) or not frame.get("fn"):
            problems.append("fn %r" % (frame.get("fn"),))
        if not isinstance(frame.get("file"), str) or not frame.get("file"):
            problems.append("file %r" % (frame.get("file"),))
        line = frame.get("line")
        if not isinstance(line, int) or isinstance(line, bool):
            problems.append("line %r (not an integer)" % (line,))
        extra = [k for k in ("ip", "module", "off") if k in frame]
        if extra:
            problems.append("native fields %s" % ", ".join(extra))
        if problems:
            report.fail("%s: Python frame %s: %s" % (where, json.dumps(frame), "; ".join(problems)))
        return True
    ip = frame.get("ip")
    if not isinstance(ip, str) or not re.fullmatch(r"0x[0-9a-f]+", ip):
        report.fail("%s: native frame without a hex ip: %s" % (where, json.dumps(frame)))
    return False


def read_trace(path, report):
    trace = Trace(path)
    name = os.path.basename(path)
    try:
        source = open(path, encoding="utf-8")
    except OSError as error:
        report.fail("%s: cannot open: %s" % (path, error))
        return None
    with source:
        for number, text in enumerate(source, 1):
            try:
                event = json.loads(text)
            except ValueError as error:
                report.fail("%s:%d: not a JSON line (%s)" % (name, number, error))
                continue
            kind = event.get("ev")
            if number == 1:
                if kind != "header":
                    report.fail("%s:1: the first line is %r, not the header" % (name, kind))
                else:
                    trace.header = event
                    trace.config = event.get("config") or {}
                continue
            if kind == "stack":
                sid = event.get("id")
                frames = event.get("frames")
                if not isinstance(frames, list):
                    report.fail("%s:%d: stack %s has no frames list" % (name, number, sid))
                    frames = []
                if sid in trace.stacks:
                    report.fail("%s:%d: stack id %s defined twice" % (name, number, sid))
                has_py = False
                for index, frame in enumerate(frames):
                    has_py |= validate_frame(trace, sid, index, frame, report)
                trace.py_frame_stacks += has_py
                # CPython's perf trampolines (PYTHONPERFSUPPORT=1, 3.12+) name
                # a native frame "py::fn:file" from /tmp/perf-PID.map: beside
                # the Python frames that would show each function twice.
                twice = [f for f in frames if isinstance(f, dict) and not f.get("py")
                         and str(f.get("fn") or "").startswith("py::")
                         and str(f.get("module") or "").endswith(".map")]
                if has_py and twice:
                    report.fail("%s:%d: stack %s has Python frames and perf-map frames too (%s)"
                                % (name, number, sid, twice[0].get("fn")))
                trace.stacks[sid] = frames
                trace.stack_lines[sid] = number
            elif kind in ("alloc", "oom", "error", "free"):
                sid = event.get("stack")
                if sid not in (0, None) and sid not in trace.stacks:
                    report.fail("%s:%d: %s uses stack %s, not defined before it"
                                % (name, number, kind, sid))
                (trace.frees if kind == "free" else trace.events).append((number, event))
            elif kind == "end":
                trace.end = event
    if trace.header is None:
        return None
    return trace


def read_manifest(path, report):
    try:
        with open(path, encoding="utf-8") as source:
            manifest = json.load(source)
    except (OSError, ValueError) as error:
        report.fail("%s: cannot read the manifest: %s" % (path, error))
        return None
    if manifest.get("format") != "pystack-manifest":
        report.fail("%s: not a pystack manifest" % path)
        return None
    manifest["path"] = path
    return manifest


def event_key(kind, api, size=None, ptr=None):
    if kind == "error":
        return (kind, api, int(ptr, 16) if isinstance(ptr, str) else ptr)
    return (kind, api, size)


def describe(entry, line=None, sid=None, thread=True):
    what = "size=%d" % entry["size"] if "size" in entry else "ptr=%s" % entry.get("ptr")
    text = "%s %s %s case=%s" % (entry["kind"], entry["api"], what, entry.get("case"))
    if thread:
        text += " thread=%s" % entry.get("thread")
    if line is not None:
        text += " (trace line %d, stack %s)" % (line, sid)
    return text


def compare_py_frames(desc, expected, got, report, depth_note):
    """One line per difference between the expected and recorded Python
    frames (innermost first); True when equal."""
    if expected == got:
        return True
    if not got:
        report.fail("%s: no Python frames in the stack; expected %d, innermost %s%s"
                    % (desc, len(expected), fmt_frame(expected[0]), depth_note))
        return False
    lines = []
    matcher = difflib.SequenceMatcher(None, expected, got, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op == "replace":
            for k in range(max(i2 - i1, j2 - j1)):
                i, j = i1 + k, j1 + k
                if i < i2 and j < j2:
                    lines.append("Python frame #%d: expected %s, got %s"
                                 % (i, fmt_frame(expected[i]), fmt_frame(got[j])))
                elif i < i2:
                    lines.append("Python frame #%d missing: expected %s" % (i, fmt_frame(expected[i])))
                else:
                    lines.append("extra Python frame at #%d: got %s" % (j, fmt_frame(got[j])))
        elif op == "delete":
            for i in range(i1, i2):
                lines.append("Python frame #%d missing: expected %s" % (i, fmt_frame(expected[i])))
        elif op == "insert":
            for j in range(j1, j2):
                repeated = (j > 0 and got[j] == got[j - 1]) or (j + 1 < len(got) and got[j] == got[j + 1])
                lines.append("extra Python frame at #%d: got %s%s"
                             % (j, fmt_frame(got[j]), " (a repeated frame)" if repeated else ""))
    for text in lines[:MAX_LINES_PER_EVENT]:
        report.fail("%s: %s%s" % (desc, text, depth_note))
    if len(lines) > MAX_LINES_PER_EVENT:
        report.fail("%s: ... %d more frame differences (expected %d Python frames, got %d)"
                    % (desc, len(lines) - MAX_LINES_PER_EVENT, len(expected), len(got)))
    return False


def check_pair(trace, manifest, mode, report, totals):
    name = os.path.basename(trace.path)
    config = trace.config
    version = manifest.get("python", "?")

    # The header: the option and what the preload made of this interpreter.
    want_python = "off" if mode == "off" else "auto"
    if config.get("python") != want_python:
        report.fail('%s: header config "python" is %r, expected %r'
                    % (name, config.get("python"), want_python))
    frames_note = config.get("python_frames")
    if mode == "frames":
        want = "CPython %s" % version
        if not isinstance(frames_note, str) or not frames_note.startswith(want):
            report.fail('%s: header config "python_frames" is %r, expected a string starting %r'
                        % (name, frames_note, want))
    elif mode == "native-only":
        want = "native stacks only:"
        if not isinstance(frames_note, str) or not frames_note.startswith(want):
            report.fail('%s: header config "python_frames" is %r, expected a string starting %r'
                        % (name, frames_note, want))
    if mode != "frames" and trace.py_frame_stacks:
        report.fail("%s: %d stacks hold Python frames; with %s there must be none"
                    % (name, trace.py_frame_stacks,
                       "CUMEMTRACE_PYTHON=off" if mode == "off" else "CPython %s" % version))

    depth_limit = config.get("stacks")
    by_key = {}
    for number, event in trace.events:
        key = event_key(event.get("ev"), event.get("api"), event.get("size"), event.get("ptr"))
        by_key.setdefault(key, []).append((number, event))

    free_stacks = bool(config.get("free_stacks"))
    frees_by_key = {}    # (api, ptr) -> free events in trace order
    for number, event in trace.frees:
        frees_by_key.setdefault((event.get("api"), int(str(event.get("ptr")), 16)), []).append((number, event))
    frees_seen = {}      # (api, ptr) -> manifest free entries so far

    py_stacks = manifest.get("py_stacks", [])
    matched = set()
    for entry in manifest.get("entries", []):
        if entry["kind"] == "free":
            # Checked where the trace keeps free stacks: the k-th noted free
            # of a pointer is the k-th free event of it (an address is not
            # handed out again before its free, so the orders agree).
            if not free_stacks:
                continue
            fkey = (entry["api"], int(entry["ptr"], 16))
            k = frees_seen.get(fkey, 0)
            frees_seen[fkey] = k + 1
            found = frees_by_key.get(fkey, [])
            if k >= len(found):
                report.fail("%s: no free event for %s (free number %d of that pointer)"
                            % (name, describe(entry), k + 1))
                continue
            number, event = found[k]
        else:
            key = event_key(entry["kind"], entry["api"], entry.get("size"), entry.get("ptr"))
            found = by_key.get(key, [])
            if not found:
                report.fail("%s: no %s event for %s" % (name, entry["kind"], describe(entry)))
                continue
            if len(found) > 1:
                report.fail("%s: %s recorded %d times (trace lines %s)"
                            % (name, describe(entry), len(found), ", ".join(str(n) for n, _ in found)))
            number, event = found[0]
            matched.add(key)
        sid = event.get("stack")
        desc = "%s: %s" % (name, describe(entry, number, sid))
        totals["events"] += 1
        if event.get("tid") != entry["tid"]:
            report.fail("%s: tid %s, expected %s (the thread that made the call)"
                        % (desc, event.get("tid"), entry["tid"]))
        if not sid:
            report.fail("%s: no stack (stack 0)" % desc)
            continue
        frames = trace.stacks.get(sid)
        if frames is None:
            continue  # reported while reading
        depth_note = ""
        if isinstance(depth_limit, int) and len(frames) >= depth_limit:
            depth_note = " [the stack has %d frames, the depth limit]" % len(frames)
        py_positions = [i for i, f in enumerate(frames) if isinstance(f, dict) and f.get("py")]
        first_py = py_positions[0] if py_positions else len(frames)
        if not any(FFI_MODULE.search(str(f.get("module") or "")) for f in frames[:first_py]):
            report.fail("%s: no libffi/_ctypes frame innermost of the first Python frame "
                        "(the native path of the ctypes call); innermost frames: %s"
                        % (desc, ", ".join(str(f.get("fn") or f.get("module")) for f in frames[:4])))
        if mode != "frames":
            continue
        if py_positions and py_positions[0] == 0:
            report.fail("%s: the innermost frame is a Python frame (%s); the ctypes call's native "
                        "frames must stand innermost of it" % (desc, fmt_frame(py_key(frames[0]))))
        expected = [py_key(f) for f in py_stacks[entry["py_stack"]]]
        got = [py_key(frames[i]) for i in py_positions]
        totals["frames"] += len(expected)
        if not compare_py_frames(desc, expected, got, report, depth_note):
            continue
        for boundary in entry.get("native_between", []):
            totals["boundaries"] += 1
            inner = py_positions[boundary - 1]
            if boundary == len(py_positions):
                # Python entered from a thread that native code started
                # (pthread_create): libc's thread start stands outermost.
                outside = frames[inner + 1:]
                if not any(LIBC_MODULE.match(os.path.basename(str(f.get("module") or ""))) for f in outside):
                    report.fail("%s: no libc frame outermost of Python frame #%d %s (the start of a "
                                "thread pthread_create made); native frames there: %s"
                                % (desc, boundary - 1, fmt_frame(expected[boundary - 1]),
                                   native_names(outside)))
                continue
            outer = py_positions[boundary]
            between = frames[inner + 1:outer]
            if not any(LIBC_MODULE.match(os.path.basename(str(f.get("module") or ""))) for f in between):
                report.fail("%s: no libc frame between Python frames #%d %s and #%d %s (the callback "
                            "and the Python that called qsort); native frames there: %s"
                            % (desc, boundary - 1, fmt_frame(expected[boundary - 1]), boundary,
                               fmt_frame(expected[boundary]), native_names(between)))

    for key, found in by_key.items():
        if key not in matched:
            for number, event in found:
                report.fail("%s:%d: %s %s event not in the manifest (size %s, ptr %s)"
                            % (name, number, event.get("ev"), event.get("api"),
                               event.get("size"), event.get("ptr")))

    if not free_stacks:
        with_stack = [(n, e) for n, e in trace.frees if e.get("stack") not in (0, None)]
        if with_stack:
            report.fail("%s: %d of %d free events carry a stack (first at line %d, stack %s); "
                        "expected stack 0 without CUMEMTRACE_FREE_STACKS=1"
                        % (name, len(with_stack), len(trace.frees), with_stack[0][0],
                           with_stack[0][1].get("stack")))

    if trace.end is None:
        if manifest.get("expect_end", True):
            report.fail("%s: no end line: the trace was cut short" % name)
    elif trace.end.get("reason") == "killed" and manifest.get("expect_end", True):
        # `cumemtrace run` completes a trace whose process died without its
        # end line; none of these programs is killed, so the process itself
        # must have written it (os._exit included).
        report.fail("%s: the end line was not written by the process (reason killed)" % name)
    elif trace.end.get("dropped", 0) != 0:
        report.fail("%s: the end line says %s events were dropped" % (name, trace.end.get("dropped")))

    reused = manifest.get("code_object_addresses_reused")
    report.note("%s: pid %s, %s %s, group %s: %d requests; python_frames %r%s"
                % (name, manifest.get("pid"), manifest.get("implementation", "CPython"), version,
                   manifest.get("group"), len(manifest.get("entries", [])), frames_note,
                   "" if reused is None else "; %d code-object addresses reused" % reused))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["frames", "native-only", "off"], default="frames")
    parser.add_argument("--trace", nargs="+", required=True, help="trace files (.jsonl)")
    parser.add_argument("--manifest", nargs="+", required=True, help="manifests written by the programs")
    args = parser.parse_args(argv)

    report = Report()
    traces = {}
    for path in args.trace:
        trace = read_trace(path, report)
        if trace is None:
            continue
        pid = trace.header.get("pid")
        if pid in traces:
            report.fail("%s and %s: two traces of pid %s" % (traces[pid].path, path, pid))
        traces[pid] = trace
    totals = {"events": 0, "frames": 0, "boundaries": 0}
    used = set()
    for path in args.manifest:
        manifest = read_manifest(path, report)
        if manifest is None:
            continue
        trace = traces.get(manifest.get("pid"))
        if trace is None:
            report.fail("%s: no trace of pid %s among %s"
                        % (os.path.basename(path), manifest.get("pid"),
                           ", ".join(os.path.basename(p) for p in args.trace)))
            continue
        used.add(manifest.get("pid"))
        check_pair(trace, manifest, args.mode, report, totals)
    for pid, trace in traces.items():
        if pid not in used:
            report.fail("%s: a trace of pid %s without a manifest" % (os.path.basename(trace.path), pid))

    for text in report.notes:
        print("  " + text)
    summary = ("%d events checked, %d Python frames compared, %d native boundaries of callbacks"
               % (totals["events"], totals["frames"], totals["boundaries"]))
    if report.failures:
        if report.failures > report.shown:
            print("... %d more mismatches not shown" % (report.failures - report.shown))
        print("FAILED (mode %s): %d mismatches; %s" % (args.mode, report.failures, summary))
        return 1
    print("OK (mode %s): %s" % (args.mode, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
