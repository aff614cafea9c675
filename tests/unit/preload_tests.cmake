# Unit tests of the injected side's core (no CUDA): line building and
# escaping, the option table, output naming, the writer and the recorder,
# call-stack interning and naming, marker ranges.
find_package(nlohmann_json 3 REQUIRED)
add_executable(preload_unit_tests
  preload_line_buffer_test.cpp
  preload_config_test.cpp
  preload_flush_test.cpp
  preload_output_path_test.cpp
  preload_recorder_test.cpp
  preload_writer_test.cpp
  preload_markers_test.cpp
  preload_stack_naming_test.cpp
  preload_stack_recorder_test.cpp
  preload_stack_raw_backtrace_test.cpp
  preload_frame_walker_test.cpp
  preload_tick_clock_test.cpp
  preload_stack_table_test.cpp)
target_link_libraries(preload_unit_tests PRIVATE cumemtrace_core cumemtrace_warnings
  cumemtrace_test_support
  nlohmann_json::nlohmann_json GTest::gtest_main)
# The frame walker's tests compare it with libunwind, opened as the preload
# opens it.
target_compile_definitions(preload_unit_tests PRIVATE
  CUMEMTRACE_LIBUNWIND_SONAME="${CUMEMTRACE_LIBUNWIND_SONAME}")
target_link_libraries(preload_unit_tests PRIVATE ${CMAKE_DL_LIBS})
# A library without exports for its own functions and without .symtab, as
# cuBLAS ships (preload_stack_naming_test.cpp).
add_library(preload_naming_fixture SHARED preload_naming_fixture.cpp)
target_compile_options(preload_naming_fixture PRIVATE -fvisibility=hidden -fno-toplevel-reorder)
target_link_options(preload_naming_fixture PRIVATE -s)
target_link_libraries(preload_unit_tests PRIVATE preload_naming_fixture)
gtest_discover_tests(preload_unit_tests TEST_PREFIX "preload." DISCOVERY_TIMEOUT 60)
