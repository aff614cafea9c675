# Unmodified programs from tests/apps run under `cumemtrace run` on the
# simulated device; their traces are checked event by event and the
# analyzer's report exactly.
find_package(nlohmann_json 3 REQUIRED)
# exit_ways_test.cpp runs Python's ways out too.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_executable(integration_tests
  bad_options_test.cpp
  exit_ways_test.cpp
  fault_matrix_test.cpp
  growth_threads_test.cpp
  integration_support.cpp
  kernel_apps_test.cpp
  killed_trace_test.cpp
  known_sequence_test.cpp
  launcher_test.cpp
  pool_preload_test.cpp
  pool_sharing_test.cpp
  ranks_test.cpp
  robustness_test.cpp
  route_check.cpp
  routes_test.cpp
  run_signals_test.cpp
  stacks_markers_test.cpp)
# cumemtrace_contract: the option table, whose every entry bad_options_test.cpp feeds garbage.
target_link_libraries(integration_tests PRIVATE cumemtrace_test_support cumemtrace_warnings cumemtrace_headers
  cumemtrace_contract
  nlohmann_json::nlohmann_json GTest::gtest_main)
target_compile_definitions(integration_tests PRIVATE
  CUMEMTRACE_CLI="$<TARGET_FILE:cumemtrace>"
  CUMEMTRACE_PRELOAD="$<TARGET_FILE:cumemtrace_preload>"
  CUMEMTRACE_BUILD_DIR="${CMAKE_BINARY_DIR}"
  CUMEMTRACE_APPS_DIR="${CMAKE_BINARY_DIR}/tests/apps"
  SIMCUDA_LIBRARY_DIR="${SIMCUDA_LIBRARY_DIR}"
  CUDA_TOOLKIT_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}"
  CMAKE_COMMAND="${CMAKE_COMMAND}"
  CUMEMTRACE_PYTHON3="${Python3_EXECUTABLE}"
  CUMEMTRACE_PYTHON_APPS_DIR="${CMAKE_SOURCE_DIR}/tests/apps/python")
# The tests run these; make sure building the tests builds them.
add_dependencies(integration_tests cumemtrace cumemtrace_preload known_sequence fork_child
  oom_semantics stack_sites stack_perf_map markers_app growth_threads survive_signals exit_paths exit_ways fork_paths
  signal_report kill_storm
  route_runtime route_driver route_entry_points route_stream_ordered route_vmm route_semantics
  route_devices route_threads route_framework route_static_runtime route_real_runtime_static
  route_real_runtime_shared route_dlsym route_probe_local route_probe_early
  pool_reuse_after_free pool_fragmentation pool_reset pool_give_back pool_destroyed_stream pool_thread_streams pool_mempool_stats pool_other_routes pool_ranges ipc_share oom_storm
  kernel_train_shared kernel_train_static
  simcuda_runtime simcuda_driver)
if(TARGET python_embed)
  add_dependencies(integration_tests python_embed)
endif()
gtest_discover_tests(integration_tests TEST_PREFIX "integration." DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 300)
