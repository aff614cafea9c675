# Programs that exercise the simulated CUDA device (tests/sim). Each is a
# plain CUDA program (host compiler, toolkit headers, real libcudart.so at
# link time) that checks itself and exits non-zero on failure. ctest runs it
# with LD_LIBRARY_PATH pointing at the sim.

# sim_test.h & co., and the sim's own extension simcuda_counters.h.
set(_sim_test_include ${CMAKE_CURRENT_SOURCE_DIR}/../sim/testing ${CMAKE_CURRENT_SOURCE_DIR}/../sim/include)

# sim_app(NAME [DRIVER] [ENV VAR=VALUE...] [DEFINES D...] [ARGS a...] [SOURCE file])
function(sim_app name)
  cmake_parse_arguments(S "DRIVER" "SOURCE;TIMEOUT" "ENV;DEFINES;ARGS" ${ARGN})
  if(NOT S_SOURCE)
    set(S_SOURCE ${name}.cpp)
  endif()
  if(S_DRIVER)
    cumemtrace_add_cuda_app(${name} ${S_SOURCE} DRIVER)
  else()
    cumemtrace_add_cuda_app(${name} ${S_SOURCE})
  endif()
  target_include_directories(${name} PRIVATE ${_sim_test_include})
  target_link_libraries(${name} PRIVATE ${CMAKE_DL_LIBS})  # simcuda_counters_lookup
  if(S_DEFINES)
    target_compile_definitions(${name} PRIVATE ${S_DEFINES})
  endif()
  add_dependencies(${name} simcuda_runtime simcuda_driver)
  add_test(NAME ${name} COMMAND ${name} ${S_ARGS})
  if(NOT S_TIMEOUT)
    set(S_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR};${S_ENV}"
    TIMEOUT ${S_TIMEOUT}
    LABELS sim)
endfunction()

sim_app(sim_basic)
sim_app(sim_errors ENV SIMCUDA_DEVICE_MEMORY=1GiB)
sim_app(sim_capacity ENV SIMCUDA_DEVICE_MEMORY=512MiB)
sim_app(sim_page_probe ENV SIMCUDA_DEVICE_MEMORY=256MiB)
sim_app(sim_driver_probe DRIVER)
# Stream capture and graphs (tests/sim/driver/drv_capture.cpp, drv_graph.cpp).
sim_app(sim_graphs TIMEOUT 60)
sim_app(sim_multi_device ENV SIMCUDA_DEVICE_COUNT=2 SIMCUDA_DEVICE_MEMORY=2GiB)
# CUDA_VISIBLE_DEVICES: picks and orders devices, stops at the first invalid
# entry, takes GPU UUIDs, and is read by cuInit (set after the driver loaded).
function(sim_visible name expected)
  add_test(NAME sim_visible_devices.${name} COMMAND sim_visible_devices ${expected})
  set_tests_properties(sim_visible_devices.${name} PROPERTIES LABELS sim TIMEOUT 60
    ENVIRONMENT "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR};SIMCUDA_DEVICE_COUNT=3;SIMCUDA_DEVICE_MEMORY=1GiB;${ARGN}")
