"""The pytest plugin (../README.md): each test's peak device memory, what it
leaked and how much it grew, from libcumemtrace.so's query API in this
process; limits per test (markers) and for the session (options)."""
import os
from collections import namedtuple

import pytest

from . import launch, query, sites
from .sizes import format_size, parse_size

PEAK_MARKER = "limit_device_memory"
LEAK_MARKER = "limit_device_leaks"
# Each test's figures travel on its teardown report (pytest-xdist carries
# user_properties from the workers; --junitxml writes them).
PROPERTIES = ("cumemtrace_peak_bytes", "cumemtrace_leaked_bytes", "cumemtrace_growth_bytes")
KEEP = 64  # allocations asked for, for a message

# bytes; where it came from ("limit_device_memory", "--cumemtrace-max-peak")
Limit = namedtuple("Limit", "bytes source")
Figures = namedtuple("Figures", "peak leaked growth")


def pytest_addoption(parser):
    group = parser.getgroup("cumemtrace", "device memory per test (cumemtrace)")
    group.addoption(
        "--cumemtrace", action="store_true", default=False,
        help="Measure each test's device memory with libcumemtrace.so. When the library is not loaded, pytest "
        "starts again under it, through " + launch.HOW_FOUND + ". Under `cumemtrace run -- pytest -p cumemtrace` "
        "the loaded library is used, flag or not.")
    group.addoption(
        "--cumemtrace-top", type=int, default=10, metavar="N",
        help="How many tests the summary lists, largest peak first (default 10; 0: all).")
    group.addoption(
        "--cumemtrace-max-peak", metavar="SIZE",
        help="Fail each test whose peak device memory (the most it held at once beyond what was held when it "
        "started) exceeds SIZE, e.g. 2GiB; @pytest.mark.%s(SIZE) sets a test's own." % PEAK_MARKER)
    group.addoption(
        "--cumemtrace-max-leaked-bytes", metavar="SIZE",
        help="Fail each test that leaves more than SIZE of the device memory it allocated held after its "
        "teardown, e.g. 0B; @pytest.mark.%s(SIZE) sets a test's own." % LEAK_MARKER)


def _option_limit(options, name, flag):
    text = getattr(options, name, None)
    if text is None:
        return None
    size = parse_size(text)
    if size is None:
        raise pytest.UsageError("%s=%s: not a size (e.g. 2GiB, 512MiB, 0B)" % (flag, text))
    return Limit(size, flag)


def _session_limits(options):
    return (_option_limit(options, "cumemtrace_max_peak", "--cumemtrace-max-peak"),
            _option_limit(options, "cumemtrace_max_leaked_bytes", "--cumemtrace-max-leaked-bytes"))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # The earliest moment the options are known: before conftest files run
    # and before output is captured (an exec'd pytest keeps our descriptors).
    options = early_config.known_args_namespace
    _session_limits(options)
    if getattr(options, "cumemtrace", False) and query.connect() is None:
        raise pytest.UsageError("--cumemtrace: " + launch.reexec_under_preload())
    yield


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "%s(size): fail the test when its peak device memory exceeds size, e.g. '2 GiB' "
        "(cumemtrace)" % PEAK_MARKER)
    config.addinivalue_line(
        "markers", "%s(size): fail the test when more than size of the device memory it allocated is still "
        "held after its teardown, e.g. '0 B' (cumemtrace)" % LEAK_MARKER)
    peak, leaked = _session_limits(config.option)
    api = query.connect()
    if api is None:
        # A limit that would silently not be checked reads as a pass in CI.
        for limit in (peak, leaked):
            if limit is not None:
                raise pytest.UsageError("%s: libcumemtrace.so is not loaded; add --cumemtrace or run under "
                                        "`cumemtrace run -- pytest -p cumemtrace`" % limit.source)
        return
    # pytest-xdist's workers each write a trace: a name without the pid
    # would let the first take it and leave the others untraced.
    output = os.environ.get("CUMEMTRACE_OUTPUT", "")
    if getattr(config.option, "numprocesses", None) and output and "%p" not in output:
        raise pytest.UsageError("pytest-xdist with the trace name %s: each worker writes its own trace, so the name "
                                "needs %%p (the pid), e.g. --output run.%%p.jsonl" % output)
    config.pluginmanager.register(DeviceMemory(config, api, peak, leaked), "cumemtrace-device-memory")


