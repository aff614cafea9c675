# Programs that end badly or unusually (signals, faults, exit from odd
# places, fork, exec, a full disk), run under cumemtrace by
# tests/integration/robustness_test.cpp.
cumemtrace_add_cuda_app(survive_signals survive_signals.cpp)
cumemtrace_add_cuda_app(exit_paths exit_paths.cpp)
cumemtrace_add_cuda_app(fork_paths fork_paths.cpp)
# The soak test's program: 16 threads of random traffic with forks
# (tests/integration/soak_test.cpp).
cumemtrace_add_cuda_app(soak soak.cpp)