endfunction()
cumemtrace_add_cuda_app(sim_visible_devices sim_visible_devices.cpp DRIVER)
target_include_directories(sim_visible_devices PRIVATE ${_sim_test_include})
add_dependencies(sim_visible_devices simcuda_runtime simcuda_driver)
sim_visible(unset 0,1,2)
sim_visible(reordered_then_invalid 2,0 CUDA_VISIBLE_DEVICES=2,0,7,1)
sim_visible(repeated 1 CUDA_VISIBLE_DEVICES=1,1,0)
sim_visible(empty none CUDA_VISIBLE_DEVICES=)
sim_visible(uuid_prefix 1 CUDA_VISIBLE_DEVICES=GPU-53696d43-5544-412d-6465-766963650001)
sim_visible(set_before_cuinit 2 SET_CUDA_VISIBLE_DEVICES=2)
# Host registration, peer access, profiler, managed hints, 2D copies, pointer
# attributes (tests/sim/driver/drv_host_peer.cpp, tests/sim/runtime/rt_misc.cpp).
sim_app(sim_host_peer DRIVER ENV SIMCUDA_DEVICE_COUNT=2 SIMCUDA_DEVICE_MEMORY=1GiB)
sim_app(sim_streams ENV SIMCUDA_ASYNC_LATENCY_US=2000)
sim_app(sim_free_sync ENV SIMCUDA_ASYNC_LATENCY_US=200000)
sim_app(sim_async_alloc ENV SIMCUDA_ASYNC_LATENCY_US=20000)
sim_app(sim_managed_host_pitch)
sim_app(sim_driver DRIVER ENV SIMCUDA_DEVICE_MEMORY=4GiB)
# Modules and kernels that compute nothing (tests/sim/driver/drv_module.cpp).
sim_app(sim_kernels_driver DRIVER ENV SIMCUDA_ASYNC_LATENCY_US=20000 SIMCUDA_DEVICE_MEMORY=1GiB)
sim_app(sim_contexts DRIVER ENV SIMCUDA_DEVICE_COUNT=2 SIMCUDA_DEVICE_MEMORY=1GiB)
# VMM memory is no file: RLIMIT_FSIZE and RLIMIT_NOFILE do not touch it
# (tests/sim/driver/drv_vmm.cpp).
sim_app(sim_vmm_backing DRIVER)
sim_app(sim_entry_points)
# Every toolkit libcuda.so export found through cuGetProcAddress, and the
# not-supported answers of unmodelled functions (the list is the toolkit's,
# written by nm when the test runs).
cumemtrace_add_cuda_app(sim_surface sim_surface.cpp DRIVER)
target_include_directories(sim_surface PRIVATE ${_sim_test_include})
add_dependencies(sim_surface simcuda_runtime simcuda_driver)
add_test(NAME sim_surface_proc_address COMMAND sh -c
  "${CMAKE_NM} -D --defined-only \"$1\" | awk '{print $3}' > \"$2.exports\" && exec \"$2\" \"$2.exports\""
  sh ${SIMCUDA_TOOLKIT_LIBCUDA} $<TARGET_FILE:sim_surface>)
set_tests_properties(sim_surface_proc_address PROPERTIES
  ENVIRONMENT "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR}" TIMEOUT 60 LABELS sim)
sim_app(sim_ptds DEFINES CUDA_API_PER_THREAD_DEFAULT_STREAM=1 ENV SIMCUDA_ASYNC_LATENCY_US=2000)
# The per-thread build must really reference the _ptds/_ptsz runtime symbols.
add_test(NAME sim_ptds_symbols COMMAND sh -c
  "nm -D --undefined-only \"$1\" > \"$1.syms\" && for s in cudaMemcpy_ptds cudaMemset_ptds cudaMemsetAsync_ptsz cudaMemcpyAsync_ptsz cudaStreamSynchronize_ptsz cudaMallocAsync_ptsz cudaFreeAsync_ptsz cudaEventRecord_ptsz cudaStreamQuery_ptsz cudaGetDriverEntryPoint_ptsz; do grep -q \"$s@libcudart.so.13\" \"$1.syms\" || { echo \"missing $s\"; exit 1; }; done"
  sh $<TARGET_FILE:sim_ptds>)
set_tests_properties(sim_ptds_symbols PROPERTIES LABELS sim)
sim_app(sim_reset ENV SIMCUDA_ASYNC_LATENCY_US=50000)
sim_app(sim_threads ENV SIMCUDA_MALLOC_LATENCY_US=5000 SIMCUDA_FREE_LATENCY_US=5000)
sim_app(sim_80gib ENV SIMCUDA_DEVICE_MEMORY=80GiB)
sim_app(sim_fork ENV SIMCUDA_ASYNC_LATENCY_US=20000)
sim_app(sim_fork_exit)
# Bad values: one warning each, defaults (16 GiB, 1 device).
sim_app(sim_env ARGS 17179869184 1 3
  ENV SIMCUDA_DEVICE_MEMORY=lots SIMCUDA_DEVICE_COUNT=two SIMCUDA_ASYNC_LATENCY_US=-5)
# Good values with units: no warning.
add_test(NAME sim_env_units COMMAND sim_env 1610612736 3 0)
set_tests_properties(sim_env_units PROPERTIES LABELS sim ENVIRONMENT
  "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR};SIMCUDA_DEVICE_MEMORY=1.5GiB;SIMCUDA_DEVICE_COUNT=3;SIMCUDA_MALLOC_LATENCY_US=0")

