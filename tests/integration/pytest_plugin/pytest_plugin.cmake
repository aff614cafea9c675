# The pytest plugin of preload/python (README.md here): the sample suite
# run under it on the simulated device, one way per test, named
# python.pytest.<scenario> (label pytest_plugin; python.* like the other
# tests that run the machine's interpreters with the plain library, which
# scripts/sanitize.sh leaves out).
#
# pytest is Debian's python3-pytest (scripts/setup.sh), installed for
# /usr/bin/python3 only; the python3 on PATH may be another (pyenv's). The
# script takes the first candidate that imports pytest (and xdist, for the
# xdist scenario) when it runs; with none it SKIPs (exit 77), except under
# CI=true, where it fails.
find_package(Python3 COMPONENTS Interpreter REQUIRED)  # runs the script
set(CUMEMTRACE_PYTEST_PLUGIN_DIR ${CMAKE_CURRENT_LIST_DIR})
find_program(pytest_path_python3 NAMES python3 NO_CACHE)
set(pytest_candidates /usr/bin/python3 ${pytest_path_python3} ${Python3_EXECUTABLE})
list(REMOVE_DUPLICATES pytest_candidates)
set(pytest_python_args "")
foreach(candidate IN LISTS pytest_candidates)
  list(APPEND pytest_python_args --python ${candidate})
endforeach()

# reexec: `pytest --cumemtrace` starts itself again under `cumemtrace run`;
# run: `cumemtrace run -- pytest -p cumemtrace` (PYTHONPATH from the
# launcher), plus the trace's marks and `report`'s phases; session_limits:
# the --cumemtrace-max-* options; usage_errors: bad sizes and markers,
# limits with no library, no launcher, --help; direct_library:
# CUMEMTRACE_LIBRARY preloaded without a launcher; xdist: a trace per
# worker; install: `pip install` offline into a venv.
foreach(scenario reexec run session_limits usage_errors direct_library xdist install)
  add_test(NAME python.pytest.${scenario}
    COMMAND ${Python3_EXECUTABLE} ${CUMEMTRACE_PYTEST_PLUGIN_DIR}/check_pytest_plugin.py
      --scenario ${scenario}
      ${pytest_python_args}
      --cli $<TARGET_FILE:cumemtrace>
      --preload $<TARGET_FILE:cumemtrace_preload>
      --sim-dir ${SIMCUDA_LIBRARY_DIR}
      --plugin-dir ${CMAKE_BINARY_DIR}/python
      --workdir ${CMAKE_CURRENT_BINARY_DIR}/pytest_plugin/${scenario})
  set_tests_properties(python.pytest.${scenario} PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS pytest_plugin)
endforeach()
