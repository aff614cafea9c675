# Sanitizer builds of the code that is not injected (scripts/sanitize.sh runs
# them):
#   -DCUMEMTRACE_SANITIZE=address   AddressSanitizer + UndefinedBehaviorSanitizer
#   -DCUMEMTRACE_SANITIZE=thread    ThreadSanitizer
# Every C/C++ target of the tree gets the sanitizer: the pool, the preload's
# static core (unit-tested as ordinary code), the analyzer and its CLI, the
# simulated device, the test programs and the tests. The exception is
# libcumemtrace.so: it is injected into other people's programs, which are not
# built with a sanitizer, and it links its C++ runtime statically and
# interposes dlsym, which the sanitizer runtimes rely on. So here it is built
# plain, by a nested build of the same sources (cumemtrace_plain_preload()),
# and the tests preload that.
#
# GCC only: its sanitizer runtimes are shared libraries that every
# instrumented object names (NEEDED), so the simulated device's libraries,
# linked with -Wl,--no-undefined, link as they are. (clang puts the runtime
# into executables only.)
set(CUMEMTRACE_SANITIZE "" CACHE STRING
  "Build with sanitizers: address (ASan + UBSan) or thread (TSan); see scripts/sanitize.sh")
set_property(CACHE CUMEMTRACE_SANITIZE PROPERTY STRINGS "" address thread)

if(CUMEMTRACE_SANITIZE STREQUAL "")
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR NOT CMAKE_C_COMPILER_ID STREQUAL "GNU")
  message(FATAL_ERROR "CUMEMTRACE_SANITIZE needs GCC (the sanitizer runtimes as shared libraries)")
endif()
if(CUMEMTRACE_SANITIZE STREQUAL "address")
  # float-cast-overflow (an out-of-range double to integer conversion is
  # undefined) is not part of GCC's -fsanitize=undefined; the options and the
  # trace reader convert user-given numbers.
  set(cumemtrace_sanitize_flags -fsanitize=address,undefined,float-cast-overflow
    -fno-sanitize-recover=all -fno-omit-frame-pointer)
elseif(CUMEMTRACE_SANITIZE STREQUAL "thread")
  set(cumemtrace_sanitize_flags -fsanitize=thread)
else()
  message(FATAL_ERROR "CUMEMTRACE_SANITIZE=${CUMEMTRACE_SANITIZE}: expected address or thread")
endif()
foreach(flag IN LISTS cumemtrace_sanitize_flags)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:${flag}>)
  add_link_options(${flag})
endforeach()

# The plain build's directory. scripts/sanitize.sh gives its address and
# thread builds the same one (<prefix>-preload/), so that the second finds the
# library built; the nested build runs under a lock of that directory (flock),
# as two sanitizer builds may run at once.
set(CUMEMTRACE_PLAIN_PRELOAD_DIR "" CACHE PATH
  "Build directory of the plain libcumemtrace.so of a sanitizer build (default: <build>/preload-plain)")

# Defines the target cumemtrace_preload (libcumemtrace.so in the build tree's
# library directory, where `cumemtrace run` looks for it) as the product of a
# nested, unsanitized build of this source tree in preload-plain/ (or
# CUMEMTRACE_PLAIN_PRELOAD_DIR).
# A plain libcumemtrace.so built already, from the same sources (CI's main
# build, just before: scripts/sanitize.sh passes it when CI=true): copied
# instead of built again.
set(CUMEMTRACE_PLAIN_PRELOAD_LIBRARY "" CACHE FILEPATH
  "A plain libcumemtrace.so of this source tree to use instead of the nested build")

function(cumemtrace_plain_preload)
  set(plain_lib ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/libcumemtrace.so)
  if(CUMEMTRACE_PLAIN_PRELOAD_LIBRARY)
    add_custom_command(OUTPUT ${plain_lib}
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${CUMEMTRACE_PLAIN_PRELOAD_LIBRARY} ${plain_lib}
      DEPENDS ${CUMEMTRACE_PLAIN_PRELOAD_LIBRARY})
    add_custom_target(cumemtrace_plain_preload_build DEPENDS ${plain_lib})
    add_library(cumemtrace_preload MODULE IMPORTED GLOBAL)
    set_target_properties(cumemtrace_preload PROPERTIES IMPORTED_LOCATION ${plain_lib})
    add_dependencies(cumemtrace_preload cumemtrace_plain_preload_build)
    install(PROGRAMS ${plain_lib} DESTINATION ${CMAKE_INSTALL_LIBDIR})
    return()
  endif()
  include(ExternalProject)
  set(plain_dir ${CMAKE_BINARY_DIR}/preload-plain)
  if(CUMEMTRACE_PLAIN_PRELOAD_DIR)
    set(plain_dir ${CUMEMTRACE_PLAIN_PRELOAD_DIR})
  endif()
  set(lock)
  find_program(CUMEMTRACE_FLOCK flock)
  mark_as_advanced(CUMEMTRACE_FLOCK)
  if(CUMEMTRACE_FLOCK)
    set(lock ${CUMEMTRACE_FLOCK} ${plain_dir}.lock)
  endif()
  ExternalProject_Add(cumemtrace_plain_preload_build
    SOURCE_DIR ${CMAKE_SOURCE_DIR}
    BINARY_DIR ${plain_dir}
    # The steps' stamps stay in this build tree.
    PREFIX ${CMAKE_BINARY_DIR}/preload-plain-external
    CONFIGURE_COMMAND ${lock} ${CMAKE_COMMAND} -G ${CMAKE_GENERATOR}
      -S ${CMAKE_SOURCE_DIR} -B ${plain_dir}
      -DCMAKE_BUILD_TYPE=RelWithDebInfo
      -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DCMAKE_INSTALL_LIBDIR=${CMAKE_INSTALL_LIBDIR}
      -DCUMEMTRACE_WERROR=${CUMEMTRACE_WERROR}
      -DCUMEMTRACE_BUILD_TESTS=OFF
    BUILD_COMMAND ${lock} ${CMAKE_COMMAND} --build ${plain_dir} --target cumemtrace_preload
    # The nested build decides itself what is out of date.
    BUILD_ALWAYS ON
    INSTALL_COMMAND ${lock} ${CMAKE_COMMAND} -E copy_if_different
      ${plain_dir}/${CMAKE_INSTALL_LIBDIR}/libcumemtrace.so ${plain_lib}
    BUILD_BYPRODUCTS ${plain_lib})
  add_library(cumemtrace_preload MODULE IMPORTED GLOBAL)
  set_target_properties(cumemtrace_preload PROPERTIES IMPORTED_LOCATION ${plain_lib})
  add_dependencies(cumemtrace_preload cumemtrace_plain_preload_build)
  install(PROGRAMS ${plain_lib} DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

# The LeakSanitizer suppressions name the toolkit's libcudart.so by its
# directory, known once the top-level CMakeLists has found the toolkit.
function(cumemtrace_write_sanitizer_suppressions)
  configure_file(${CMAKE_SOURCE_DIR}/tests/sanitizer/lsan.supp.in
    ${CMAKE_BINARY_DIR}/sanitizer/lsan.supp @ONLY)
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL cumemtrace_write_sanitizer_suppressions)
