"""cumemtrace's pytest plugin: each test's peak device memory, leaks and
growth, measured in-process by libcumemtrace.so (preload/python/README.md).

    pytest --cumemtrace                               # starts pytest again under the library
    cumemtrace run -- pytest -p cumemtrace            # uses the library loaded by the launcher

Loaded by `-p cumemtrace` (the launcher puts this folder on PYTHONPATH) or,
once installed with pip, by its pytest11 entry point. `cumemtrace.query`
is the query API itself, for use outside pytest.
"""
from .plugin import (  # noqa: F401  (pytest finds the hooks on this module)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_load_initial_conftests,
    pytest_runtest_setup,
)