def marker_limit(item, name):
    """The limit a test's marker sets, or None; UsageError for a bad one."""
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    values = list(marker.args) + list(marker.kwargs.values())
    value = values[0] if len(values) == 1 else None
    size = value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else parse_size(value)
    if size is None:
        raise pytest.UsageError("%s: @pytest.mark.%s%s: give one size, e.g. '2 GiB' or '0 B'"
                                % (item.nodeid, name, _call_text(marker)))
    return Limit(size, name)


def _call_text(marker):
    parts = [repr(a) for a in marker.args] + ["%s=%r" % kv for kv in marker.kwargs.items()]
    return "(%s)" % ", ".join(parts)


def pytest_collection_modifyitems(session, config, items):
    # Bad limits stop the session before any test runs, measured or not.
    # A pytest-xdist worker cannot stop it (its usage error would crash the
    # worker, an INTERNALERROR): there the test fails at its setup with the
    # same line.
    worker = hasattr(config, "workerinput")
    for item in items:
        for name in (PEAK_MARKER, LEAK_MARKER):
            try:
                marker_limit(item, name)
            except pytest.UsageError as e:
                if not worker:
                    raise
                item.user_properties.append((_BAD_LIMIT, str(e)))


_BAD_LIMIT = "cumemtrace_bad_limit"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    for name, value in item.user_properties:
        if name == _BAD_LIMIT:
            pytest.fail("usage error: " + value, pytrace=False)


class _TestState:
    def __init__(self, start_live):
        self.start_live = start_live   # held before setup (growth is measured from here)
        self.checkpoint = None         # when the call began; None if it did not run
        self.call_start_live = 0
        self.peak = 0
        self.peak_limit = None
        self.watched = None            # what held the memory when the peak limit was crossed


class _Crash:
    """What pytest's short summary and --junitxml read of a failure."""

    def __init__(self, path, lineno, message):
        self.path, self.lineno, self.message = path, lineno, message


class LimitFailure:
    """A test's report when it went over a limit: the headline names the call
    site that held the memory; the lines list the holders."""

    def __init__(self, item, headline, lines):
        path, lineno, _ = item.location
        self.reprcrash = _Crash(path, (lineno or 0) + 1, headline)
        self.lines = [headline] + lines

    def toterminal(self, tw):
        tw.line(self.lines[0], red=True, bold=True)
        for line in self.lines[1:]:
            tw.line(line, red=True)

    def __str__(self):
        return "\n".join(self.lines)


_STATE = pytest.StashKey[_TestState]() if hasattr(pytest, "StashKey") else None


def _set_state(item, state):
    if _STATE is not None:
        item.stash[_STATE] = state
    else:
        item._cumemtrace_state = state


def _get_state(item):
    if _STATE is not None:
        return item.stash.get(_STATE, None)
    return getattr(item, "_cumemtrace_state", None)


