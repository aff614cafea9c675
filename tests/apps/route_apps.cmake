# Programs that each take one route to device memory (issue 3). They write
# a manifest of what they did; tests/integration/routes_test.cpp runs them
# under cumemtrace on the simulated device and checks the trace against it.
cumemtrace_add_cuda_app(route_runtime route_runtime.cpp)
cumemtrace_add_cuda_app(route_driver route_driver.cpp DRIVER)
cumemtrace_add_cuda_app(route_entry_points route_entry_points.cpp DRIVER)
target_link_libraries(route_entry_points PRIVATE ${CMAKE_DL_LIBS})
cumemtrace_add_cuda_app(route_stream_ordered route_stream_ordered.cpp DRIVER)
cumemtrace_add_cuda_app(route_vmm route_vmm.cpp DRIVER)
cumemtrace_add_cuda_app(route_semantics route_semantics.cpp)
cumemtrace_add_cuda_app(route_devices route_devices.cpp)
cumemtrace_add_cuda_app(route_threads route_threads.cpp)

# Programs that link no CUDA library, or another runtime than the toolkit's
# shared one; same output directory, no build RPATH (the test's
# LD_LIBRARY_PATH chooses the libraries, as for a user's binary).
function(route_app name)
  add_executable(${name} ${ARGN})
  target_include_directories(${name} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(${name} PRIVATE cumemtrace_warnings)
  set_target_properties(${name} PROPERTIES SKIP_BUILD_RPATH ON
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/apps)
endfunction()

# A framework: dlopen + dlsym only.
route_app(route_framework route_framework.cpp)
target_link_libraries(route_framework PRIVATE ${CMAKE_DL_LIBS})
# The runtime linked statically (-cudart static): the sim's, as an archive.
route_app(route_static_runtime route_static_runtime.cpp)
target_link_libraries(route_static_runtime PRIVATE simcuda_runtime_static)
# NVIDIA's runtime, static and shared, against the sim's driver.
route_app(route_real_runtime_static route_real_runtime.cpp)
target_link_libraries(route_real_runtime_static PRIVATE CUDA::cudart_static)
cumemtrace_add_cuda_app(route_real_runtime_shared route_real_runtime.cpp)

# dlsym's caller identity: small libraries in tests/apps/probes (the test
# puts that directory on LD_LIBRARY_PATH).
set(_probes ${CMAKE_BINARY_DIR}/tests/apps/probes)
function(route_probe name type source)
  add_library(${name} ${type} dlsym_probes/${source})
  target_link_libraries(${name} PRIVATE cumemtrace_warnings ${CMAKE_DL_LIBS})
  set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${_probes} SKIP_BUILD_RPATH ON)
endfunction()
route_probe(route_probe_a SHARED probe_a.cpp)
route_probe(route_probe_b SHARED probe_b.cpp)
route_probe(route_probe_local_dep SHARED probe_local_dep.cpp)
route_probe(route_probe_local MODULE probe_local.cpp)
target_link_options(route_probe_local PRIVATE -Wl,--no-as-needed)  # keep the unreferenced dependency
target_link_libraries(route_probe_local PRIVATE route_probe_local_dep)
route_probe(route_probe_old_abi SHARED probe_old_abi.cpp)
route_probe(route_probe_early MODULE probe_early.cpp)
cumemtrace_add_cuda_app(route_dlsym route_dlsym.cpp DRIVER)
# probe_a before probe_b in the program's dependencies, both kept.
target_link_options(route_dlsym PRIVATE -Wl,--no-as-needed)
target_link_libraries(route_dlsym PRIVATE route_probe_a route_probe_b route_probe_old_abi ${CMAKE_DL_LIBS})
