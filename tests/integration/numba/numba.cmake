# Numba as a real client (README.md here): Numba's own driver test suite on
# the simulated device bare, under cumemtrace with the caching pool and in
# passthrough (numba.cudadrv.*), and numba_memory.py's allocations checked
# against the trace (numba.memory.*). Not in the sanitizer builds (included
# from tests/integration/CMakeLists.txt with the clients.* tests; and
# scripts/sanitize.sh leaves numba.* out): Numba and CPython are not ours.
#
# Numba is Debian's python3-numba (scripts/setup.sh), installed for
# /usr/bin/python3 only; the python3 on PATH may be another (pyenv's). The
# tests get every candidate, the first that imports numba first, and try
# them again when they run, so installing Numba needs no reconfigure. With
# none they SKIP (exit 77), except under CI=true, where they fail.
find_package(Python3 COMPONENTS Interpreter REQUIRED)  # runs the scripts here
set(CUMEMTRACE_NUMBA_PYTHON "" CACHE FILEPATH
  "Interpreter with Numba for the numba.* tests (empty: /usr/bin/python3, then python3 on PATH)")
set(CUMEMTRACE_NUMBA_DIR ${CMAKE_CURRENT_LIST_DIR})

if(CUMEMTRACE_NUMBA_PYTHON)
  set(numba_candidates ${CUMEMTRACE_NUMBA_PYTHON})
else()
  find_program(numba_path_python3 NAMES python3 NO_CACHE)
  set(numba_candidates /usr/bin/python3 ${numba_path_python3} ${Python3_EXECUTABLE})
  list(REMOVE_DUPLICATES numba_candidates)
endif()
set(numba_ordered "")
set(numba_found "")
foreach(candidate IN LISTS numba_candidates)
  execute_process(COMMAND ${candidate} -c "import numba; print(numba.__version__)"
    RESULT_VARIABLE numba_rc OUTPUT_VARIABLE numba_version ERROR_QUIET
    OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 60)
  if(numba_rc EQUAL 0 AND NOT numba_found)
    set(numba_found "${candidate} (Numba ${numba_version})")
    list(PREPEND numba_ordered ${candidate})
  else()
    list(APPEND numba_ordered ${candidate})
  endif()
endforeach()
if(numba_found)
  message(STATUS "Numba for the numba.* tests: ${numba_found}")
else()
  message(STATUS "No interpreter imports numba (${numba_candidates}): the numba.* tests will skip "
    "(install python3-numba: scripts/setup.sh)")
endif()
set(numba_python_args "")
foreach(candidate IN LISTS numba_ordered)
  list(APPEND numba_python_args --python ${candidate})
endforeach()

set(numba_common_args ${numba_python_args}
  --sim-dir ${SIMCUDA_LIBRARY_DIR}
  --preload $<TARGET_FILE:cumemtrace_preload>
  --cli $<TARGET_FILE:cumemtrace>)

# numba.cudadrv.<mode>: every test of numba.cuda.tests.cudadrv passes except
# those in expected_failures.txt, which all fail (each one there that passes,
# or that is no longer a test, fails this). About 10-30 s each.
foreach(mode bare caching passthrough)
  add_test(NAME numba.cudadrv.${mode}
    COMMAND ${Python3_EXECUTABLE} ${CUMEMTRACE_NUMBA_DIR}/run_suite.py --mode ${mode}
      ${numba_common_args}
      --expected ${CUMEMTRACE_NUMBA_DIR}/expected_failures.txt
      --workdir ${CMAKE_CURRENT_BINARY_DIR}/numba/cudadrv.${mode})
  set_tests_properties(numba.cudadrv.${mode} PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 700 LABELS numba)
endforeach()

# numba.memory.<mode>: Numba's allocations (device, to_device, pinned,
# mapped, managed, some freed) in the trace exactly as Numba reports them.
foreach(mode caching passthrough)
  add_test(NAME numba.memory.${mode}
    COMMAND ${Python3_EXECUTABLE} ${CUMEMTRACE_NUMBA_DIR}/check_numba_memory.py --mode ${mode}
      ${numba_common_args}
      --workdir ${CMAKE_CURRENT_BINARY_DIR}/numba/memory.${mode})
  set_tests_properties(numba.memory.${mode} PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS numba)
endforeach()

# The reading of Numba's output and the list's rules, on made-up output
# (needs no Numba).
add_test(NAME numba.outcomes_selftest
  COMMAND ${Python3_EXECUTABLE} ${CUMEMTRACE_NUMBA_DIR}/outcomes_selftest.py)
set_tests_properties(numba.outcomes_selftest PROPERTIES TIMEOUT 60 LABELS numba)