class DeviceMemory:
    """Registered in a process running under the library."""

    def __init__(self, config, api, peak_limit, leak_limit):
        self.api = api
        self.peak_limit = peak_limit
        self.leak_limit = leak_limit
        self.top = config.getoption("cumemtrace_top")
        self.root = str(getattr(config, "rootpath", None) or config.rootdir)
        self.figures = {}  # nodeid -> Figures, from the teardown reports (this process's, or the workers')

    # ---- the test's process ------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        _set_state(item, _TestState(self.api.usage().live_bytes))
        # A range per test in the trace: `cumemtrace report` gives each its phase.
        self.api.range_push(item.nodeid)
        try:
            yield
        finally:
            self.api.range_pop()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        state = _get_state(item)
        state.peak_limit = marker_limit(item, PEAK_MARKER) or self.peak_limit
        self.api.reset_peak()
        state.call_start_live = self.api.usage().live_bytes
        state.checkpoint = self.api.checkpoint()
        if state.peak_limit is not None:
            self.api.watch(state.checkpoint, state.call_start_live + state.peak_limit.bytes)
        try:
            yield
        finally:
            state.peak = max(0, self.api.usage().peak_bytes - state.call_start_live)
            if state.peak_limit is not None:
                if state.peak > state.peak_limit.bytes:
                    state.watched = self.api.watched(KEEP)
                self.api.unwatch()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        state = _get_state(item)
        if state is None or state.checkpoint is None:
            return  # the test itself did not run (setup failed or skipped)
        if call.when == "call":
            self._judge_peak(item, report, state)
        elif call.when == "teardown":
            self._judge_leaks(item, report, state)

    def _judge_peak(self, item, report, state):
        limit = state.peak_limit
        if limit is None or state.peak <= limit.bytes:
            return
        held, total = state.watched or ([], 0)
        site, lines = sites.describe_holders(self.api, held, total, self.root, _test_file(item))
        headline = "%s: peak device memory %s > %s" % (limit.source, format_size(state.peak), format_size(limit.bytes))
        if site:
            headline += ", held at %s" % site
            lines.insert(0, "When the test went over %s, the allocations it had made held %s:"
                         % (format_size(limit.bytes), format_size(sum(a.size for a in held))))
        _fail(report, item, headline, lines)

    def _judge_leaks(self, item, report, state):
        kept, total = self.api.live_since(state.checkpoint, KEEP)
        everything = kept if total <= len(kept) else self.api.live_since(state.checkpoint, total)[0]
        leaked = sum(a.size for a in everything)
        figures = Figures(state.peak, leaked, self.api.usage().live_bytes - state.start_live)
        report.user_properties.extend(zip(PROPERTIES, figures))
        limit = marker_limit(item, LEAK_MARKER) or self.leak_limit
        if limit is None or leaked <= limit.bytes:
            return
        site, lines = sites.describe_holders(self.api, kept, total, self.root, _test_file(item))
        headline = "%s: leaked %s > %s (%d allocation%s made in the test still held after its teardown)" % (
            limit.source, format_size(leaked), format_size(limit.bytes), total, "" if total == 1 else "s")
        if site:
            headline += ", held at %s" % site
        _fail(report, item, headline, lines)

    # ---- where the session's results are gathered (the xdist controller) --

    def pytest_runtest_logreport(self, report):
        if report.when != "teardown":
            return
        values = {}
        for prop in report.user_properties:  # (name, value) pairs; other plugins' too
            if len(prop) == 2 and prop[0] in PROPERTIES:
                values[prop[0]] = int(prop[1])
        if len(values) == len(PROPERTIES):
            self.figures[report.nodeid] = Figures(*(values[name] for name in PROPERTIES))

    def pytest_terminal_summary(self, terminalreporter):
        if not self.figures:
            return
        rows = sorted(self.figures.items(), key=lambda kv: (-kv[1].peak, -kv[1].leaked, kv[0]))
        shown = rows if self.top <= 0 else rows[:self.top]
        tr = terminalreporter
        tr.write_sep("=", "device memory per test (cumemtrace)")
        tr.write_line("%12s %12s %12s  %s" % ("peak", "leaked", "growth", "test"))
        for nodeid, f in shown:
            tr.write_line("%12s %12s %12s  %s" % (format_size(f.peak), format_size(f.leaked), format_size(f.growth),
                                                  nodeid))
        if len(rows) > len(shown):
            tr.write_line("(%d more; --cumemtrace-top=0 lists every test)" % (len(rows) - len(shown)))


def _test_file(item):
    return str(getattr(item, "path", None) or item.fspath)


def _fail(report, item, headline, lines):
    if report.outcome == "passed" and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = LimitFailure(item, headline, lines)
    else:
        # Already failed (or skipped, or xfail): the finding is added, not
        # put in place of what happened.
        report.sections.append(("cumemtrace", "\n".join([headline] + lines)))
