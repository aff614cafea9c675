"""A limit that is not a size: the session stops with pytest's usage error
before any test runs (check_pytest_plugin.py, scenario usage_errors)."""
import pytest


@pytest.mark.limit_device_memory("a lot")
def test_never_runs():
    raise AssertionError("a session with a bad limit must not run tests")
