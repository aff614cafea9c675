# The HTML report in headless Chromium and against structural goldens. Needs
# only the `cumemtrace` binary (no preload, no CUDA). Chromium is found here
# or on PATH when the tests run; without it the browser tests skip.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTML_TEST_PNG REQUIRED IMPORTED_TARGET libpng)
find_package(nlohmann_json 3 REQUIRED)
find_program(CUMEMTRACE_CHROMIUM NAMES chromium chromium-browser
  DOC "Chromium for the HTML report's browser tests (optional)")
if(NOT CUMEMTRACE_CHROMIUM)
  message(STATUS "chromium not found: the HTML report's browser tests will skip")
  set(CUMEMTRACE_CHROMIUM "")
endif()

add_executable(html_integration_tests
  html_golden_test.cpp
  html_report_test.cpp
  html_structure.cpp)
target_link_libraries(html_integration_tests PRIVATE cumemtrace_test_support cumemtrace_warnings
  nlohmann_json::nlohmann_json PkgConfig::HTML_TEST_PNG GTest::gtest_main)
target_compile_definitions(html_integration_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_CHROMIUM_PATH="${CUMEMTRACE_CHROMIUM}"
  CUMEMTRACE_GOLDEN_DIR="${CMAKE_CURRENT_SOURCE_DIR}/golden"
  CUMEMTRACE_GOLDEN_ACTUAL_DIR="${CMAKE_CURRENT_BINARY_DIR}"
  # The page's one script, whose SHA-256 its Content-Security-Policy names.
  CUMEMTRACE_FLAME_SCRIPT="${CMAKE_SOURCE_DIR}/analyzer/render/flame_graph.js")
add_dependencies(html_integration_tests cumemtrace)
gtest_discover_tests(html_integration_tests TEST_PREFIX "html." DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 180)

# The flame graphs in Chromium, driven by tests/js/flame_check.mjs through
# playwright-core: ctest clients.*, which the sanitizer runs leave out, so
# their builds do not compile it (CI time).
if(CUMEMTRACE_SANITIZE)
  return()
endif()
add_executable(html_client_tests html_clients_test.cpp)
target_link_libraries(html_client_tests PRIVATE cumemtrace_test_support cumemtrace_warnings GTest::gtest_main)
target_compile_definitions(html_client_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_CHROMIUM_PATH="${CUMEMTRACE_CHROMIUM}"
  CUMEMTRACE_GOLDEN_DIR="${CMAKE_CURRENT_SOURCE_DIR}/golden"
  CUMEMTRACE_JS_DIR="${CMAKE_SOURCE_DIR}/tests/js"
  CUMEMTRACE_DEEP_STACKS_TOOL="${CMAKE_SOURCE_DIR}/analyzer/tools/make_deep_stacks_trace.py")
add_dependencies(html_client_tests cumemtrace)
gtest_discover_tests(html_client_tests TEST_PREFIX "clients." DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 120)
