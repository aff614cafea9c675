#!/usr/bin/env python3
"""suite_outcomes.py on made-up `numba.runtests` output: each way unittest
writes an outcome is read right, and each rule of the list fails with its own
message. Needs no Numba. Exit 0 when all hold."""
import os
import sys
import tempfile

# The modules beside this one, without leaving __pycache__ in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite_outcomes as so  # noqa: E402

P = "numba.cuda.tests.cudadrv.test_m."
LISTING = "\n".join(P + t for t in [
    "A.test_ok", "A.test_doc", "A.test_noisy", "A.test_fail", "A.test_error",
    "A.test_skip", "A.test_xfail", "A.test_xpass", "A.test_sub", "A.test_teardown",
    "A.test_mixed", "B.test_in_broken_class", "B.test_other_in_broken_class"]) + "\n13 tests found. 13 selected\n"

# As Python 3.11's unittest writes it (a subtest's failure on a line of its
# own, a class whose setUpClass failed named once).
VERBOSE = """\
test_ok (numba.cuda.tests.cudadrv.test_m.A.test_ok) ... ok
test_doc (numba.cuda.tests.cudadrv.test_m.A.test_doc)
The first line of a docstring ... ok
test_noisy (numba.cuda.tests.cudadrv.test_m.A.test_noisy) ... Exception ignored in: <finalize object>
Traceback (most recent call last):
  File "driver.py", line 1, in deref
numba.cuda.cudadrv.driver.CudaAPIError: [1] ok
ok
test_fail (numba.cuda.tests.cudadrv.test_m.A.test_fail) ... FAIL
test_error (numba.cuda.tests.cudadrv.test_m.A.test_error) ... ERROR
test_skip (numba.cuda.tests.cudadrv.test_m.A.test_skip) ... skipped 'need more than 1 gpus'
test_xfail (numba.cuda.tests.cudadrv.test_m.A.test_xfail) ... expected failure
test_xpass (numba.cuda.tests.cudadrv.test_m.A.test_xpass) ... unexpected success
test_sub (numba.cuda.tests.cudadrv.test_m.A.test_sub) ... 
  test_sub (numba.cuda.tests.cudadrv.test_m.A.test_sub) (dtype=<class 'int'>) ... FAIL
test_teardown (numba.cuda.tests.cudadrv.test_m.A.test_teardown) ... ERROR
test_teardown (numba.cuda.tests.cudadrv.test_m.A.test_teardown) ... ERROR
test_mixed (numba.cuda.tests.cudadrv.test_m.A.test_mixed) ... ok
setUpClass (numba.cuda.tests.cudadrv.test_m.B) ... ERROR

======================================================================
ERROR: setUpClass (numba.cuda.tests.cudadrv.test_m.B)
----------------------------------------------------------------------
Traceback (most recent call last):
  test_ok (numba.cuda.tests.cudadrv.test_m.A.test_ok) ... ok
======================================================================
ERROR: test_mixed (numba.cuda.tests.cudadrv.test_m.A.test_mixed)
----------------------------------------------------------------------
======================================================================
FAIL: test_sub (numba.cuda.tests.cudadrv.test_m.A.test_sub) (dtype=<class 'int'>)
----------------------------------------------------------------------
Ran 11 tests in 0.1s

FAILED (failures=2, errors=3, skipped=1)
"""

failures = []


def expect(what, got, want):
    if got != want:
        failures.append("%s: got %r, want %r" % (what, got, want))


def expect_problem(what, verdict, fragment):
    if not any(fragment in p for p in verdict.problems):
        failures.append("%s: no problem saying %r in %r" % (what, fragment, verdict.problems))


tests = so.parse_listing(LISTING)
expect("listing", len(tests), 13)
out = so.parse_verbose(VERBOSE, tests)
expect("plain ok", out.get(P + "A.test_ok"), ["ok"])
expect("docstring", out.get(P + "A.test_doc"), ["ok"])
expect("status after the test's own output", out.get(P + "A.test_noisy"), ["ok"])
expect("fail", out.get(P + "A.test_fail"), ["FAIL"])
expect("error", out.get(P + "A.test_error"), ["ERROR"])
expect("skip", out.get(P + "A.test_skip"), ["skipped"])
expect("expected failure", out.get(P + "A.test_xfail"), ["expected failure"])
expect("unexpected success", out.get(P + "A.test_xpass"), ["unexpected success"])
expect("subtest", out.get(P + "A.test_sub"), ["FAIL", "FAIL"])
expect("error in the test and in tearDown", out.get(P + "A.test_teardown"), ["ERROR", "ERROR"])
expect("ok, then an error in the details", out.get(P + "A.test_mixed"), ["ok", "ERROR"])
expect("setUpClass", out.get(P + "B.test_in_broken_class"), ["ERROR"])
expect("setUpClass, other test", out.get(P + "B.test_other_in_broken_class"), ["ERROR"])
passing = sorted(t for t in tests if so.passed(out.get(t)))
expect("passing", passing, [P + "A.test_doc", P + "A.test_noisy", P + "A.test_ok", P + "A.test_xfail"])

failing = [t for t in tests if t not in passing]
listed = {t: "a reason" for t in failing}
expect("the right list", so.judge(tests, out, listed, "bare").problems, [])
expect("the right list, traced", so.judge(tests, out, listed, "caching").problems, [])

less = dict(listed)
del less[P + "A.test_skip"]
expect_problem("an unlisted test that fails", so.judge(tests, out, less, "bare"),
               "test_m.A.test_skip does not pass bare (skipped)")
expect_problem("an unlisted test that fails traced", so.judge(tests, out, less, "passthrough"),
               "test_m.A.test_skip does not pass under cumemtrace (passthrough)")
more = dict(listed, **{P + "A.test_ok": "a reason"})
expect_problem("a listed test that passes", so.judge(tests, out, more, "bare"),
               "test_m.A.test_ok now passes: remove it from the list")
expect_problem("a listed test that passes traced", so.judge(tests, out, more, "caching"),
               "test_m.A.test_ok passes under cumemtrace (caching) but is listed")
gone = dict(listed, **{P + "A.test_gone": "a reason"})
expect_problem("a listed name that is no test", so.judge(tests, out, gone, "bare"),
               "test_m.A.test_gone is in expected_failures.txt but is no longer one of the suite's tests")
missing = so.parse_verbose(VERBOSE.replace("test_xfail (numba.cuda.tests.cudadrv.test_m.A.test_xfail) ... expected failure\n", ""), tests)
expect_problem("a test with no outcome", so.judge(tests, missing, listed, "bare"),
               "test_m.A.test_xfail does not pass bare (no outcome in the output)")

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "list.txt")
    for text, fragment in [("%sA.test_fail\n" % P, "has no reason"),
                           ("%sA.test_fail why\n%sA.test_fail why\n" % (P, P), "is listed twice"),
                           ("test_fail why\n", "is not a test id")]:
        with open(path, "w") as f:
            f.write(text)
        try:
            so.read_expected(path)
            failures.append("read_expected took %r" % text)
        except ValueError as error:
            if fragment not in str(error):
                failures.append("read_expected(%r): %s" % (text, error))
    with open(path, "w") as f:
        f.write("# a comment\n\n%sA.test_fail   checks a kernel's result  \n" % P)
    expect("read_expected", so.read_expected(path), {P + "A.test_fail": "checks a kernel's result"})

for failure in failures:
    print("FAIL " + failure)
print("%s numba.outcomes_selftest" % ("FAIL" if failures else "PASS"))
sys.exit(1 if failures else 0)
