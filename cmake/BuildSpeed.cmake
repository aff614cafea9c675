# Build time. A from-scratch build spends most of its time compiling the
# GoogleTest executables: small files whose time goes to GoogleTest,
# nlohmann/json and the code their macros and templates expand to. CI builds
# from scratch three times (scripts/build.sh, then scripts/sanitize.sh's two
# builds) and sets these (a build you edit in keeps the defaults):
#
#   CUMEMTRACE_TEST_COMPILE_OPTIONS   options added to the test executables'
#       files, after the build type's. CI's main build passes -g1 (line
#       tables and function names, no variables or types: the same code and
#       the same warnings, a quarter less time); the sanitizer builds pass
#       -Og (the sanitizers check the same code, half the time spent
#       optimizing it; the code under test keeps the build's -O1).
#   CUMEMTRACE_PCH=ON   GoogleTest and nlohmann/json precompiled once per
#       test executable. Only the sanitizer builds use it: with a precompiled
#       header GCC 12 gives warnings that it does not give without one (a
#       -Wstringop-overflow in tests/unit/preload/trace/writer_test.cpp), and
#       the main build's warnings are errors.
#
# (The command line, analyzer/CMakeLists.txt, is compiled as one unity file
# in every build.)
#   CUMEMTRACE_CCACHE=ON (the default)   every compile goes through ccache
#       when it is installed (scripts/setup.sh installs it): a rebuild after a
#       branch switch, or in a second build directory beside the first (paths
#       under the source tree are hashed relative to the build directory),
#       compiles only what changed. CI turns it off: on a clean machine every
#       compile is a miss, which costs a second preprocessing (a CI-like run,
#       2026-11-27: 7 hits in 672 cacheable compiles), and the one library
#       its builds share is copied instead (CUMEMTRACE_PLAIN_PRELOAD_LIBRARY,
#       cmake/Sanitize.cmake).
option(CUMEMTRACE_CCACHE "Compile through ccache when it is installed" ON)
if(CUMEMTRACE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(CUMEMTRACE_CCACHE_PROGRAM ccache)
  find_program(CUMEMTRACE_ENV_PROGRAM env)
  mark_as_advanced(CUMEMTRACE_CCACHE_PROGRAM CUMEMTRACE_ENV_PROGRAM)
  if(CUMEMTRACE_CCACHE_PROGRAM AND CUMEMTRACE_ENV_PROGRAM)
    # base_dir: absolute paths below it become relative ones; nohashdir: the
    # working directory (a build directory) is not hashed with -g.
    set(cumemtrace_launcher ${CUMEMTRACE_ENV_PROGRAM} CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}
      CCACHE_NOHASHDIR=1 ${CUMEMTRACE_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${cumemtrace_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${cumemtrace_launcher})
  endif()
endif()

option(CUMEMTRACE_PCH "Precompile GoogleTest and nlohmann/json for the test executables" OFF)
set(CUMEMTRACE_TEST_COMPILE_OPTIONS "" CACHE STRING
  "Compile options added to the test executables (e.g. -g1; see cmake/BuildSpeed.cmake)")

#   cumemtrace_test_build(TARGET [HEADER...])
# For a test executable: CUMEMTRACE_TEST_COMPILE_OPTIONS, and with
# CUMEMTRACE_PCH the HEADERs (<gtest/gtest.h>...) precompiled.
function(cumemtrace_test_build target)
  if(CUMEMTRACE_TEST_COMPILE_OPTIONS)
    target_compile_options(${target} PRIVATE ${CUMEMTRACE_TEST_COMPILE_OPTIONS})
  endif()
  if(CUMEMTRACE_PCH AND ARGN)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()
