# Programs that exercise libcumemtrace.so's caching pool on the simulated
# device (tests/integration/pool_preload_test.cpp).
foreach(app pool_reuse_after_free pool_fragmentation pool_reset)
  cumemtrace_add_cuda_app(${app} ${app}.cpp)
  target_include_directories(${app} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/../sim/testing)
endforeach()
