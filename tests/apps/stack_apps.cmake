# Programs for call stacks and markers (tests/integration/stacks_markers_test.cpp).
cumemtrace_add_cuda_app(stack_sites stack_sites.cpp)
cumemtrace_add_cuda_app(stack_perf_map stack_perf_map.cpp)
# NVTX (header-only, from the toolkit) and the weak marker API; NVTX opens
# its injection library with dlopen.
cumemtrace_add_cuda_app(markers_app markers_app.cpp)
target_link_libraries(markers_app PRIVATE cumemtrace_headers ${CMAKE_DL_LIBS})
# Stack capture alone: libunwind, libgcc and the preload's CFI walker (scripts/bench.sh).
add_executable(bench_unwind bench_unwind.cpp)
target_link_libraries(bench_unwind PRIVATE cumemtrace_core cumemtrace_warnings ${CMAKE_DL_LIBS})
target_compile_definitions(bench_unwind PRIVATE
  CUMEMTRACE_LIBUNWIND_SONAME="${CUMEMTRACE_LIBUNWIND_SONAME}")
set_target_properties(bench_unwind PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/apps)
