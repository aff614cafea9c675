# Unit tests of the analyzer: the trace reader, the analysis, the reports and
# the `cumemtrace` command line (run as a separate process).
find_package(PkgConfig REQUIRED)
pkg_check_modules(ANALYZER_TEST_ZSTD REQUIRED IMPORTED_TARGET libzstd)

# Harmless libraries for `cumemtrace run` to preload, so its tests do not
# depend on libcumemtrace.so (two, to check that LD_PRELOAD keeps entries).
foreach(n 1 2)
  add_library(analyzer_test_empty_preload${n} MODULE analyzer_empty_preload.cpp)
  set_target_properties(analyzer_test_empty_preload${n} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endforeach()

add_executable(analyzer_unit_tests
  address_map_test.cpp
  analyzer_analysis_test.cpp
  analyzer_bad_input_test.cpp
  analyzer_call_sites_test.cpp
  analyzer_check_test.cpp
  analyzer_diff_test.cpp
  analyzer_cli_test.cpp
  analyzer_export_test.cpp
  analyzer_fragmentation_test.cpp
  analyzer_growth_test.cpp
  analyzer_html_test.cpp
  analyzer_line_parser_test.cpp
  analyzer_line_shapes_test.cpp
  analyzer_memory_test.cpp
  analyzer_multi_report_test.cpp
  analyzer_oom_test.cpp
  analyzer_phases_test.cpp
  analyzer_progress_test.cpp
  analyzer_reader_test.cpp
  analyzer_report_test.cpp
  analyzer_site_labels_test.cpp
  analyzer_symbolizer_test.cpp
  analyzer_test_support.cpp
  analyzer_timeline_test.cpp
  analyzer_top_at_peak_test.cpp)
target_link_libraries(analyzer_unit_tests PRIVATE
  cumemtrace_analysis cumemtrace_analysis_internal cumemtrace_test_support cumemtrace_warnings
  PkgConfig::ANALYZER_TEST_ZSTD nlohmann_json::nlohmann_json GTest::gtest_main)
target_compile_definitions(analyzer_unit_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_TEST_PRELOAD1="$<TARGET_FILE:analyzer_test_empty_preload1>"
  CUMEMTRACE_TEST_PRELOAD2="$<TARGET_FILE:analyzer_test_empty_preload2>"
  CUMEMTRACE_GOLDEN_TRACES="${CMAKE_SOURCE_DIR}/tests/integration/golden/traces")
if(NOT TARGET PkgConfig::LIBDW)
  message(FATAL_ERROR "the analyzer's tests need libdw-dev (report --symbolize); scripts/setup.sh installs it")
endif()
# The symbolizer's tests read this file's lines from the test's own DWARF,
# whatever the build type.
set_source_files_properties(analyzer_symbolizer_test.cpp PROPERTIES COMPILE_OPTIONS -g)
add_dependencies(analyzer_unit_tests cumemtrace analyzer_test_empty_preload1 analyzer_test_empty_preload2)
gtest_discover_tests(analyzer_unit_tests TEST_PREFIX "analyzer." DISCOVERY_TIMEOUT 60)
