#!/usr/bin/env python3
"""One ctest of tests/integration/numba (README.md there): Numba's own driver
test suite, `python3 -m numba.runtests -v numba.cuda.tests.cudadrv`, on the
simulated device, bare or under cumemtrace (the caching pool or passthrough).

    run_suite.py --mode bare|caching|passthrough --python P [--python P...]
        --sim-dir SIM --preload LIBCUMEMTRACE --cli CUMEMTRACE
        --expected expected_failures.txt --workdir DIR

Numba lists the suite's tests (`-l`), runs them with `-v`, and this script
reads each test's outcome from that output. The rules, each failing the test
with its own message:
  - every test not in expected_failures.txt passes;
  - every test in it does not ("now passes: remove it from the list"), and
    every name in it is one of the suite's tests;
  - under cumemtrace, the trace of the suite's process is complete, holds
    allocations, says the pool mode asked for, and `cumemtrace report` reads
    every trace the run left.
Since the bare run passes exactly the unlisted tests, the traced runs passing
exactly those too is "the same set as bare".

The first --python that can `import numba.cuda` runs the suite; with none,
exit 77 (ctest's SKIP_RETURN_CODE) and a SKIP line, except under CI=true,
where scripts/setup.sh installs python3-numba and a missing Numba fails.
Standard library only; suite_outcomes.py reads the output.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

# The modules beside this one, without leaving __pycache__ in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite_outcomes  # noqa: E402

SKIP = 77
SUITE = "numba.cuda.tests.cudadrv"
SUITE_TIMEOUT_S = 600
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda13_shim")


def find_numba_python(candidates):
    """The first interpreter that can import numba.cuda, with what the others said."""
    tried = []
    for candidate in candidates:
        try:
            probe = subprocess.run([candidate, "-c", "import numba, numba.cuda; print(numba.__version__)"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   universal_newlines=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as error:
            tried.append("%s: %s" % (candidate, error))
            continue
        if probe.returncode == 0:
            return candidate, probe.stdout.strip().splitlines()[-1], tried
        last = (probe.stdout.strip().splitlines() or ["exit %d" % probe.returncode])[-1]
        tried.append("%s: %s" % (candidate, last))
    return None, None, tried


def suite_env(args, mode, trace_dir):
    # The caller's CUMEMTRACE_*/NUMBA_*/SIMCUDA_* settings are not this run's.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUMEMTRACE_", "NUMBA_", "SIMCUDA_", "LD_PRELOAD", "PYTHON"))}
    env.update({
        "LD_LIBRARY_PATH": args.sim_dir,
        # Numba opens the driver with ctypes; this names the sim's file.
        "NUMBA_CUDA_DRIVER": os.path.join(args.sim_dir, "libcuda.so.1"),
        # Two devices: the suite's multi-GPU tests (context switches between
        # devices, CUDA_VISIBLE_DEVICES) run instead of skipping. 2 GiB each:
        # test_managed_alloc_driver_undersubscribe fills half the device's
        # memory from the host (8 GiB at the sim's default 16 GiB: a minute).
        "SIMCUDA_DEVICE_COUNT": str(args.devices),
        "SIMCUDA_DEVICE_MEMORY": "2GiB",
        # Numba 0.56 binds two CUDA 13 functions with the wrong arguments:
        # cuda13_shim/sitecustomize.py says which and why (PYTHONPATH, so the
        # suite's own child processes get it too).
        "PYTHONPATH": SHIM_DIR,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONFAULTHANDLER": "1",
    })
    if mode != "bare":
        env.update({
            "LD_PRELOAD": args.preload,
            "CUMEMTRACE_OUTPUT": os.path.join(trace_dir, "trace.%p.jsonl"),
            "CUMEMTRACE_POOL": mode,
        })
    return env


def run_numba(python, argv, env, cwd, log_path):
    """Runs `python -m numba.runtests ARGV`; returns (exit code, output, wall seconds, pid)."""
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([python, "-m", "numba.runtests"] + argv, env=env, cwd=cwd,
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=SUITE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    with open(log_path, errors="replace") as log:
        return code, log.read(), time.monotonic() - started, proc.pid


def check_traces(args, mode, trace_dir, suite_pid):
    """Problems with the traces a traced run left (empty: none)."""
    problems = []
    traces = sorted(glob.glob(os.path.join(trace_dir, "*.jsonl")))
    main = os.path.join(trace_dir, "trace.%d.jsonl" % suite_pid)
    if main not in traces:
        return ["no trace of the suite's process (%s); the run left %s" % (main, traces or "none")]
    for trace in traces:
        report = subprocess.run([args.cli, "report", trace], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
        if report.returncode != 0:
            problems.append("`cumemtrace report %s` exited %d:\n%s"
                            % (trace, report.returncode, report.stdout[-3000:]))
    header, end, allocs, frees = None, None, 0, 0
    with open(main, errors="replace") as f:
        for number, line in enumerate(f, 1):
            try:
                event = json.loads(line)
            except ValueError:
                problems.append("%s:%d is not JSON: %r" % (main, number, line[:200]))
                break
            kind = event.get("ev")
            if number == 1:
                header = event if kind == "header" else None
            if kind == "alloc":
                allocs += 1
            elif kind == "free":
                frees += 1
            elif kind == "end":
                end = event
    if header is None:
        problems.append("%s does not start with a header" % main)
    elif header.get("pool") != mode:
        problems.append("%s says pool %r where CUMEMTRACE_POOL=%s" % (main, header.get("pool"), mode))
    if end is None:
        problems.append("%s has no end event: the trace was cut short" % main)
    elif end.get("dropped", 0) != 0:
        problems.append("%s dropped %s events" % (main, end.get("dropped")))
    if allocs == 0:
        problems.append("%s holds no allocation, though Numba's suite allocates device memory" % main)
    print("trace %s: %d allocs, %d frees, end %s; %d trace(s) in all, each read by `cumemtrace report`"
          % (os.path.basename(main), allocs, frees, json.dumps(end), len(traces)))
    return problems


def numba_python_or_exit(name, candidates):
    """(python, version, None), or (None, None, exit code) after saying why:
    with no interpreter that imports numba a test skips, but fails under
    CI=true, where scripts/setup.sh must have installed python3-numba."""
    python, version, tried = find_numba_python(candidates)
    if python is not None:
        return python, version, None
    why = "no interpreter here can import numba.cuda (%s)" % "; ".join(tried)
    if os.environ.get("CI") == "true":
        print("FAIL %s: %s (CI=true: scripts/setup.sh installs python3-numba)" % (name, why))
        return None, None, 1
    print("SKIP %s: %s; install python3-numba (scripts/setup.sh)" % (name, why))
    return None, None, SKIP


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True, choices=["bare", "caching", "passthrough"])
    parser.add_argument("--python", action="append", required=True,
                        help="an interpreter that may have numba (the first that does runs the suite)")
    parser.add_argument("--sim-dir", required=True)
    parser.add_argument("--preload", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--expected", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--devices", type=int, default=2)
    args = parser.parse_args(argv)
    for path in ("sim_dir", "preload", "cli", "expected", "workdir"):
        setattr(args, path, os.path.abspath(getattr(args, path)))
    name = "numba.cudadrv.%s" % args.mode

    python, version, missing = numba_python_or_exit(name, args.python)
    if python is None:
        return missing
    print("%s: Numba %s with %s" % (name, version, python))

    try:
        expected = suite_outcomes.read_expected(args.expected)
    except ValueError as error:
        print("FAIL %s: %s" % (name, error))
        return 1

    os.makedirs(args.workdir, mode=0o700, exist_ok=True)
    os.chmod(args.workdir, 0o700)
    trace_dir = os.path.join(args.workdir, "traces")
    os.makedirs(trace_dir, mode=0o700, exist_ok=True)
    os.chmod(trace_dir, 0o700)
    for stale in glob.glob(os.path.join(trace_dir, "*")):
        os.unlink(stale)

    # The suite's tests, as Numba lists them (bare: listing runs no test).
    env = suite_env(args, "bare", trace_dir)
    code, listing, _, _ = run_numba(python, ["-l", SUITE], env, args.workdir,
                                    os.path.join(args.workdir, "list.log"))
    tests = suite_outcomes.parse_listing(listing)
    if code != 0 or not tests:
        print("FAIL %s: `%s -m numba.runtests -l %s` exited %s listing %d tests:\n%s"
              % (name, python, SUITE, code, len(tests), listing[-3000:]))
        return 1

    env = suite_env(args, args.mode, trace_dir)
    shown = " ".join("%s=%s" % (k, env[k]) for k in sorted(env)
                     if k.startswith(("CUMEMTRACE_", "SIMCUDA_", "NUMBA_", "LD_", "PYTHONPATH")))
    print("$ %s %s -m numba.runtests -v %s" % (shown, python, SUITE))
    log_path = os.path.join(args.workdir, "suite.log")
    code, output, seconds, pid = run_numba(python, ["-v", SUITE], env, args.workdir, log_path)
    if code is None:
        print("FAIL %s: the suite ran past %d s (its output: %s)" % (name, SUITE_TIMEOUT_S, log_path))
        return 1
    outcomes = suite_outcomes.parse_verbose(output, tests)
    verdict = suite_outcomes.judge(tests, outcomes, expected, args.mode, suite_outcomes.first_errors(output))
    for line in verdict.summary:
        print(line)
    print("%s: wall %.1f s, numba.runtests exit %d (output: %s)" % (name, seconds, code, log_path))

    problems = list(verdict.problems)
    # numba.runtests fails when any test fails; with every test accounted for
    # that is expected, but a crash (a signal) is a failure of its own.
    if code < 0:
        problems.append("numba.runtests died of signal %d" % -code)
    if args.mode != "bare":
        problems += check_traces(args, args.mode, trace_dir, pid)
    if problems:
        print("FAIL %s:" % name)
        for problem in problems:
            print("  - " + problem)
        return 1
    print("PASS %s" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
