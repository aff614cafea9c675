# Golden tests of `cumemtrace report`: small traces in traces/ (hand-written,
# or written by make_traces.py), the expected text and JSON reports in
# expected/, compared byte for byte. The cases are listed in cases.txt.
# See README.md here to regenerate the expected files after a deliberate change.
set(CUMEMTRACE_GOLDEN_DIR ${CMAKE_CURRENT_LIST_DIR})
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CUMEMTRACE_GOLDEN_DIR}/cases.txt)
file(STRINGS ${CUMEMTRACE_GOLDEN_DIR}/cases.txt golden_lines REGEX "^[A-Za-z0-9_]+:")

foreach(golden_line IN LISTS golden_lines)
  string(REGEX MATCH "^([A-Za-z0-9_]+): *(.*)$" _ "${golden_line}")
  set(case ${CMAKE_MATCH_1})
  string(STRIP "${CMAKE_MATCH_2}" traces)
  string(REGEX REPLACE " +" "," traces "${traces}")  # a list that survives add_test
  foreach(format text json)
    add_test(NAME golden_${case}_${format}
      COMMAND ${CMAKE_COMMAND}
        -DCUMEMTRACE=$<TARGET_FILE:cumemtrace>
        -DTRACES=${traces}
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
    -DTRACES=normal_leak.jsonl
    -DFORMAT=json
    -DTRACES_DIR=${CUMEMTRACE_GOLDEN_DIR}/traces
    -DEXPECTED=${CUMEMTRACE_GOLDEN_DIR}/expected/normal_leak.json
    -DACTUAL_DIR=${CMAKE_CURRENT_BINARY_DIR}/golden_actual
    -DUSE_OUTPUT_FILE=ON
    -P ${CUMEMTRACE_GOLDEN_DIR}/compare_report.cmake)

# Goldens of `cumemtrace timeline` and `export` (and the HTML outlines, in
# html_integration.cmake): see charts/README.md.
include(${CMAKE_CURRENT_LIST_DIR}/charts/charts_golden.cmake)

include(${CMAKE_CURRENT_LIST_DIR}/check_diff.cmake)
