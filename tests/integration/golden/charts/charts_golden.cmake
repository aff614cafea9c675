# Golden tests of `cumemtrace timeline` and `cumemtrace export` on the
# checked-in traces (../traces and traces/ here): each case is
#   NAME | trace directory | trace | command arguments (| separated)
# and its expected output is expected/NAME. See README.md here.
set(CUMEMTRACE_CHARTS_DIR ${CMAKE_CURRENT_LIST_DIR})
set(CUMEMTRACE_CHARTS_CASES
  "normal_leak.timeline.csv|../traces|normal_leak.jsonl|timeline"
  "truncated.timeline.csv|../traces|truncated.jsonl|timeline"
  "two_devices.timeline_4.json|../traces|two_devices.jsonl|timeline|--format|json|--points|4"
  # CUDA graph memory: its own series (graph rows, graph_reserved, a counter track).
  "graph_memory.timeline.csv|../traces|graph_memory.jsonl|timeline"
  "graph_memory.timeline.json|../traces|graph_memory.jsonl|timeline|--format|json"
  "graph_memory.perfetto.json|../traces|graph_memory.jsonl|export|--format|perfetto"
  "charts_caching_oom.timeline.csv|traces|charts_caching_oom.jsonl|timeline|--format|csv"
  "charts_caching_oom.timeline.json|traces|charts_caching_oom.jsonl|timeline|--format|json"
  "charts_caching_oom.timeline_3.csv|traces|charts_caching_oom.jsonl|timeline|--points|3"
  "normal_leak.events.csv|../traces|normal_leak.jsonl|export|--format|csv"
  "charts_caching_oom.events.csv|traces|charts_caching_oom.jsonl|export|--format|csv"
  "charts_markup_names.events.csv|traces|charts_markup_names.jsonl|export|--format|csv"
  "two_devices.perfetto.json|../traces|two_devices.jsonl|export|--format|perfetto"
  "charts_caching_oom.perfetto.json|traces|charts_caching_oom.jsonl|export|--format|perfetto"
  "charts_caching_oom.perfetto_all.json|traces|charts_caching_oom.jsonl|export|--format|perfetto|--points|all"
  "charts_caching_oom.perfetto_2.json|traces|charts_caching_oom.jsonl|export|--format|perfetto|--points|2"
  "charts_markup_names.perfetto.json|traces|charts_markup_names.jsonl|export|--format|perfetto"
  "python_frames.events.csv|../traces|python_frames.jsonl|export|--format|csv"
  "python_frames.perfetto.json|../traces|python_frames.jsonl|export|--format|perfetto"
  # Folded stacks; no --what: the peak.
  "python_frames.peak.folded|../traces|python_frames.jsonl|export|--format|folded"
  "python_frames.leaks.folded|../traces|python_frames.jsonl|export|--format|folded|--what|leaks"
  "python_frames.allocated.folded|../traces|python_frames.jsonl|export|--format|folded|--what|allocated"
  "normal_leak.peak.folded|../traces|normal_leak.jsonl|export|--format|folded|--what|peak"
  "normal_leak.leaks.folded|../traces|normal_leak.jsonl|export|--format|folded|--what|leaks"
  "normal_leak.allocated.folded|../traces|normal_leak.jsonl|export|--format|folded|--what|allocated")

foreach(spec IN LISTS CUMEMTRACE_CHARTS_CASES)
  string(REPLACE "|" ";" fields "${spec}")
  list(POP_FRONT fields name dir trace command)
  list(JOIN fields "|" options)
  set(args "${command}|${trace}")
  if(options)
    string(APPEND args "|${options}")
  endif()
  add_test(NAME golden_${name}
    COMMAND ${CMAKE_COMMAND}
      -DCUMEMTRACE=$<TARGET_FILE:cumemtrace>
      "-DARGS=${args}"
      -DTRACES_DIR=${CUMEMTRACE_CHARTS_DIR}/${dir}
      -DEXPECTED=${CUMEMTRACE_CHARTS_DIR}/expected/${name}
      -DACTUAL_DIR=${CMAKE_CURRENT_BINARY_DIR}/golden_actual
      -P ${CUMEMTRACE_CHARTS_DIR}/compare_output.cmake)
endforeach()

# The CSV outputs read back by Python's csv module, field by field against
# the trace's own JSON (an independent reader), when Python is there.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME charts_csv_read_by_python
    COMMAND ${Python3_EXECUTABLE} ${CUMEMTRACE_CHARTS_DIR}/read_csv.py $<TARGET_FILE:cumemtrace>
      ${CUMEMTRACE_CHARTS_DIR}/traces/charts_caching_oom.jsonl
      ${CUMEMTRACE_CHARTS_DIR}/traces/charts_markup_names.jsonl
      ${CUMEMTRACE_CHARTS_DIR}/../traces/normal_leak.jsonl
      ${CUMEMTRACE_CHARTS_DIR}/../traces/python_frames.jsonl)
else()
  message(STATUS "python3 not found: charts_csv_read_by_python is not run")
endif()
