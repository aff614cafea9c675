#!/usr/bin/env python3
"""One ctest of tests/integration/pytest_plugin (README.md there): runs the
sample suite (sample/) under the pytest plugin of preload/python on the
simulated device in one way (a scenario), and checks what pytest, the
plugin, --junitxml, the trace and `cumemtrace report` say.

    check_pytest_plugin.py --scenario NAME --python PY [--python PY...] --cli CUMEMTRACE
        --preload LIBCUMEMTRACE --sim-dir SIM --plugin-dir BUILD/python --workdir DIR

The first --python that imports pytest (and xdist, for that scenario) runs
the suite; none: SKIP (exit 77), or FAIL under CI=true. One FAIL line per
mismatch, exit 1. Standard library only.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SKIP = 77
TIMEOUT_S = 240
KiB, MiB = 1 << 10, 1 << 20
MODULE = "sample/test_sample.py::"

# Per test of sample/test_sample.py: peak, leaked and growth as the plugin
# must measure them, the absolute allocated peak of the test's range in the
# trace (`report` phases), and its outcome by default.
EXPECTED = {
    "test_uses_module_buffer": (512 * KiB, 0, 1 * MiB, 1 * MiB + 512 * KiB, "passed"),
    "test_frees_everything": (4 * MiB, 0, 0, 5 * MiB, "passed"),
    "test_leaks_two_mib": (2 * MiB, 2 * MiB, 2 * MiB, 3 * MiB, "passed"),
    "test_freed_at_teardown": (5 * MiB, 0, 0, 8 * MiB, "passed"),
    "test_under_peak_limit": (3 * MiB, 0, 0, 6 * MiB, "passed"),
    "test_over_peak_limit": (6 * MiB, 0, 0, 9 * MiB, "failed"),
    "test_leak_over_limit": (1 * MiB, 1 * MiB, 1 * MiB, 4 * MiB, "error"),
    "test_no_leak_under_limit": (1 * MiB, 0, -1 * MiB, 5 * MiB, "passed"),
}
# The summary's words for those sizes (as `cumemtrace report` writes sizes).
SIZE_TEXT = {0: "0 B", 512 * KiB: "512.00 KiB", 1 * MiB: "1.00 MiB", -1 * MiB: "-1.00 MiB", 2 * MiB: "2.00 MiB",
             3 * MiB: "3.00 MiB", 4 * MiB: "4.00 MiB", 5 * MiB: "5.00 MiB", 6 * MiB: "6.00 MiB"}

failures = []


def fail(message):
    failures.append(message)
    print("FAIL %s" % message)


def expect(condition, message):
    if not condition:
        fail(message)
    return condition


def marked_lines():
    """name -> line number of each "# line:NAME" in the sample suite."""
    lines = {}
    for name in ("test_sample.py", "devmem.py"):
        with open(os.path.join(HERE, "sample", name)) as f:
            for number, text in enumerate(f, start=1):
                match = re.search(r"# line:(\w+)", text)
                if match:
                    lines[match.group(1)] = number
    return lines


class Context:
    def __init__(self, args, python):
        self.args = args
        self.python = python
        self.work = args.workdir
        self.sample = os.path.join(self.work, "sample")

    def base_env(self, **extra):
        """The environment of a run: none of ours inherited, the sim on the
        loader's path."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CUMEMTRACE_", "SIMCUDA_", "PYTHON", "PYTEST_")) and k != "LD_PRELOAD"}
        env.update({
            "LD_LIBRARY_PATH": self.args.sim_dir,
            "SIMCUDA_DEVICE_MEMORY": "4GiB",
            "SIMCUDA_DEVICE_COUNT": "1",
            "CUMEMTRACE_OUTPUT": os.path.join(self.work, "trace.%p.jsonl"),
            "PYTHONDONTWRITEBYTECODE": "1",
            # The sample's own file list: no plugin installed on this machine joins in.
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        })
        env.update(extra)
        return env

    def pytest_args(self, *extra, load_plugin=True):
        plugin = ["-p", "cumemtrace"] if load_plugin else []
        return ["-p", "no:cacheprovider"] + plugin + ["--cumemtrace-top=0",
                "--junitxml=%s" % os.path.join(self.work, "junit.xml")] + list(extra) + ["sample"]

    def run(self, command, env):
        shown = " ".join("%s=%s" % (k, env[k]) for k in sorted(env)
                         if k.startswith(("CUMEMTRACE_", "PYTHONPATH", "LD_", "PYTEST_")))
        print("$ (cd %s) %s %s" % (self.work, shown, " ".join(command)))
        sys.stdout.flush()
        try:
            done = subprocess.run(command, env=env, cwd=self.work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            fail("the run took longer than %d s" % TIMEOUT_S)
            return 124, "", ""
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        print(out)
        print(err)
        print("(exit %d)" % done.returncode)
        return done.returncode, out, err

    def traces(self):
        return sorted(glob.glob(os.path.join(self.work, "trace.*.jsonl")))

    def plugin_copy(self):
        """The plugin's package alone, away from any launcher."""
        folder = os.path.join(self.work, "plugin_copy")
        shutil.copytree(os.path.join(REPO, "preload", "python", "cumemtrace"), os.path.join(folder, "cumemtrace"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        return folder

    def path_without_launcher(self):
        return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                               if p and not os.path.exists(os.path.join(p, "cumemtrace")))


# ---- what a run must show ------------------------------------------------------

def summary_rows(out):
    """nodeid -> (peak, leaked, growth) as the summary writes them."""
    rows = {}
    lines = out.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if "device memory per test (cumemtrace)" in l)
    except StopIteration:
        return rows
    for line in lines[start + 2:]:
        match = re.match(r"^\s*(-?[\d.]+ \w+)\s+(-?[\d.]+ \w+)\s+(-?[\d.]+ \w+)\s+(\S+)$", line)
        if not match:
            break
        rows[match.group(4)] = match.groups()[:3]
    return rows


def junit_cases(path):
    """name -> (outcome, message, {property: value})."""
    cases = {}
    if not expect(os.path.isfile(path), "no JUnit file at %s" % path):
        return cases
    for case in ET.parse(path).iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag == "failure" else child.tag
                message = child.get("message") or ""
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        cases[case.get("name")] = (outcome, message, properties)
    return cases


def check_figures(out, junit, outcomes=None, check_growth=True):
    """The summary and the JUnit properties hold every test's figures, and
    each test ended as it should."""
    rows = summary_rows(out)
    expect(len(rows) == len(EXPECTED), "the summary lists %d tests, not %d" % (len(rows), len(EXPECTED)))
    for name, (peak, leaked, growth, _, outcome) in EXPECTED.items():
        row = rows.get(MODULE + name)
        want = (SIZE_TEXT[peak], SIZE_TEXT[leaked], SIZE_TEXT[growth])
        if expect(row is not None, "%s: not in the summary" % name):
            got = row if check_growth else row[:2]
            expect(got == (want if check_growth else want[:2]), "%s: the summary says %s, not %s" % (name, row, want))
        case = junit.get(name)
        if not expect(case is not None, "%s: not in the JUnit file" % name):
            continue
        properties = case[2]
        exact = {"cumemtrace_peak_bytes": peak, "cumemtrace_leaked_bytes": leaked}
        if check_growth:
            exact["cumemtrace_growth_bytes"] = growth
        for prop, value in exact.items():
            expect(properties.get(prop) == str(value), "%s: JUnit %s=%s, not %d" % (name, prop, properties.get(prop),
                                                                                    value))
        want_outcome = (outcomes or {}).get(name, outcome)
        expect(case[0] == want_outcome, "%s: %s in the JUnit file, not %s" % (name, case[0], want_outcome))


def check_messages(out, junit):
    """Each failure names the call site that held the memory, Python
    file:line first (the innermost, the helper's cudaMalloc line) and the
    test's own line that led there, in the terminal and in the JUnit
    file's message."""
    lines = marked_lines()
    for name, source, line_name in (("test_over_peak_limit", "limit_device_memory", "over_peak"),
                                    ("test_leak_over_limit", "limit_device_leaks", "leak_over_limit")):
        where = "held at sample/devmem.py:%d in alloc, called from sample/test_sample.py:%d in %s" % (
            lines["alloc"], lines[line_name], name)
        message = junit.get(name, ("", "", {}))[1]
        expect(source in message and where in message,
               "%s: the JUnit message does not name %s and '%s': %r" % (name, source, where, message))
        expect(re.search(r"%s: .*%s" % (source, re.escape(where)), out) is not None,
               "%s: pytest's output has no '%s: ... %s' line" % (name, source, where))


def check_trace_marks(ctx, traces, tests=None):
    """Every test is one push/pop range in the traces, named by its node id,
    on one thread, and each range holds its test's peak."""
    tests = set(tests or EXPECTED)
    seen = {}
    for path in traces:
        with open(path) as f:
            for line in f:
                if '"ev":"mark"' not in line:
                    continue
                event = json.loads(line)
                seen.setdefault(event["name"], []).append((event["kind"], os.path.basename(path)))
    for name in tests:
        marks = seen.get(MODULE + name, [])
        kinds = [k for k, _ in marks]
        expect(kinds == ["push", "pop"] and marks[0][1] == marks[1][1],
               "%s: its marks in the traces are %s, not one push and one pop in one trace" % (name, marks))
    extra = set(seen) - {MODULE + n for n in tests}
    expect(not extra, "marks for no test of the suite: %s" % sorted(extra))


def check_report_phases(ctx, trace):
    """`cumemtrace report` groups the trace by test: one phase per test, with
    the allocated peak during its range."""
    done = subprocess.run([ctx.args.cli, "report", "--format", "json", trace], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    if not expect(done.returncode == 0, "report exited %d: %s" % (done.returncode, done.stderr.decode())):
        return
    report = json.loads(done.stdout)
    phases = {p["name"]: p for p in report["phases"]}
    for name, (_, _, _, phase_peak, _) in EXPECTED.items():
        phase = phases.get(MODULE + name)
        if expect(phase is not None, "%s: no phase in the report" % name):
            expect(phase["peak_allocated"] == phase_peak and phase["end_t"] is not None,
                   "%s: phase peak %s (end %s), not %d" % (name, phase["peak_allocated"], phase["end_t"], phase_peak))
    expect(report.get("peak_allocated_phase") == MODULE + "test_over_peak_limit",
           "the report puts the peak in phase %r" % report.get("peak_allocated_phase"))
    text = subprocess.run([ctx.args.cli, "report", trace], stdout=subprocess.PIPE).stdout.decode()
    expect("in phase '%stest_over_peak_limit'" % MODULE in text, "the text report does not name the peak's test")


def check_one_complete_trace(ctx, err, launcher=True):
    traces = ctx.traces()
    expect(len(traces) == 1, "%d traces, not 1: %s" % (len(traces), traces))
    if launcher:
        expect(re.search(r"trace written to .*trace\.\d+\.jsonl: complete", err) is not None,
               "no 'trace written to ...: complete' line from the launcher")
    return traces


def check_default_run(ctx, command, env, launcher=True):
    """The suite run with no session limit: exit 1 (a test over its limit),
    every figure, the failures' lines, one complete trace with a range per
    test. Returns pytest's output and the traces."""
    rc, out, err = ctx.run(command, env)
    expect(rc == 1, "exit %d, not 1 (tests over their limits)" % rc)
    junit = junit_cases(os.path.join(ctx.work, "junit.xml"))
    check_figures(out, junit)
    check_messages(out, junit)
    traces = check_one_complete_trace(ctx, err, launcher)
    check_trace_marks(ctx, traces)
    return out, traces


# ---- scenarios -----------------------------------------------------------------

def scenario_reexec(ctx):
    """`pytest --cumemtrace` outside the preload starts again under `cumemtrace run`."""
    env = ctx.base_env(PYTHONPATH=ctx.args.plugin_dir)
    check_default_run(ctx, [ctx.python, "-m", "pytest", "--cumemtrace"] + ctx.pytest_args(), env)


def scenario_run(ctx):
    """`cumemtrace run -- pytest -p cumemtrace`: the launcher puts the plugin
    on PYTHONPATH and the plugin uses the loaded library."""
    command = [ctx.args.cli, "run", "--", ctx.python, "-m", "pytest"] + ctx.pytest_args()
    _, traces = check_default_run(ctx, command, ctx.base_env())
    if traces:
        check_report_phases(ctx, traces[0])


def scenario_session_limits(ctx):
    """--cumemtrace-max-peak and --cumemtrace-max-leaked-bytes hold every
    test without a marker of its own to them."""
    env = ctx.base_env(PYTHONPATH=ctx.args.plugin_dir)
    args = ctx.pytest_args("--cumemtrace-max-peak=4.5MiB", "--cumemtrace-max-leaked-bytes=1 MiB")
    rc, out, err = ctx.run([ctx.python, "-m", "pytest", "--cumemtrace"] + args, env)
    expect(rc == 1, "exit %d, not 1" % rc)
    junit = junit_cases(os.path.join(ctx.work, "junit.xml"))
    # 5 MiB > 4.5 MiB; 2 MiB leaked > 1 MiB; the markers' tests keep theirs.
    check_figures(out, junit, outcomes={"test_freed_at_teardown": "failed", "test_leaks_two_mib": "error"})
    lines = marked_lines()
    message = junit.get("test_freed_at_teardown", ("", "", {}))[1]
    expect(message.startswith("--cumemtrace-max-peak: peak device memory 5.00 MiB > 4.50 MiB"),
           "test_freed_at_teardown: %r does not name the session's peak limit" % message)
    message = junit.get("test_leaks_two_mib", ("", "", {}))[1]
    expect("--cumemtrace-max-leaked-bytes: leaked 2.00 MiB > 1.00 MiB" in message
           and "sample/test_sample.py:%d in test_leaks_two_mib" % lines["leak_unlimited"] in message,
           "test_leaks_two_mib: %r does not name the session's leak limit and its line" % message)
    check_messages(out, junit)


def scenario_usage_errors(ctx):
    """A size that is not one stops pytest with its usage error (exit 4) and
    one line, before any test runs; so does a limit nobody would check, and
    --cumemtrace with no way to the library."""
    env = ctx.base_env(PYTHONPATH=ctx.args.plugin_dir)
    bad = [(["--cumemtrace", "--cumemtrace-max-peak=lots"], "--cumemtrace-max-peak=lots: not a size"),
           (["--cumemtrace", "--cumemtrace-max-leaked-bytes="], "--cumemtrace-max-leaked-bytes=: not a size"),
           (["--cumemtrace-max-peak=1GiB"], "--cumemtrace-max-peak: libcumemtrace.so is not loaded")]
    for extra, words in bad:
        rc, out, err = ctx.run([ctx.python, "-m", "pytest"] + ctx.pytest_args(*extra), env)
        expect(rc == 4, "%s: exit %d, not 4" % (extra, rc))
        expect(("ERROR: " + words) in err, "%s: no 'ERROR: %s' line on stderr" % (extra, words))
        expect("passed" not in out and "failed" not in out, "%s: tests ran" % (extra,))
    expect(not ctx.traces(), "a bad size still made a trace: %s" % ctx.traces())

    # A bad marker, under the launcher.
    shutil.copytree(os.path.join(HERE, "bad_marker"), os.path.join(ctx.work, "bad_marker"))
    rc, out, err = ctx.run([ctx.args.cli, "run", "--", ctx.python, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                            "cumemtrace", "bad_marker"], ctx.base_env())
    expect(rc == 4, "bad marker: exit %d, not 4" % rc)
    expect("@pytest.mark.limit_device_memory('a lot'): give one size" in err,
           "bad marker: the error does not quote the marker")

    # No launcher beside the plugin or on PATH, no CUMEMTRACE_LIBRARY.
    env = ctx.base_env(PYTHONPATH=ctx.plugin_copy(), PATH=ctx.path_without_launcher())
    rc, out, err = ctx.run([ctx.python, "-m", "pytest", "--cumemtrace"] + ctx.pytest_args(), env)
    expect(rc == 4, "no launcher: exit %d, not 4" % rc)
    errors = [line for line in err.splitlines() if line.startswith("ERROR:")]
    expect(len(errors) == 1 and "--cumemtrace: cannot find the cumemtrace launcher" in errors[0],
           "no launcher: not one ERROR line saying so: %s" % errors)

    # --help says how the library is found.
    rc, out, err = ctx.run([ctx.python, "-m", "pytest", "-p", "cumemtrace", "--help"],
                           ctx.base_env(PYTHONPATH=ctx.args.plugin_dir))
    help_text = " ".join(out.split())
    expect(rc == 0 and "--cumemtrace " in out and "CUMEMTRACE_LIBRARY" in help_text and "on PATH" in help_text
           and "--cumemtrace-max-peak=SIZE" in out and "--cumemtrace-max-leaked-bytes=SIZE" in out,
           "--help does not describe --cumemtrace, how the library is found, and the limits")


def scenario_direct_library(ctx):
    """No launcher, CUMEMTRACE_LIBRARY set: pytest starts again with the
    library in LD_PRELOAD itself."""
    env = ctx.base_env(PYTHONPATH=ctx.plugin_copy(), PATH=ctx.path_without_launcher(),
                       CUMEMTRACE_LIBRARY=ctx.args.preload)
    check_default_run(ctx, [ctx.python, "-m", "pytest", "--cumemtrace"] + ctx.pytest_args(), env, launcher=False)


def scenario_xdist(ctx):
    """pytest-xdist: each worker is traced, one file per worker; the
    controller's summary has every test's figures from the workers."""
    env = ctx.base_env(PYTHONPATH=ctx.args.plugin_dir)
    rc, out, err = ctx.run([ctx.python, "-m", "pytest", "--cumemtrace", "-p", "xdist", "-n", "2"] + ctx.pytest_args(),
                           env)
    expect(rc == 1, "exit %d, not 1" % rc)
    junit = junit_cases(os.path.join(ctx.work, "junit.xml"))
    # Which worker sets the module fixture up depends on the distribution.
    check_figures(out, junit, check_growth=False)
    check_messages(out, junit)
    traces = ctx.traces()
    expect(len(traces) == 2, "%d traces, not one per worker: %s" % (len(traces), traces))
    pids = set()
    for path in traces:
        with open(path) as f:
            pids.add(json.loads(f.readline())["pid"])
    expect(len(pids) == len(traces), "the traces are not of distinct processes: %s" % traces)
    check_trace_marks(ctx, traces)
    expect(re.search(r"trace written to 2 files: 2 complete", err) is not None,
           "the launcher does not report two complete traces")

    # A trace name without the pid would leave all workers but one untraced.
    fixed = ctx.base_env(PYTHONPATH=ctx.args.plugin_dir, CUMEMTRACE_OUTPUT=os.path.join(ctx.work, "fixed.jsonl"))
    rc, out, err = ctx.run([ctx.python, "-m", "pytest", "--cumemtrace", "-p", "xdist", "-n", "2"] + ctx.pytest_args(),
                           fixed)
    expect(rc == 4 and "needs %p (the pid)" in err, "xdist with a trace name without %%p: exit %d, not 4 saying so" % rc)

    # A worker cannot stop the session for a bad marker: its test errors at
    # setup with the usage error's line instead (never an INTERNALERROR).
    shutil.copytree(os.path.join(HERE, "bad_marker"), os.path.join(ctx.work, "bad_marker"))
    rc, out, err = ctx.run([ctx.python, "-m", "pytest", "--cumemtrace", "-p", "xdist", "-n", "2", "-p",
                            "no:cacheprovider", "-p", "cumemtrace", "bad_marker"], env)
    expect(rc == 1 and "INTERNALERROR" not in out + err, "bad marker under xdist: exit %d, not 1 without an INTERNALERROR"
           % rc)
    expect("usage error: bad_marker/test_bad_marker.py::test_never_runs: @pytest.mark.limit_device_memory('a lot')"
           in out and "1 error" in out, "bad marker under xdist: its test does not error at setup with the marker")


def scenario_install(ctx):
    """`pip install ./preload/python` offline into a venv that sees Debian's
    pytest; the entry point loads the plugin, and --cumemtrace finds the
    launcher on PATH."""
    venv = os.path.join(ctx.work, "venv")
    source = os.path.join(ctx.work, "source")
    # A copy: pip builds in the source folder (build/, *.egg-info).
    shutil.copytree(os.path.join(REPO, "preload", "python"), source, ignore=shutil.ignore_patterns("__pycache__"))
    env = ctx.base_env()
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD")  # the entry point is what is tested
    rc, _, _ = ctx.run([ctx.python, "-m", "venv", "--system-site-packages", venv], env)
    if not expect(rc == 0, "python -m venv failed"):
        return
    rc, _, _ = ctx.run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation", source],
                       env)
    if not expect(rc == 0, "pip install failed"):
        return
    env["PATH"] = os.path.dirname(ctx.args.cli) + os.pathsep + ctx.path_without_launcher()
    out, _ = check_default_run(ctx, [os.path.join(venv, "bin", "python"), "-m", "pytest", "--cumemtrace"]
                               + ctx.pytest_args(load_plugin=False), env)
    expect(re.search(r"plugins: .*cumemtrace-pytest", out) is not None, "pytest does not list the installed plugin")


SCENARIOS = {name[len("scenario_"):]: f for name, f in globals().items() if name.startswith("scenario_")}


def interpreter(candidates, modules):
    for python in candidates:
        check = "import " + ", ".join(modules)
        if shutil.which(python) and subprocess.run([python, "-c", check], stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL).returncode == 0:
            return python
    return None


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    parser.add_argument("--python", action="append", required=True, help="candidate interpreters, in order")
    parser.add_argument("--cli", required=True)
    parser.add_argument("--preload", required=True)
    parser.add_argument("--sim-dir", required=True)
    parser.add_argument("--plugin-dir", required=True, help="the build tree's python/ (the plugin's folder)")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)
    for path in ("cli", "preload", "sim_dir", "plugin_dir", "workdir"):
        setattr(args, path, os.path.abspath(getattr(args, path)))

    modules = ["pytest", "xdist"] if args.scenario == "xdist" else ["pytest"]
    python = interpreter(args.python, modules)
    if python is None:
        words = "no interpreter among %s imports %s (scripts/setup.sh installs python3-pytest and python3-pytest-xdist)" \
            % (args.python, " and ".join(modules))
        if os.environ.get("CI") == "true":
            print("FAIL pytest_plugin.%s: %s" % (args.scenario, words))
            return 1
        print("SKIP pytest_plugin.%s: %s" % (args.scenario, words))
        return SKIP

    # This scenario's own folder, emptied, with a copy of the sample suite
    # (pytest and pip write beside what they run).
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir, mode=0o700)
    shutil.copytree(os.path.join(HERE, "sample"), os.path.join(args.workdir, "sample"))
    SCENARIOS[args.scenario](Context(args, python))
    if failures:
        print("FAIL pytest_plugin.%s: %d mismatches (above)" % (args.scenario, len(failures)))
        return 1
    print("PASS pytest_plugin.%s" % args.scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
