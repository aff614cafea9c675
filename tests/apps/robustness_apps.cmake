# Programs that end badly or unusually (signals, faults, exit from odd
# places, fork, exec, a full disk), run under cumemtrace by
# tests/integration/robustness_test.cpp.
cumemtrace_add_cuda_app(survive_signals survive_signals.cpp)
cumemtrace_add_cuda_app(exit_paths exit_paths.cpp)
cumemtrace_add_cuda_app(fork_paths fork_paths.cpp)
# Says which signals reach it, for `cumemtrace run`'s signal forwarding
# (tests/integration/run_signals_test.cpp).
cumemtrace_add_cuda_app(signal_report signal_report.cpp)
# Every way out of a process, in the main thread, a forked child and a thread
# (tests/integration/exit_ways_test.cpp).
cumemtrace_add_cuda_app(exit_ways exit_ways.cpp)
# The soak test's program: 16 threads of random traffic with forks
# (tests/integration/soak_test.cpp).
cumemtrace_add_cuda_app(soak soak.cpp)
# 16 threads allocating when SIGKILL strikes; their progress in a shared
# mapping (tests/integration/killed_trace_test.cpp).
cumemtrace_add_cuda_app(kill_storm kill_storm.cpp)
