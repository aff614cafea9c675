# Golden tests of `cumemtrace report`: hand-written traces in traces/, the
# expected text and JSON reports in expected/, compared byte for byte.
# See README.md here to regenerate the expected files after a deliberate change.
set(CUMEMTRACE_GOLDEN_DIR ${CMAKE_CURRENT_LIST_DIR})
set(CUMEMTRACE_GOLDEN_CASES normal_leak truncated two_devices)

foreach(case IN LISTS CUMEMTRACE_GOLDEN_CASES)
  foreach(format text json)
    add_test(NAME golden_${case}_${format}
      COMMAND ${CMAKE_COMMAND}
        -DCUMEMTRACE=$<TARGET_FILE:cumemtrace>
        -DTRACE=${case}.jsonl
        -DFORMAT=${format}
        -DTRACES_DIR=${CUMEMTRACE_GOLDEN_DIR}/traces
        -DEXPECTED=${CUMEMTRACE_GOLDEN_DIR}/expected/${case}.${format}
        -DACTUAL_DIR=${CMAKE_CURRENT_BINARY_DIR}/golden_actual
        -P ${CUMEMTRACE_GOLDEN_DIR}/compare_report.cmake)
  endforeach()
endforeach()

# The same report through -o FILE must be byte-identical to stdout's.
add_test(NAME golden_normal_leak_output_file
  COMMAND ${CMAKE_COMMAND}
    -DCUMEMTRACE=$<TARGET_FILE:cumemtrace>
    -DTRACE=normal_leak.jsonl
    -DFORMAT=json
    -DTRACES_DIR=${CUMEMTRACE_GOLDEN_DIR}/traces
    -DEXPECTED=${CUMEMTRACE_GOLDEN_DIR}/expected/normal_leak.json
    -DACTUAL_DIR=${CMAKE_CURRENT_BINARY_DIR}/golden_actual
    -DUSE_OUTPUT_FILE=ON
    -P ${CUMEMTRACE_GOLDEN_DIR}/compare_report.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/check_diff.cmake)
