# Programs traced by cumemtrace in tests/integration, and the bundled demo.
cumemtrace_add_cuda_app(known_sequence known_sequence.cpp)
cumemtrace_add_cuda_app(demo_training_loop demo_training_loop.cpp)
# Allocates over a few seconds: the live view's tests (top, run --live).
cumemtrace_add_cuda_app(live_allocator live_allocator.cpp)
install(TARGETS demo_training_loop DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/cumemtrace)
cumemtrace_add_cuda_app(fork_child fork_child.cpp)
cumemtrace_add_cuda_app(oom_semantics oom_semantics.cpp)
cumemtrace_add_cuda_app(oom_storm oom_storm.cpp)
cumemtrace_add_cuda_app(bench_malloc_free bench_malloc_free.cpp)
# scripts/bench.sh: its host-malloc twin (timed under heaptrack; no CUDA, same
# flags) and the preload's resident memory per live allocation.
add_executable(bench_host_malloc bench_host_malloc.cpp)
target_link_libraries(bench_host_malloc PRIVATE cumemtrace_warnings)
set_target_properties(bench_host_malloc PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/apps)
cumemtrace_add_cuda_app(bench_live_rss bench_live_rss.cpp)
# Stack capture with a deep stack and cooled caches, as in a big process.
cumemtrace_add_cuda_app(bench_deep_stack bench_deep_stack.cpp)
# Smoke tests (no timing asserted): the benchmark programs run, exit 0, and
# print the one well-formed line scripts/bench.sh parses.
add_test(NAME bench_programs_output COMMAND sh -c [[
  set -e
  out=$("$1" 1000); echo "$out" | grep -Eqx '[0-9]+\.[0-9] 1000 [0-9]+' || { echo "bench_malloc_free: '$out'"; exit 1; }
  out=$("$2" 1000); echo "$out" | grep -Eqx '[0-9]+\.[0-9] 1000 [0-9]+' || { echo "bench_host_malloc: '$out'"; exit 1; }
  out=$("$3" 1000); echo "$out" | awk '!(NF == 4 && $1 > 0 && $2 >= $1 && $3 >= $2 && $4 == 1000) {exit 1}' ||
    { echo "bench_live_rss: '$out'"; exit 1; }
  out=$("$4" 10 64); echo "$out" | grep -Eqx '[0-9]+\.[0-9] 10 61' || { echo "bench_deep_stack: '$out'"; exit 1; }]]
  sh $<TARGET_FILE:bench_malloc_free> $<TARGET_FILE:bench_host_malloc> $<TARGET_FILE:bench_live_rss>
  $<TARGET_FILE:bench_deep_stack>)
set_tests_properties(bench_programs_output PROPERTIES
  ENVIRONMENT "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR}" TIMEOUT 60 LABELS sim)
cumemtrace_add_cuda_app(seeds_transformer seeds_transformer.cpp)
# Variable-length workloads for the pool's quality targets (issue 18;
# tests/integration/varlen_workload_test.cpp, scripts/bench.sh), and their
# busy mode, which times steps on a busy device (issue 30,
# workload_device.h: the marker API and the sim's counters).
cumemtrace_add_cuda_app(varlen_workloads varlen_workloads.cpp)
foreach(app seeds_transformer varlen_workloads)
  target_include_directories(${app} PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/tests/sim/include)
  target_link_libraries(${app} PRIVATE ${CMAKE_DL_LIBS})
endforeach()
