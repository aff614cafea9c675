# Build time. A from-scratch build spends most of its time compiling the
# GoogleTest executables: small files whose time goes to GoogleTest,
# nlohmann/json and the code their macros and templates expand to. CI builds
# from scratch three times (scripts/build.sh, then scripts/sanitize.sh's two
# builds) and sets these (a build you edit in keeps the defaults):
#
#   CUMEMTRACE_TEST_COMPILE_OPTIONS   options added to the test executables'
#       files, after the build type's. CI's main build passes -O0 -g1 (line
#       tables and function names, no variables or types; no optimizing of
#       test bodies nobody times: a third less time than -O1, which was a
#       third less than -O2 -g; GCC 12 warns of nothing more there, which -Og
#       does not manage, see scripts/build.sh); the sanitizer builds pass
#       -Og (the sanitizers check the same code, half the time spent
#       optimizing it; the code under test keeps the build's -O1).
#   CUMEMTRACE_PCH=ON (the default)   GoogleTest, nlohmann/json and the
#       large standard headers the tests use, precompiled once per build
#       directory (target cumemtrace_test_pch) and used by every GoogleTest
#       executable (REUSE_FROM: their compile options are the same, see
#       cumemtrace_test_build). Parsing them is 3 to 4 s of each test
#       file's 5 to 20 (most of the rest is optimizing the test bodies).
#       CI's main-build options, -j1, CPU seconds (2026-11-27): the files of
#       preload_unit_tests 188 -> 159, integration_tests 194 -> 155,
#       analyzer_unit_tests 321 -> 275, plus 12 for the header, once. The
#       sanitizer builds had one such header per executable (8 in the
#       address build, 61 s); they now build one.
#       Six files compile without it (SKIP_PRECOMPILE_HEADERS, set beside
#       their targets): with a precompiled header GCC 12 at -O2 inlines
#       std::string differently and gives false positives it does not give
#       without one (-Wstringop-overflow in preload's trace/writer_test.cpp,
#       -Warray-bounds on std::string's memcpy in five others; the same with
#       a header of GoogleTest and nlohmann/json alone), and the main build's
#       warnings are errors. A build directory made before this option was
#       on keeps it off (the cache): a new test file that gives one only in
#       CI's fresh build needs the same property.
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
    # sloppiness: without pch_defines and time_macros ccache compiles every
    # file that uses the precompiled header (CUMEMTRACE_PCH) but caches none
    # of them ("Precompiled headers" in ccache's manual). The header reaches
    # the compiler by -include (CMake's way), which ccache needs; the .gch
    # file is hashed, so a changed header still misses.
    set(cumemtrace_launcher ${CUMEMTRACE_ENV_PROGRAM} CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}
      CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros
      ${CUMEMTRACE_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${cumemtrace_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${cumemtrace_launcher})
  endif()
endif()

#   CUMEMTRACE_UNITY_TESTS=ON (the default)   the files of each GoogleTest
#       executable are compiled CUMEMTRACE_UNITY_BATCH (8) at a time, as one
#       file (CMake's unity build). With the precompiled header a test file's
#       time goes mostly to what GoogleTest's macros and nlohmann/json's
#       templates expand to, and each file expanded them again: five of
#       analyzer_unit_tests' files in CI's address build, 47 s one by one,
#       28 s as one (2026-11-29). A test file's helpers therefore need names
#       no other file of its executable uses (or live once, in a shared
#       header), and each file includes what it uses, whichever files share
#       its batch (a unity build with CUMEMTRACE_UNITY_BATCH=0, every file of
#       a target as one, finds clashing names). Files with options of
#       their own (COMPILE_OPTIONS, SKIP_PRECOMPILE_HEADERS) compile alone.
option(CUMEMTRACE_UNITY_TESTS "Compile each test executable's files in batches (unity build)" ON)
set(CUMEMTRACE_UNITY_BATCH 8 CACHE STRING
  "Files per unity batch of the test executables (0: all of a target's files as one)")

option(CUMEMTRACE_PCH "Precompile GoogleTest, nlohmann/json and large standard headers for the test executables" ON)
set(CUMEMTRACE_TEST_COMPILE_OPTIONS "" CACHE STRING
  "Compile options added to the test executables (e.g. -g1; see cmake/BuildSpeed.cmake)")

# The precompiled header: stable headers only (a change to one rebuilds every
# test file), the heavy ones most test files include. Tests must still
# include what they use: a build with -DCUMEMTRACE_PCH=OFF checks it.
set(CUMEMTRACE_TEST_PCH_HEADERS <gtest/gtest.h> <nlohmann/json.hpp>
  <algorithm> <chrono> <filesystem> <fstream> <functional> <map> <optional>
  <random> <regex> <set> <sstream> <string> <thread> <unordered_map> <vector>)

#   cumemtrace_test_build(TARGET)
# For a GoogleTest executable: CUMEMTRACE_TEST_COMPILE_OPTIONS, and with
# CUMEMTRACE_PCH the shared precompiled header. It is built by
# cumemtrace_test_pch, an empty executable made the way the test executables
# are (the same build type, sanitizer, warning and test options, -fPIE,
# GoogleTest's definitions), so that GCC accepts it for all of them: a header
# precompiled with other options is not used (-Winvalid-pch, which CMake
# adds, says so; an error where warnings are).
#
# In the address build (cmake/Sanitize.cmake) the test executables' own files
# get AddressSanitizer without UndefinedBehaviorSanitizer: UBSan instruments
# every expansion of GoogleTest's macros and nlohmann/json's templates, and
# took more than half of a test file's compile time (a unity batch of
# analyzer_unit_tests: 114 s with both, 51 s with ASan alone, 2026-11-29).
# The code under test (the pool, the preload's core, the analyzer, the sim)
# keeps both; a test body's own memory errors are still ASan's.
set(cumemtrace_test_only_options ${CUMEMTRACE_TEST_COMPILE_OPTIONS})
if(CUMEMTRACE_SANITIZE STREQUAL "address")
  list(APPEND cumemtrace_test_only_options -fno-sanitize=undefined -fno-sanitize=float-cast-overflow)
endif()

function(cumemtrace_test_build target)
  if(cumemtrace_test_only_options)
    target_compile_options(${target} PRIVATE ${cumemtrace_test_only_options})
  endif()
  if(CUMEMTRACE_UNITY_TESTS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
      UNITY_BUILD_BATCH_SIZE ${CUMEMTRACE_UNITY_BATCH})
    # GCC takes every file a unity file includes for a header, and warns
    # where a test's fixture in an anonymous namespace is the base of the
    # TEST_F class GoogleTest defines outside it (-Wsubobject-linkage: meant
    # for a header's types, which each file would see differently).
    target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
  endif()
  if(NOT CUMEMTRACE_PCH)
    return()
  endif()
  if(NOT TARGET cumemtrace_test_pch)
    find_package(nlohmann_json 3 REQUIRED)
    set(source ${CMAKE_BINARY_DIR}/cumemtrace_test_pch.cpp)
    if(NOT EXISTS ${source})
      file(WRITE ${source} "// Builds the test executables' precompiled header (cmake/BuildSpeed.cmake).\n")
    endif()
    add_executable(cumemtrace_test_pch EXCLUDE_FROM_ALL ${source})
    target_link_libraries(cumemtrace_test_pch PRIVATE cumemtrace_warnings
      nlohmann_json::nlohmann_json GTest::gtest_main)
    if(cumemtrace_test_only_options)
      target_compile_options(cumemtrace_test_pch PRIVATE ${cumemtrace_test_only_options})
    endif()
    target_precompile_headers(cumemtrace_test_pch PRIVATE ${CUMEMTRACE_TEST_PCH_HEADERS})
  endif()
  target_precompile_headers(${target} REUSE_FROM cumemtrace_test_pch)
endfunction()