# Legacy CUDA IPC between two processes (tests/sim/driver/drv_ipc.cpp).
# ipc_share is a plain program with its own command line, meant to be run
# under cumemtrace as well; on the bare sim every buffer must be shared
# intact, through either API.
cumemtrace_add_cuda_app(ipc_share ipc_share.cpp DRIVER)
add_dependencies(ipc_share simcuda_runtime simcuda_driver)
foreach(_api runtime driver)
  add_test(NAME sim_ipc_share_${_api} COMMAND ipc_share --api ${_api})
  set_tests_properties(sim_ipc_share_${_api} PROPERTIES LABELS sim TIMEOUT 60
    ENVIRONMENT "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR}"
    FAIL_REGULAR_EXPRESSION "CORRUPT;refused=[1-9];corrupt=[1-9]")
endforeach()
# Refusal codes, address ranges, pointer attributes, the importer's mapping
# outliving the exporter's free, and fork.
sim_app(sim_ipc DRIVER ENV SIMCUDA_DEVICE_COUNT=2 SIMCUDA_DEVICE_MEMORY=1GiB TIMEOUT 60)

# Time (tests/sim/README.md, "Time"): the cost table SIMCUDA_COSTS, which
# calls wait for the device, and the simcuda_counters extension. One run per
# way of choosing the table: the shipped h100 by name, off, a file, and three
# bad values (one warning each, nothing charged).
cumemtrace_add_cuda_app(sim_costs sim_costs.cpp DRIVER)
target_include_directories(sim_costs PRIVATE ${_sim_test_include})
target_link_libraries(sim_costs PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(sim_costs simcuda_runtime simcuda_driver)
foreach(_mode h100 off file bad-name bad-call bad-json)
  set(_costs "")
  if(_mode STREQUAL "h100" OR _mode STREQUAL "off")
    set(_costs "SIMCUDA_COSTS=${_mode}")
  elseif(_mode STREQUAL "bad-name")
    set(_costs "SIMCUDA_COSTS=h101")
  endif()
  add_test(NAME sim_costs.${_mode} COMMAND sim_costs ${_mode})
  set_tests_properties(sim_costs.${_mode} PROPERTIES LABELS sim TIMEOUT 60 ENVIRONMENT
    "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR};SIMCUDA_ASYNC_LATENCY_US=20000;${_costs}")
endforeach()
# Device faults: memory given back under queued work (tests/sim/driver/drv_copy.cpp).
sim_app(sim_device_fault DRIVER ENV SIMCUDA_ASYNC_LATENCY_US=20000 TIMEOUT 60)
# The probe of the cost table: on a GPU (scripts/gpu-check.sh, sim.costs) the
# figures the table should hold; here, run once without a table (the sim's
# own time per call) and once charging the shipped h100 table, every median
# must come out at or above the table's figure and not far above the two
# together (tests/apps/check_sim_costs.py).
find_package(Python3 COMPONENTS Interpreter REQUIRED)
cumemtrace_add_cuda_app(sim_cost_probe sim_cost_probe.cpp DRIVER)
target_include_directories(sim_cost_probe PRIVATE ${_sim_test_include})
add_dependencies(sim_cost_probe simcuda_runtime simcuda_driver)
set(_probe_out ${CMAKE_CURRENT_BINARY_DIR}/sim_cost_probe)
add_test(NAME sim_cost_probe.h100 COMMAND sh -c
  "SIMCUDA_COSTS=off \"$1\" \"$2.off.json\" && SIMCUDA_COSTS=h100 \"$1\" \"$2.h100.json\" && \"$3\" \"$4\" \"$5\" \"$2.h100.json\" --baseline \"$2.off.json\""
  sh $<TARGET_FILE:sim_cost_probe> ${_probe_out}
  ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_sim_costs.py
  ${CMAKE_CURRENT_SOURCE_DIR}/../sim/costs/h100.json)
set_tests_properties(sim_cost_probe.h100 PROPERTIES LABELS sim TIMEOUT 120 ENVIRONMENT
  "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR}")
