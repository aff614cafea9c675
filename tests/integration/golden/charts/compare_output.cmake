# Runs `cumemtrace ARGS... -o FILE` in TRACES_DIR (so outputs name the trace
# by its relative path) and compares FILE with EXPECTED byte for byte. On a
# difference the actual output stays in ACTUAL_DIR.
#   cmake -DCUMEMTRACE=... -DARGS="timeline|x.jsonl|--format|csv" -DTRACES_DIR=...
#         -DEXPECTED=... -DACTUAL_DIR=... -P compare_output.cmake
foreach(var CUMEMTRACE ARGS TRACES_DIR EXPECTED ACTUAL_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compare_output.cmake: ${var} is not set")
  endif()
endforeach()

string(REPLACE "|" ";" args "${ARGS}")
file(MAKE_DIRECTORY ${ACTUAL_DIR})
get_filename_component(expected_name ${EXPECTED} NAME)
set(actual_file ${ACTUAL_DIR}/${expected_name})
file(REMOVE ${actual_file})
execute_process(
  COMMAND ${CUMEMTRACE} ${args} -o ${actual_file}
  WORKING_DIRECTORY ${TRACES_DIR}
  OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cumemtrace ${args} exited with ${status}:\n${stderr}")
endif()
if(NOT stdout STREQUAL "")
  message(FATAL_ERROR "cumemtrace ${args} -o FILE printed to stdout:\n${stdout}")
endif()
file(READ ${actual_file} actual)
file(READ ${EXPECTED} expected)
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "cumemtrace ${args} differs from ${EXPECTED}\n"
                      "see: diff -u ${EXPECTED} ${actual_file}")
endif()
