# Unit tests of the caching pool (preload/pool) on a fake device.
find_package(nlohmann_json 3 REQUIRED)
add_executable(pool_unit_tests
  pool_config_test.cpp
  pool_expandable_test.cpp
  pool_lock_test.cpp
  pool_oom_test.cpp
  pool_random_test.cpp
  pool_reset_test.cpp
  pool_rules_test.cpp
  pool_safety_test.cpp
  pool_threads_test.cpp)
target_link_libraries(pool_unit_tests PRIVATE cumemtrace_pool cumemtrace_warnings
  nlohmann_json::nlohmann_json GTest::gtest_main)
# The lock test reaches one internal header of the pool.
target_include_directories(pool_unit_tests PRIVATE ${CMAKE_SOURCE_DIR}/preload/pool)
gtest_discover_tests(pool_unit_tests TEST_PREFIX "pool." DISCOVERY_TIMEOUT 60)
