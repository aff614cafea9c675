# Programs traced by cumemtrace in tests/integration, and the bundled demo.
cumemtrace_add_cuda_app(known_sequence known_sequence.cpp)
cumemtrace_add_cuda_app(demo_training_loop demo_training_loop.cpp)
install(TARGETS demo_training_loop DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/cumemtrace)
cumemtrace_add_cuda_app(fork_child fork_child.cpp)
cumemtrace_add_cuda_app(oom_semantics oom_semantics.cpp)
cumemtrace_add_cuda_app(oom_storm oom_storm.cpp)
cumemtrace_add_cuda_app(bench_malloc_free bench_malloc_free.cpp)
cumemtrace_add_cuda_app(seeds_transformer seeds_transformer.cpp)
