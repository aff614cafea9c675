# Runs `cumemtrace ARGS...` in TRACES_DIR (so outputs name traces by their
# relative paths) and compares, byte for byte, what it did with EXPECTED:
# its stdout, then "--- stderr", its stderr, "--- exit N", and with
# OUTPUT_FILE, "--- OUTPUT_FILE" and that file's content (the command writes
# it in ACTUAL_DIR: the argument @OUTPUT@ stands for its path). On a
# difference the actual result is kept in ACTUAL_DIR.
#   cmake -DCUMEMTRACE=... -DARGS="check|t.jsonl|--max-ooms|0" -DTRACES_DIR=...
#         -DEXPECTED=... -DACTUAL_DIR=... [-DOUTPUT_FILE=junit.xml] -P compare_command.cmake
foreach(var CUMEMTRACE ARGS TRACES_DIR EXPECTED ACTUAL_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compare_command.cmake: ${var} is not set")
  endif()
endforeach()

file(MAKE_DIRECTORY ${ACTUAL_DIR})
get_filename_component(expected_name ${EXPECTED} NAME)
set(actual_file ${ACTUAL_DIR}/${expected_name})
file(REMOVE ${actual_file})
# '|' separates the arguments: a ';' would be split by ctest already.
string(REPLACE "|" ";" args "${ARGS}")
if(DEFINED OUTPUT_FILE)
  set(output_path ${ACTUAL_DIR}/${expected_name}.${OUTPUT_FILE})
  file(REMOVE ${output_path})
  string(REPLACE "@OUTPUT@" "${output_path}" args "${args}")
endif()

execute_process(
  COMMAND ${CUMEMTRACE} ${args}
  WORKING_DIRECTORY ${TRACES_DIR}
  OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr RESULT_VARIABLE status)
set(actual "${stdout}--- stderr\n${stderr}--- exit ${status}\n")
if(DEFINED OUTPUT_FILE)
  if(EXISTS ${output_path})
    file(READ ${output_path} content)
  else()
    set(content "(not written)\n")
  endif()
  string(APPEND actual "--- ${OUTPUT_FILE}\n${content}")
endif()
file(WRITE ${actual_file} "${actual}")

file(READ ${EXPECTED} expected)
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "cumemtrace ${ARGS} differs from ${EXPECTED}\n"
                      "actual: ${actual_file}\n"
                      "see: diff -u ${EXPECTED} ${actual_file}")
endif()
