# The soak test (a minute of 16 threads with forks under the preload,
# tests/apps/soak.cpp): its own binary, so its ctest entries get a timeout
# of their own.
add_executable(soak_test soak_test.cpp integration_support.cpp)
target_link_libraries(soak_test PRIVATE cumemtrace_test_support cumemtrace_warnings
  nlohmann_json::nlohmann_json GTest::gtest_main)
target_compile_definitions(soak_test PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_PRELOAD="$<TARGET_FILE:cumemtrace_preload>"
  CUMEMTRACE_APPS_DIR="${CMAKE_BINARY_DIR}/tests/apps"
  SIMCUDA_LIBRARY_DIR="${SIMCUDA_LIBRARY_DIR}")
add_dependencies(soak_test cumemtrace cumemtrace_preload soak simcuda_runtime simcuda_driver)
# 60 s of soak and reading its trace of some 40 MB: 4 minutes leave room
# for a loaded 2-core machine (the test kills a hung program itself).
gtest_discover_tests(soak_test TEST_PREFIX "soak." DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 240)
