# Python frames in the preload's stacks (README.md here): the programs of
# tests/apps/python run under `cumemtrace run` on the simulated device with
# each CPython below, and check_python_stacks.py compares every allocation's
# Python frames with what the program recorded. One test per (interpreter,
# group), named python.<interpreter>.<group>; an interpreter missing on the
# machine makes its tests SKIP (exit 77, a "SKIP ..." line), never pass.
find_package(Python3 COMPONENTS Interpreter REQUIRED)  # runs the runner and the checker
set(CUMEMTRACE_PYTHON_STACKS_DIR ${CMAKE_CURRENT_LIST_DIR})

# tag=interpreter: the versions whose frames the preload walks.
set(CUMEMTRACE_PYTHON_STACK_INTERPRETERS
  3_9_18=/root/.pyenv/versions/3.9.18/bin/python3
  3_10_13=/root/.pyenv/versions/3.10.13/bin/python3
  3_11_7=/root/.pyenv/versions/3.11.7/bin/python3
  3_12_1=/root/.pyenv/versions/3.12.1/bin/python3
  3_13_0=/root/.pyenv/versions/3.13.0/bin/python3
  debian_3_11=/usr/bin/python3.11
  CACHE STRING "tag=path of each CPython whose frames the python.* tests check")
# An interpreter the preload does not walk: native stacks and a note why.
set(CUMEMTRACE_PYTHON_STACK_OLD_INTERPRETER 3_8_18=/root/.pyenv/versions/3.8.18/bin/python3
  CACHE STRING "tag=path of a CPython too old for Python frames")

# group=mode;program group;extra runner arguments (| for ;)
set(python_stack_groups
  "basic=frames|basic"
  "callbacks=frames|callbacks"
  "codereuse=frames|codereuse"
  "threads=frames|threads"
  "fork=frames|fork|--env|CUMEMTRACE_FLUSH_MS=50"
  "soak=frames|soak|--seconds|3"
  "off=off|basic|--env|CUMEMTRACE_PYTHON=off"
  "freestacks=frames|threads|--env|CUMEMTRACE_FREE_STACKS=1"
  # The default depth: Python frames whose native frames lie past it still
  # all come (after the last native frame).
  "depth32=frames|basic|--env|CUMEMTRACE_STACKS=32"
  # Perf trampolines on (3.12+; older versions ignore it): no function twice.
  "perfmap=frames|basic|--env|PYTHONPERFSUPPORT=1")

function(cumemtrace_python_stack_test tag interpreter group mode program_group)
  add_test(NAME python.${tag}.${group}
    COMMAND ${Python3_EXECUTABLE} ${CUMEMTRACE_PYTHON_STACKS_DIR}/run_python_case.py
      --name python.${tag}.${group}
      --interpreter ${interpreter}
      --group ${program_group}
      --mode ${mode}
      --cli $<TARGET_FILE:cumemtrace>
      --preload $<TARGET_FILE:cumemtrace_preload>
      --sim-dir ${SIMCUDA_LIBRARY_DIR}
      --workdir ${CMAKE_CURRENT_BINARY_DIR}/python_stacks/${tag}.${group}
      ${ARGN})
  set_tests_properties(python.${tag}.${group} PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 120 LABELS python_stacks)
endfunction()

foreach(pair IN LISTS CUMEMTRACE_PYTHON_STACK_INTERPRETERS)
  string(REGEX MATCH "^([^=]+)=(.+)$" _ "${pair}")
  set(tag ${CMAKE_MATCH_1})
  set(interpreter ${CMAKE_MATCH_2})
  foreach(spec IN LISTS python_stack_groups)
    string(REGEX MATCH "^([^=]+)=(.+)$" _ "${spec}")
    set(group ${CMAKE_MATCH_1})
    string(REPLACE "|" ";" args "${CMAKE_MATCH_2}")
    cumemtrace_python_stack_test(${tag} ${interpreter} ${group} ${args})
  endforeach()
endforeach()

string(REGEX MATCH "^([^=]+)=(.+)$" _ "${CUMEMTRACE_PYTHON_STACK_OLD_INTERPRETER}")
if(CMAKE_MATCH_1)
  cumemtrace_python_stack_test(${CMAKE_MATCH_1} ${CMAKE_MATCH_2} basic native-only basic)
  cumemtrace_python_stack_test(${CMAKE_MATCH_1} ${CMAKE_MATCH_2} callbacks native-only callbacks)
endif()

# The checker itself: a made-up trace with the frames right passes, and each
# way of getting them wrong fails with its own message.
add_test(NAME python.checker_selftest
  COMMAND ${Python3_EXECUTABLE} ${CUMEMTRACE_PYTHON_STACKS_DIR}/checker_selftest.py)
set_tests_properties(python.checker_selftest PROPERTIES TIMEOUT 60 LABELS python_stacks)
