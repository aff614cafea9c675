# import-torch on real PyTorch snapshots, replay of traces through the
# caching pool, the seeds' workload (tests/apps/seeds_transformer) and the
# variable-length workloads (tests/apps/varlen_workloads). The snapshots are
# not in the repository: they are found in CUMEMTRACE_TORCH_SNAPSHOTS (the
# tests skip, saying so, when it is missing).
set(CUMEMTRACE_TORCH_SNAPSHOTS "${CMAKE_SOURCE_DIR}/../shared/traces/torch" CACHE PATH
  "Directory of real PyTorch memory snapshots (*.pickle and SOURCES.md)")
add_executable(import_replay_integration_tests
  integration_support.cpp
  seeds_workload_test.cpp
  torch_snapshot_export_test.cpp
  torch_snapshots_test.cpp
  varlen_workload_test.cpp)
target_link_libraries(import_replay_integration_tests PRIVATE
  cumemtrace_analysis cumemtrace_analysis_internal cumemtrace_test_support cumemtrace_warnings
  nlohmann_json::nlohmann_json GTest::gtest_main)
target_compile_definitions(import_replay_integration_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_APPS_DIR="${CMAKE_BINARY_DIR}/tests/apps"
  SIMCUDA_LIBRARY_DIR="${SIMCUDA_LIBRARY_DIR}"
  CUMEMTRACE_TORCH_SNAPSHOTS="${CUMEMTRACE_TORCH_SNAPSHOTS}"
  CUMEMTRACE_ADVISE_GOLDEN_DIR="${CMAKE_CURRENT_SOURCE_DIR}/advise_golden")
add_dependencies(import_replay_integration_tests cumemtrace cumemtrace_preload seeds_transformer
  varlen_workloads simcuda_runtime simcuda_driver)
gtest_discover_tests(import_replay_integration_tests TEST_PREFIX "integration." DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 300)

# Golden test of `cumemtrace replay --format json` on a hand-written
# passthrough trace (replay_golden/README.md works its figures out).
set(CUMEMTRACE_REPLAY_GOLDEN_DIR ${CMAKE_CURRENT_SOURCE_DIR}/replay_golden)
add_test(NAME golden_replay_mixed_json
  COMMAND ${CMAKE_COMMAND}
    -DCUMEMTRACE=$<TARGET_FILE:cumemtrace>
    -DSUBCOMMAND=replay
    "-DEXTRA_ARGS=--pool-conf$<SEMICOLON>pytorch"
    -DTRACES=mixed.jsonl
    -DFORMAT=json
    -DTRACES_DIR=${CUMEMTRACE_REPLAY_GOLDEN_DIR}/traces
    -DEXPECTED=${CUMEMTRACE_REPLAY_GOLDEN_DIR}/expected/mixed.json
    -DACTUAL_DIR=${CMAKE_CURRENT_BINARY_DIR}/golden_actual
    -P ${CMAKE_CURRENT_SOURCE_DIR}/golden/compare_report.cmake)

# `export --format torch-snapshot` read by Debian's Python (no torch there):
# pickletools.dis walks it, a pickle.Unpickler refusing globals loads it, and
# torch_snapshot_load.py checks what MemoryViz.js reads. Skips (77) without
# /usr/bin/python3, except in CI.
set(torch_snapshot_load_traces)
foreach(trace python_frames training_loop two_devices oom_fragmentation normal_leak shared_helper)
  list(APPEND torch_snapshot_load_traces ${CMAKE_CURRENT_SOURCE_DIR}/golden/traces/${trace}.jsonl)
endforeach()
add_test(NAME clients.torch_snapshot_python_pickle
  COMMAND sh -c "if [ -x /usr/bin/python3 ]; then exec /usr/bin/python3 -B \"$0\" \"$@\"; \
elif [ \"$CI\" = true ]; then echo '/usr/bin/python3 is missing'; exit 1; \
else echo 'skipped: no /usr/bin/python3'; exit 77; fi"
    ${CMAKE_CURRENT_SOURCE_DIR}/torch_snapshot_load.py $<TARGET_FILE:cumemtrace> ${torch_snapshot_load_traces})
set_tests_properties(clients.torch_snapshot_python_pickle PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60)
