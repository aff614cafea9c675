# Unit tests of import-torch (the restricted pickle reader and the snapshot
# converter) and of replay (the replay engine on the caching pool).
add_executable(import_replay_unit_tests
  analyzer_replay_test.cpp
  analyzer_test_support.cpp
  analyzer_torch_import_test.cpp
  analyzer_torch_pickle_test.cpp)
target_link_libraries(import_replay_unit_tests PRIVATE
  cumemtrace_analysis cumemtrace_analysis_internal cumemtrace_test_support cumemtrace_warnings
  nlohmann_json::nlohmann_json GTest::gtest_main)
target_compile_definitions(import_replay_unit_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_TEST_PRELOAD1="$<TARGET_FILE:analyzer_test_empty_preload1>"
  CUMEMTRACE_TEST_PRELOAD2="$<TARGET_FILE:analyzer_test_empty_preload2>"
  # Written by torch_snapshot/make_fixture.py from plain dicts.
  CUMEMTRACE_TORCH_FIXTURE="${CMAKE_CURRENT_SOURCE_DIR}/torch_snapshot/tiny_snapshot.pickle")
add_dependencies(import_replay_unit_tests cumemtrace)
gtest_discover_tests(import_replay_unit_tests TEST_PREFIX "import_replay." DISCOVERY_TIMEOUT 60)
