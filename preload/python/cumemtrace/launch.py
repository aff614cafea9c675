"""`pytest --cumemtrace` in a process without libcumemtrace.so: pytest runs
again, the same interpreter with the same arguments, under the launcher
(`cumemtrace run -- PYTHON ARGS...`), so trace names, options and the
launcher's closing line are what `cumemtrace run -- pytest` gives.

The launcher is looked for beside this plugin (a build tree's bin/, or an
installed cumemtrace's PREFIX/bin), then on PATH; it finds the library
itself (CUMEMTRACE_LIBRARY, else beside it). Without a launcher,
CUMEMTRACE_LIBRARY alone is preloaded directly (LD_PRELOAD)."""
import os
import shutil
import sys

# Set in the pytest started again, so it never starts another.
REEXEC_ENV = "CUMEMTRACE_PYTEST_REEXEC"

HOW_FOUND = ("the cumemtrace launcher beside this plugin or on PATH, which finds libcumemtrace.so itself "
             "(CUMEMTRACE_LIBRARY, else beside it); without a launcher, CUMEMTRACE_LIBRARY is preloaded directly")


def _package_folder():
    # The folder the package was imported from (not resolved: the build
    # tree's python/ links to the sources, and bin/ is beside the link).
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launcher_candidates():
    folder = _package_folder()
    return [os.path.normpath(os.path.join(folder, "..", "bin", "cumemtrace")),            # BUILD/python
            os.path.normpath(os.path.join(folder, "..", "..", "..", "bin", "cumemtrace"))]  # PREFIX/share/cumemtrace/python


def find_launcher():
    for candidate in launcher_candidates():
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("cumemtrace")


def same_command():
    """This process's command line: the interpreter, its options and what it ran."""
    if getattr(sys, "orig_argv", None):  # 3.10+: ["python3", "-X", "dev", "-m", "pytest", ...]
        return [sys.executable] + list(sys.orig_argv[1:])
    return [sys.executable, "-m", "pytest"] + list(sys.argv[1:])


def reexec_under_preload():
    """Replaces this process; returns only with a one-line reason why it could not."""
    if os.environ.get(REEXEC_ENV):
        return ("pytest was started again under the preload, but libcumemtrace.so's query API is not there "
                "(a library older than this plugin?)")
    env = dict(os.environ)
    env[REEXEC_ENV] = "1"
    command = same_command()
    launcher = find_launcher()
    library = os.environ.get("CUMEMTRACE_LIBRARY")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if launcher:
            os.execve(launcher, [launcher, "run", "--"] + command, env)
        if library:
            if not os.path.isfile(library):
                return "CUMEMTRACE_LIBRARY=%s is not a file" % library
            env["LD_PRELOAD"] = " ".join(p for p in (os.path.abspath(library), env.get("LD_PRELOAD", "")) if p)
            os.execve(sys.executable, command, env)
    except OSError as e:
        return "cannot start %s: %s" % (launcher or sys.executable, e.strerror)
    return ("cannot find the cumemtrace launcher (looked in %s and on PATH) and CUMEMTRACE_LIBRARY is not set; "
            "put cumemtrace on PATH, set CUMEMTRACE_LIBRARY, or run `cumemtrace run -- pytest -p cumemtrace`"
            % " and ".join(launcher_candidates()))
