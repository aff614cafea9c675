# Programs that exercise libcumemtrace.so's caching pool on the simulated
# device (tests/integration/pool_preload_test.cpp).
foreach(app pool_reuse_after_free pool_fragmentation pool_reset pool_give_back pool_destroyed_stream pool_thread_streams pool_mempool_stats)
  cumemtrace_add_cuda_app(${app} ${app}.cpp)
  target_include_directories(${app} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/../sim/testing)
endforeach()

# A stand-in for PyTorch's caching allocator, named as PyTorch's library is
# (fake_torch/libc10_cuda.so), and a program that allocates through it or
# itself, then asks cuMemCreate for what it freed.
add_library(fake_c10_cuda SHARED fake_caching_allocator/caching_allocator.cpp)
target_link_libraries(fake_c10_cuda PRIVATE CUDA::cudart cumemtrace_warnings)
set_target_properties(fake_c10_cuda PROPERTIES OUTPUT_NAME c10_cuda SKIP_BUILD_RPATH ON
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/apps/fake_torch)
cumemtrace_add_cuda_app(pool_other_routes pool_other_routes.cpp DRIVER)
target_link_libraries(pool_other_routes PRIVATE fake_c10_cuda)
# Found by the loader without LD_LIBRARY_PATH (which names the sim).
set_target_properties(pool_other_routes PROPERTIES BUILD_RPATH "${CMAKE_BINARY_DIR}/tests/apps/fake_torch"
  SKIP_BUILD_RPATH OFF)
# What cuMemGetAddressRange and pointer attributes say of pool memory.
cumemtrace_add_cuda_app(pool_ranges pool_ranges.cpp DRIVER)
