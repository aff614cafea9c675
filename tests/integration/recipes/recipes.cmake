# README.md's pandas and DuckDB recipes run by the real clients (Debian's
# python3 with pandas, Node with @duckdb/node-api) and checked against the
# report: ctest names clients.Pandas.*, clients.DuckDB.*, clients.Recipes.*.
find_package(PkgConfig REQUIRED)
pkg_check_modules(RECIPES_ZSTD REQUIRED IMPORTED_TARGET libzstd)
find_package(nlohmann_json 3 REQUIRED)
add_executable(recipes_tests
  ${CMAKE_CURRENT_LIST_DIR}/recipes_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../integration_support.cpp)
target_include_directories(recipes_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(recipes_tests PRIVATE cumemtrace_test_support cumemtrace_warnings
  nlohmann_json::nlohmann_json PkgConfig::RECIPES_ZSTD GTest::gtest_main)
target_compile_definitions(recipes_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  CUMEMTRACE_APPS_DIR="${CMAKE_BINARY_DIR}/tests/apps"
  SIMCUDA_LIBRARY_DIR="${SIMCUDA_LIBRARY_DIR}")
add_dependencies(recipes_tests cumemtrace cumemtrace_preload demo_training_loop simcuda_runtime simcuda_driver)
gtest_discover_tests(recipes_tests TEST_PREFIX "clients." DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)
