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
# A program that embeds CPython: Debian's libpython3.11 (libpython3-dev,
# scripts/setup.sh), in the loader's default path, so no RPATH is needed.
find_path(CUMEMTRACE_PYTHON_EMBED_INCLUDE Python.h PATHS /usr/include/python3.11 NO_DEFAULT_PATH)
find_library(CUMEMTRACE_PYTHON_EMBED_LIBRARY NAMES python3.11 PATHS /usr/lib/x86_64-linux-gnu NO_DEFAULT_PATH)
if(CUMEMTRACE_PYTHON_EMBED_INCLUDE AND CUMEMTRACE_PYTHON_EMBED_LIBRARY)
  cumemtrace_add_cuda_app(python_embed python_embed.cpp)
  target_include_directories(python_embed SYSTEM PRIVATE ${CUMEMTRACE_PYTHON_EMBED_INCLUDE})
  target_link_libraries(python_embed PRIVATE ${CUMEMTRACE_PYTHON_EMBED_LIBRARY})
else()
  message(STATUS "no Debian libpython3.11 development files: tests/apps/python_embed is not built")
endif()
# Threads leaking at different rates, for per-thread growth verdicts
# (tests/integration/growth_threads_test.cpp).
cumemtrace_add_cuda_app(growth_threads growth_threads.cpp)
