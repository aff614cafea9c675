# import-torch on real PyTorch snapshots, and replay of traces through the
# caching pool. The snapshots are not in the repository: they are found in
# CUMEMTRACE_TORCH_SNAPSHOTS (the tests skip, saying so, when it is missing).
set(CUMEMTRACE_TORCH_SNAPSHOTS "${CMAKE_SOURCE_DIR}/../shared/traces/torch" CACHE PATH
  "Directory of real PyTorch memory snapshots (*.pickle and SOURCES.md)")
add_executable(import_replay_integration_tests
  torch_snapshots_test.cpp)
target_link_libraries(import_replay_integration_tests PRIVATE
  cumemtrace_analysis cumemtrace_analysis_internal cumemtrace_test_support cumemtrace_warnings
  nlohmann_json::nlohmann_json GTest::gtest_main)
target_compile_definitions(import_replay_integration_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_TORCH_SNAPSHOTS="${CUMEMTRACE_TORCH_SNAPSHOTS}")
add_dependencies(import_replay_integration_tests cumemtrace)
gtest_discover_tests(import_replay_integration_tests TEST_PREFIX "integration." DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 300)
