# The live view (`top`, `run --live`) on a terminal: tmux runs them in a pane
# of known size, against a program on the simulated device. Named clients.*
# (an outside tool drives them; the sanitizer runs skip that prefix).
add_executable(live_view_tests live_view_test.cpp)
target_link_libraries(live_view_tests PRIVATE cumemtrace_test_support cumemtrace_warnings GTest::gtest_main)
target_compile_definitions(live_view_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_APPS_DIR="${CMAKE_BINARY_DIR}/tests/apps"
  SIMCUDA_LIBRARY_DIR="${SIMCUDA_LIBRARY_DIR}")
add_dependencies(live_view_tests cumemtrace cumemtrace_preload live_allocator simcuda_runtime simcuda_driver)
gtest_discover_tests(live_view_tests TEST_PREFIX "clients." DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 60 LABELS sim)
