"""Reading Numba's test suite: the list of expected failures, `numba.runtests
-l` (the suite's tests), `numba.runtests -v` (each test's outcome), and the
verdict run_suite.py enforces. Standard library only; outcomes_selftest.py
checks it on made-up output.
"""
import re

# unittest's verbose line: "test_x (package.module.Class.test_x)", then either
# " ... STATUS" on the same line, or the first line of the test's docstring on
# the next one and " ... STATUS" after it. A subtest adds " (param=value)" or
# " [message]" after the id. Output the test itself writes (to stderr, as the
# runner does) can come between " ... " and the status, which is then on a
# line of its own.
_HEADER = re.compile(r"^(\w+) \(((?:\w+\.)+\w+)\)(.*)$")
_STATUS = re.compile(r"^(ok|FAIL|ERROR|skipped(?: .*)?|expected failure|unexpected success)$")
# The failure details after the run, one block per failure:
# "ERROR: test_x (id)", "FAIL: test_x (id) (param=1)", "ERROR: setUpClass (module.Class)".
_DETAIL = re.compile(r"^(FAIL|ERROR): (\w+) \(((?:\w+\.)+\w+)\)")
_LISTED = re.compile(r"^((?:\w+\.)+test\w*)$")

PASS = "ok"
PASSING = ("ok", "expected failure")


class Verdict(object):
    def __init__(self):
        self.summary = []
        self.problems = []


def read_expected(path):
    """{test id: reason} from expected_failures.txt: one test a line, its full
    dotted id, then its reason; blank lines and lines starting with # are
    comments. A line without a reason, or a test named twice, is an error."""
    expected = {}
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) < 2 or not parts[1].strip():
                raise ValueError("%s:%d: %s has no reason (each line: TEST_ID REASON)" % (path, number, parts[0]))
            if not _LISTED.match(parts[0]):
                raise ValueError("%s:%d: %r is not a test id (package.module.Class.test_name)"
                                 % (path, number, parts[0]))
            if parts[0] in expected:
                raise ValueError("%s:%d: %s is listed twice" % (path, number, parts[0]))
            expected[parts[0]] = parts[1].strip()
    return expected


def parse_listing(text):
    """The test ids `numba.runtests -l` printed, in its order."""
    return [line.strip() for line in text.splitlines() if _LISTED.match(line.strip())]


def _classify(status):
    if status.startswith("skipped"):
        return "skipped"
    return {"ok": "ok", "FAIL": "FAIL", "ERROR": "ERROR", "expected failure": "expected failure",
            "unexpected success": "unexpected success"}[status]


def parse_verbose(text, tests):
    """{test id: [outcomes]} from `numba.runtests -v` output. A test can have
    several (a subtest's failure, an error in tearDown after a failure); one
    that ran into a class's or module's setUp failure gets "ERROR" from the
    details. Tests of `tests` with no outcome get none (no key)."""
    outcomes = {}
    pending = None  # the test whose status has not come yet
    details = False
    for line in text.splitlines():
        if line.startswith("=" * 20):
            details = True  # the per-failure blocks: only their titles count now
            pending = None
        if details:
            m = _DETAIL.match(line)
            if m:
                kind, method, ident = m.groups()
                if method in ("setUpClass", "tearDownClass", "setUpModule", "tearDownModule"):
                    hit = [t for t in tests if t.startswith(ident + ".")]
                else:
                    hit = [ident]
                for t in hit:
                    outcomes.setdefault(t, []).append(kind)
            continue
        m = _HEADER.match(line)
        if m and m.group(2).endswith("." + m.group(1)):
            pending = m.group(2)
            rest = m.group(3)
            if " ... " in rest:
                status = rest.rsplit(" ... ", 1)[1].strip()
                if _STATUS.match(status):
                    outcomes.setdefault(pending, []).append(_classify(status))
                    pending = None
            continue
        if pending is None:
            continue
        candidate = line.rsplit(" ... ", 1)[1].strip() if " ... " in line else line.strip()
        if _STATUS.match(candidate):
            outcomes.setdefault(pending, []).append(_classify(candidate))
            pending = None
    return outcomes


def first_errors(text):
    """{test id: the last line of its first failure's traceback} from the
    details after the run, to say why a test failed."""
    why = {}
    blocks = re.split(r"^={20,}$", text, flags=re.M)
    for block in blocks[1:]:
        lines = block.strip().splitlines()
        m = _DETAIL.match(lines[0]) if lines else None
        if not m or m.group(3) in why:
            continue
        body = [l for l in lines[1:] if l.strip() and not l.startswith("-" * 20)
                and not l.startswith(("Ran ", "FAILED (", "OK"))]
        why[m.group(3)] = body[-1].strip()[:200] if body else ""
    return why


def passed(results):
    """A test passed when it has an outcome and every one is a pass."""
    return bool(results) and all(r in PASSING for r in results)


def judge(tests, outcomes, expected, mode, why=None):
    """What run_suite.py prints and the problems that fail the ctest."""
    verdict = Verdict()
    where = "bare" if mode == "bare" else "under cumemtrace (%s)" % mode
    known = set(tests)
    passing = [t for t in tests if passed(outcomes.get(t))]
    verdict.summary.append("%d tests, %d pass %s, %d listed in expected_failures.txt"
                           % (len(tests), len(passing), where, len(expected)))
    for t in sorted(expected):
        if t not in known:
            verdict.problems.append("%s is in expected_failures.txt but is no longer one of the suite's "
                                    "tests: remove it from the list" % t)
    for t in tests:
        results = outcomes.get(t)
        shown = ", ".join(results) if results else "no outcome in the output"
        if why and why.get(t):
            shown += ": " + why[t]
        if t in expected:
            if passed(results):
                if mode == "bare":
                    verdict.problems.append("%s now passes: remove it from the list (%s)" % (t, expected[t]))
                else:
                    verdict.problems.append("%s passes %s but is listed as failing bare (%s): cumemtrace "
                                            "changed its outcome, unless it now passes bare too "
                                            "(numba.cudadrv.bare says)" % (t, where, expected[t]))
        elif not passed(results):
            if mode == "bare":
                verdict.problems.append("%s does not pass bare (%s) and is not in expected_failures.txt"
                                        % (t, shown))
            else:
                verdict.problems.append("%s does not pass %s (%s): unlisted, so it passes bare "
                                        "(numba.cudadrv.bare checks that), and cumemtrace changed its outcome"
                                        % (t, where, shown))
    return verdict
