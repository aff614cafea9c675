# Programs traced by cumemtrace in tests/integration, and the bundled demo.
cumemtrace_add_cuda_app(known_sequence known_sequence.cpp)
cumemtrace_add_cuda_app(demo_training_loop demo_training_loop.cpp)
install(TARGETS demo_training_loop DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/cumemtrace)
cumemtrace_add_cuda_app(fork_child fork_child.cpp)
cumemtrace_add_cuda_app(oom_semantics oom_semantics.cpp)
cumemtrace_add_cuda_app(bench_malloc_free bench_malloc_free.cpp)
# scripts/bench.sh: its host-malloc twin (timed under heaptrack; no CUDA, same
# flags) and the preload's resident memory per live allocation.
add_executable(bench_host_malloc bench_host_malloc.cpp)
target_link_libraries(bench_host_malloc PRIVATE cumemtrace_warnings)
set_target_properties(bench_host_malloc PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/apps)
cumemtrace_add_cuda_app(bench_live_rss bench_live_rss.cpp)
cumemtrace_add_cuda_app(seeds_transformer seeds_transformer.cpp)
