#!/usr/bin/env python3
"""One ctest of tests/integration/python (README.md there): runs a program of
tests/apps/python under `cumemtrace run` on the simulated device with the
given interpreter, then check_python_stacks.py on what it left.

    run_python_case.py --name python.3_11_7.basic --interpreter PATH --group GROUP
        --mode frames|native-only|off --cli CUMEMTRACE --preload LIBCUMEMTRACE
        --sim-dir SIM --workdir DIR [--seconds S] [--env VAR=VALUE...]

Exits 77 (ctest's SKIP_RETURN_CODE) with a SKIP line when the interpreter is
not on this machine. Standard library only.
"""
import argparse
import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(os.path.dirname(os.path.dirname(HERE)), "apps", "python", "py_alloc_app.py")
CHECKER = os.path.join(HERE, "check_python_stacks.py")
SKIP = 77
PROGRAM_TIMEOUT_S = 90


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--interpreter", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--mode", default="frames", choices=["frames", "native-only", "off"])
    parser.add_argument("--cli", required=True, help="the cumemtrace executable")
    parser.add_argument("--preload", required=True, help="libcumemtrace.so")
    parser.add_argument("--sim-dir", required=True, help="the sim's libcudart.so.13 / libcuda.so.1")
    parser.add_argument("--workdir", required=True, help="this test's own folder for traces and manifests")
    parser.add_argument("--seconds", default="3")
    parser.add_argument("--env", action="append", default=[], help="VAR=VALUE for the program")
    args = parser.parse_args(argv)
    for path in ("cli", "preload", "sim_dir", "workdir"):
        setattr(args, path, os.path.abspath(getattr(args, path)))

    if not (os.path.isfile(args.interpreter) and os.access(args.interpreter, os.X_OK)):
        print("SKIP %s: interpreter %s is not on this machine" % (args.name, args.interpreter))
        return SKIP

    # This test's own folder, emptied of what an earlier run left (traces are
    # created exclusively, and a stale one would be checked too).
    os.makedirs(args.workdir, mode=0o700, exist_ok=True)
    os.chmod(args.workdir, 0o700)
    for stale in glob.glob(os.path.join(args.workdir, "*")):
        if os.path.isfile(stale) and (stale.endswith(".jsonl") or stale.endswith(".json")
                                      or stale.endswith(".tmp") or stale.endswith(".log")):
            os.unlink(stale)

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUMEMTRACE_", "SIMCUDA_", "PYTHON", "LD_PRELOAD"))}
    env.update({
        "LD_LIBRARY_PATH": args.sim_dir,
        "SIMCUDA_DEVICE_MEMORY": "4GiB",
        "SIMCUDA_DEVICE_COUNT": "1",
        "CUMEMTRACE_LIBRARY": args.preload,
        # Deep enough for the 32-deep recursion on 3.9/3.10, where each
        # Python call costs several native frames.
        "CUMEMTRACE_STACKS": "256",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONFAULTHANDLER": "1",
    })
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value

    command = [args.cli, "run", "--output", os.path.join(args.workdir, "trace.%p.jsonl"), "--",
               args.interpreter, APP, args.group, "--out", args.workdir, "--seconds", args.seconds]
    shown_env = " ".join("%s=%s" % (k, env[k]) for k in sorted(env)
                         if k.startswith(("CUMEMTRACE_", "SIMCUDA_")) or k == "LD_LIBRARY_PATH")
    print("$ %s %s" % (shown_env, " ".join(command)))
    started = time.monotonic()
    try:
        run = subprocess.run(command, env=env, cwd=args.workdir, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=PROGRAM_TIMEOUT_S)
    except subprocess.TimeoutExpired as expired:
        sys.stdout.write((expired.stdout or b"").decode(errors="replace"))
        print("FAIL %s: the program ran longer than %d s (killed)" % (args.name, PROGRAM_TIMEOUT_S))
        return 1
    output = run.stdout.decode(errors="replace")
    sys.stdout.write(output)
    with open(os.path.join(args.workdir, "program.log"), "w") as log:
        log.write(output)
    print("(program: exit %d after %.1f s)" % (run.returncode, time.monotonic() - started))
    if run.returncode != 0:
        print("FAIL %s: the program exited with %d under the preload" % (args.name, run.returncode))
        return 1

    traces = sorted(glob.glob(os.path.join(args.workdir, "trace.*.jsonl")))
    manifests = sorted(glob.glob(os.path.join(args.workdir, "manifest.*.json")))
    if not traces or not manifests:
        print("FAIL %s: the run left %d traces and %d manifests in %s"
              % (args.name, len(traces), len(manifests), args.workdir))
        return 1
    check = [sys.executable, CHECKER, "--mode", args.mode, "--trace"] + traces + ["--manifest"] + manifests
    print("$ " + " ".join(check))
    sys.stdout.flush()
    return subprocess.call(check)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
