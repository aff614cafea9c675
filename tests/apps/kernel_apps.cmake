# Programs with kernels, compiled by nvcc as users compile theirs (issue 20,
# item 6), run on the simulated device: kernels compute nothing there, every
# allocation, copy and stream step is the program's own.
#
# kernel_train.cu is compiled once (nvcc -c: device code for sm_90, the
# sim's architecture and the H100's, host code by the build's C++ compiler
# with its warning flags) and the object is linked twice by the build's
# linker, as nvcc would link it:
#   kernel_train_shared  -cudart shared: the toolkit's libcudart.so.13, which
#                        the test's LD_LIBRARY_PATH replaces with the sim's;
#   kernel_train_static  -cudart none + the sim's runtime archive
#                        (simcuda_runtime_static), standing in for
#                        -cudart static (NVIDIA's archive cannot run on the
#                        sim; see tests/sim/README.md).
# tests/integration/kernel_apps_test.cpp traces both and checks them
# against the manifests they write.
set(_kernel_src ${CMAKE_CURRENT_SOURCE_DIR}/kernel_train.cu)
set(_kernel_obj ${CMAKE_CURRENT_BINARY_DIR}/kernel_train.cu.o)
set(_kernel_host_flags -fPIC -Wall -Wextra)
if(CUMEMTRACE_WERROR)
  list(APPEND _kernel_host_flags -Werror)
endif()
list(JOIN _kernel_host_flags "," _kernel_host_flags)
add_custom_command(OUTPUT ${_kernel_obj}
  COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} -c -O2 -g -arch=sm_90 -ccbin ${CMAKE_CXX_COMPILER}
    -Xcompiler=${_kernel_host_flags} -I${CMAKE_CURRENT_SOURCE_DIR} -o ${_kernel_obj} ${_kernel_src}
  DEPENDS ${_kernel_src} ${CMAKE_CURRENT_SOURCE_DIR}/route_manifest.h
  COMMENT "nvcc kernel_train.cu"
  VERBATIM)
set_source_files_properties(${_kernel_obj} PROPERTIES EXTERNAL_OBJECT ON GENERATED ON)

function(kernel_app name)
  add_executable(${name} ${_kernel_obj})
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE CXX SKIP_BUILD_RPATH ON
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/apps)
  target_link_libraries(${name} PRIVATE ${ARGN} ${CMAKE_DL_LIBS})
endfunction()
kernel_app(kernel_train_shared CUDA::cudart)
kernel_app(kernel_train_static simcuda_runtime_static)

# graph_capture.cu (issue 31): capture with memory nodes and relaunch over
# stamped buffers, capture-mode rules; run bare on the sim and under the
# caching pool (its own check: every stamp intact, exit 0).
set(_graph_src ${CMAKE_CURRENT_SOURCE_DIR}/graph_capture.cu)
set(_graph_obj ${CMAKE_CURRENT_BINARY_DIR}/graph_capture.cu.o)
add_custom_command(OUTPUT ${_graph_obj}
  COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} -c -O2 -g -arch=sm_90 -ccbin ${CMAKE_CXX_COMPILER}
    -Xcompiler=${_kernel_host_flags} -I${PROJECT_SOURCE_DIR}/tests/sim/include -o ${_graph_obj} ${_graph_src}
  DEPENDS ${_graph_src} ${PROJECT_SOURCE_DIR}/tests/sim/include/simcuda_counters.h
  COMMENT "nvcc graph_capture.cu"
  VERBATIM)
set_source_files_properties(${_graph_obj} PROPERTIES EXTERNAL_OBJECT ON GENERATED ON)
add_executable(graph_capture ${_graph_obj})
set_target_properties(graph_capture PROPERTIES LINKER_LANGUAGE CXX SKIP_BUILD_RPATH ON
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/apps)
target_link_libraries(graph_capture PRIVATE CUDA::cudart ${CMAKE_DL_LIBS})
add_test(NAME graph_capture.bare COMMAND graph_capture)
set_tests_properties(graph_capture.bare PROPERTIES ENVIRONMENT "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR}")
# Under the preload, with the caching pool and passthrough (every request
# to the real call: relaunches over memory the driver, not the pool, handed out).
foreach(_mode caching passthrough)
  add_test(NAME graph_capture.${_mode} COMMAND graph_capture)
  set_tests_properties(graph_capture.${_mode} PROPERTIES ENVIRONMENT
    "LD_LIBRARY_PATH=${SIMCUDA_LIBRARY_DIR};LD_PRELOAD=$<TARGET_FILE:cumemtrace_preload>;CUMEMTRACE_POOL=${_mode};CUMEMTRACE_OUTPUT=${CMAKE_CURRENT_BINARY_DIR}/graph_capture.${_mode}.trace")
endforeach()

# The trace of graph_capture has its graph memory (issue 31): checked
# against what the program did, under both pools.
foreach(pool caching passthrough)
  add_test(NAME graph_capture.trace_${pool} COMMAND ${CMAKE_COMMAND}
    -DAPP=$<TARGET_FILE:graph_capture> -DCUMEMTRACE=$<TARGET_FILE:cumemtrace>
    -DPRELOAD=$<TARGET_FILE:cumemtrace_preload> -DSIM_DIR=${SIMCUDA_LIBRARY_DIR} -DPOOL=${pool}
    -DOUT=${CMAKE_CURRENT_BINARY_DIR}/graph_capture.${pool}.jsonl
    -P ${CMAKE_CURRENT_SOURCE_DIR}/check_graph_trace.cmake)
endforeach()
