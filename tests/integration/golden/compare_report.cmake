# Runs `cumemtrace report TRACE... --format FORMAT` in TRACES_DIR (so the
# report names the traces by their relative paths) and compares the output
# with EXPECTED byte for byte. On a difference the actual output is kept in
# ACTUAL_DIR. TRACES is one trace or several separated by commas.
#   cmake -DCUMEMTRACE=... -DTRACES=a.jsonl[,b.jsonl] -DFORMAT=text|json -DTRACES_DIR=...
#         -DEXPECTED=... -DACTUAL_DIR=... [-DUSE_OUTPUT_FILE=ON] -P compare_report.cmake
# Another subcommand with the same shape: -DSUBCOMMAND=replay, with more
# arguments in -DEXTRA_ARGS=a;b (a CMake list).
foreach(var CUMEMTRACE TRACES FORMAT TRACES_DIR EXPECTED ACTUAL_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compare_report.cmake: ${var} is not set")
  endif()
endforeach()

if(NOT DEFINED SUBCOMMAND)
  set(SUBCOMMAND report)
endif()
string(REPLACE "," ";" trace_list "${TRACES}")
file(MAKE_DIRECTORY ${ACTUAL_DIR})
get_filename_component(expected_name ${EXPECTED} NAME)
set(actual_file ${ACTUAL_DIR}/${expected_name})
file(REMOVE ${actual_file})

if(USE_OUTPUT_FILE)
  execute_process(
    COMMAND ${CUMEMTRACE} ${SUBCOMMAND} ${trace_list} --format ${FORMAT} ${EXTRA_ARGS} -o ${actual_file}
    WORKING_DIRECTORY ${TRACES_DIR}
    OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr RESULT_VARIABLE status)
  if(NOT stdout STREQUAL "")
    message(FATAL_ERROR "report -o printed to stdout:\n${stdout}")
  endif()
  if(EXISTS ${actual_file})
    file(READ ${actual_file} actual)
  else()
    set(actual "")
  endif()
else()
  execute_process(
    COMMAND ${CUMEMTRACE} ${SUBCOMMAND} ${trace_list} --format ${FORMAT} ${EXTRA_ARGS}
    WORKING_DIRECTORY ${TRACES_DIR}
    OUTPUT_VARIABLE actual ERROR_VARIABLE stderr RESULT_VARIABLE status)
  file(WRITE ${actual_file} "${actual}")
endif()

if(NOT status EQUAL 0)
  message(FATAL_ERROR "cumemtrace ${SUBCOMMAND} ${trace_list} exited with ${status}:\n${stderr}")
endif()
file(READ ${EXPECTED} expected)
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "${SUBCOMMAND} of ${trace_list} (${FORMAT}) differs from ${EXPECTED}\n"
                      "actual output: ${actual_file}\n"
                      "see: diff -u ${EXPECTED} ${actual_file}")
endif()
