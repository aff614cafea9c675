#!/usr/bin/env bash
# Builds the code that is not injected (the pool, the trace format, the
# preload's core, the analyzer and its CLI, the simulated device, the test
# programs and the tests) with sanitizers and runs the unit and integration
# tests there; libcumemtrace.so itself stays plain (cmake/Sanitize.cmake says
# why). Fails on a failing test or on any sanitizer report, even one from a
# process whose exit status a test ignores: every report is also written to
# <build>/sanitizer-logs/, which must stay empty.
#   scripts/sanitize.sh                 both: address (ASan+UBSan), then thread (TSan)
#   scripts/sanitize.sh address|thread  one of them
#   scripts/sanitize.sh thread -R pool  ctest arguments after the sanitizer
# Build directories: build-asan/ and build-tsan/, and build-preload/ for the
# plain libcumemtrace.so both use (CUMEMTRACE_SANITIZE_BUILD_PREFIX changes the
# "build" part). GCC, like the main build.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${CUMEMTRACE_SANITIZE_BUILD_PREFIX:-$root/build}

kinds=(address thread)
if [[ $# -gt 0 && $1 != -* ]]; then
  kinds=("$1")
  shift
fi
for kind in "${kinds[@]}"; do
  [[ $kind == address || $kind == thread ]] ||
    { echo "sanitize: unknown sanitizer '$kind' (address or thread)" >&2; exit 2; }
done

"$root/scripts/setup.sh" >&2
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc)
# The nested build of the plain libcumemtrace.so runs under the outer one.
export CMAKE_BUILD_PARALLEL_LEVEL=$jobs

run_one() {
  local kind=$1; shift
  local build suffix
  case $kind in
    address) suffix=asan ;;
    thread) suffix=tsan ;;
  esac
  build=$prefix-$suffix
  local start=$SECONDS
  echo "sanitize: $kind: building in $build" >&2
  # -O1 -g1: fast enough to build and run, line numbers in every report. No
  # NDEBUG: assertions stay on. Warnings are the main build's job (GCC warns
  # differently on instrumented code), so no -Werror here. The test
  # executables: -Og and precompiled headers, which halve their build time
  # (cmake/BuildSpeed.cmake); the code they test keeps -O1. The plain
  # libcumemtrace.so is built once for both sanitizers, in <prefix>-preload/
  # (cmake/Sanitize.cmake).
  # In CI, scripts/test.sh has just built the main tree from these sources:
  # its libcumemtrace.so is the plain one, used as it is; and ccache is off
  # there, as in build.sh (cmake/BuildSpeed.cmake says why).
  local -a plain=(-DCUMEMTRACE_PLAIN_PRELOAD_DIR="$prefix-preload")
  local main_lib
  main_lib=$(ls "${CUMEMTRACE_BUILD_DIR:-$root/build}"/lib*/libcumemtrace.so 2>/dev/null | head -1 || true)
  if [[ ${CI:-} == true ]]; then
    plain+=(-DCUMEMTRACE_CCACHE=OFF)
    [[ -n $main_lib ]] && plain+=(-DCUMEMTRACE_PLAIN_PRELOAD_LIBRARY="$main_lib")
    # ThreadSanitizer checks no analyzer code (below): its tests run the main
    # build's plain `cumemtrace` too (analyzer/CMakeLists.txt).
    local main_cli=${CUMEMTRACE_BUILD_DIR:-$root/build}/bin/cumemtrace
    [[ $kind == thread && -x $main_cli ]] && plain+=(-DCUMEMTRACE_PLAIN_CLI="$main_cli")
  fi
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
      -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
      -DCMAKE_C_FLAGS="-O1 -g1" -DCMAKE_CXX_FLAGS="-O1 -g1" \
      -DCUMEMTRACE_PCH=ON -DCUMEMTRACE_TEST_COMPILE_OPTIONS=-Og "${plain[@]}" \
      -DCUMEMTRACE_SANITIZE="$kind" >&2 || return 1
  fi
  # ASan+UBSan: everything. TSan finds races between threads only, and the
  # analyzer (CLI included) runs on one thread: its unit, golden and HTML
  # tests are not run there; the tests whose code runs on several threads
  # are: the pool, the preload's core (writer, flush thread) and what it
  # shares with the analyzer (contract/: the line builder and warnings of
  # every thread), the simulated device (stream workers) and the programs
  # under cumemtrace on it.
  local -a targets=() select=()
  if [[ $kind == thread ]]; then
    # (demo_training_loop: the installation test installs it.)
    targets=(pool_unit_tests preload_unit_tests contract_unit_tests integration_tests demo_training_loop)
    # The programs of the simulated device's own tests (tests/apps/sim_apps.cmake).
    while read -r name; do targets+=("$name"); done < <(
      ninja -C "$build" -t targets all | sed -n 's/^\(sim_[A-Za-z0-9_]*\): phony$/\1/p')
    # Not run, besides the analyzer's import tests and the workloads' replays
    # (import_replay_integration_tests, one thread of ours; not built here):
    #  - Survive.ExitFromDestructorsHandlersAndOtherThreads: in its
    #    main-pthread-exit case the process never ends, because TSan's own
    #    background thread outlives every program thread (reproduced without
    #    cumemtrace: exit_paths main-pthread-exit under TSan alone).
    #  - RunOptions.SignalSentToTheLauncherEndsTheProgramAndItsTrace: GCC 12's
    #    TSan runs a signal handler only when the thread leaves an intercepted
    #    call, and its waitpid is not one that waits for signals; the launcher's
    #    handler (SA_RESTART) never runs, so the signal is never forwarded.
    #  - BadOptions.*: every bad value of every option, each a program run
    #    (two minutes of the TSan run). The option table is read once, on one
    #    thread, in the plain libcumemtrace.so that TSan does not instrument;
    #    the plain and ASan runs check them.
    #  - sim_fork_exit and Processes.ForksWhileTheParentWritesNeverDeadlockOrLeak:
    #    they fork while other threads run, which ThreadSanitizer does not
    #    support (a lock of its runtime held by a thread that is gone in the
    #    child: the child hangs in exit()). The plain and ASan runs check them.
    select=(-R '^(pool\.|preload\.|contract\.|integration\.|sim_)'
      -E '^(integration\.((SeedsWorkload|SeedsAtNinetyPercent|SeedsAtNinetySevenPercent|TorchSnapshots|VarlenWorkloads|Shapes/VarlenWorkload|Workloads/StepLoop)\..*|Survive\.ExitFromDestructorsHandlersAndOtherThreads|RunOptions\.SignalSentToTheLauncherEndsTheProgramAndItsTrace|Processes\.ForksWhileTheParentWritesNeverDeadlockOrLeak|BadOptions\..*)|sim_fork_exit)$')
  else
    # Not run: it measures the analyzer's resident memory, which ASan's
    # shadow and its quarantine of freed memory inflate by design. Nor the
    # python.* tests: they run the machine's interpreters (not instrumented)
    # with the plain libcumemtrace.so, so ASan would check only the sim's
    # side, which the C++ programs already cover (they pass here, with no
    # report, when run by hand); the code they exercise (stacks/python_*)
    # runs under both sanitizers in preload_unit_tests. (python.pytest.*,
    # the pytest plugin's, likewise: the query API they reach is
    # preload_unit_tests' Queries.* there.)
    # clients.* tests: other programs reading our outputs (Chromium through
    # playwright, speedscope, DuckDB, pandas, tmux); the analyzer code that
    # wrote those outputs runs here in its own unit and golden tests, and
    # each client's start-up (Chromium's is seconds) is not worth CI's time.
    # numba.* tests: Numba's suite on the sim, a client like those (and not
    # built here: tests/integration/CMakeLists.txt).
    # TorchSnapshots: the six real PyTorch snapshots imported, replayed and
    # advised on (some 75 s of CPU here, of CI's limit); the importer, the
    # replay, advise and the pool run here on smaller traces and pickles in
    # import_replay_unit_tests, the pool's unit tests and the golden tests.
    # Workloads/StepLoop: the workloads on a busy device for the counts of
    # waits and page moves (issue 30); the pool code they run is checked
    # here by its unit tests and the Varlen/Seeds runs, and the sim's slower
    # instrumented device only makes them longer.
    # (The programs that fork while other threads run and whose children
    # exit() turn off LeakSanitizer's at-exit check for themselves:
    # tests/apps/forks_under_lsan.h says why.)
    select=(-E '^(analyzer\.Memory\.PeakResidentMemoryDoesNotGrowWithTheTrace|python\..*|clients\..*|numba\..*|integration\.Workloads/StepLoop\..*|integration\.TorchSnapshots\..*)$')
  fi
  local -a target_args=()
  for t in "${targets[@]}"; do target_args+=(--target "$t"); done
  # (`|| return`: errexit does not apply inside a function called with ||.)
  cmake --build "$build" -j"$jobs" "${target_args[@]}" >&2 || return 1

  local logs=$build/sanitizer-logs
  rm -rf "$logs"
  mkdir -p "$logs"
  # log_path: reports go to files (and not to stderr, which some tests read);
  # the check below turns any of them into a failure. One file name per
  # runtime: GCC's UBSan runtime is not ASan's.
  local common="print_summary=1"
  # verify_asan_link_order=0: the integration tests preload the plain
  # libcumemtrace.so ahead of the program's libasan.so. Of the functions ASan
  # intercepts it defines only _exit (exports.map), and it calls the next
  # definition, ASan's, so both run whatever the order.
  # handle_segv/sigbus/sigfpe=0: the robustness tests fault on purpose and
  # check that the program dies of the signal, as without cumemtrace; ASan's
  # handler would make that exit(1). (ASan finds bad accesses before they
  # fault; a fault it does not catch still fails its test.)
  local asan="$common:log_path=$logs/asan:verify_asan_link_order=0:strict_string_checks=1"
  asan+=":detect_stack_use_after_return=1:check_initialization_order=1"
  asan+=":handle_segv=0:handle_sigbus=0:handle_sigfpe=0"
  # intercept_tls_get_addr=0: GCC 12's LeakSanitizer records a bogus
  # dynamic-TLS range (DTLS at 0x483, 64 GiB long) for the main thread once
  # a library opened with dlopen (libunwind, as the preload opens it) has
  # used its TLS there, and its tracer then faults at exit ("Tracer caught
  # signal 11"): the FrameWalker tests passed but their processes failed.
  # Without the interceptor LSan does not scan dynamic TLS, which can only
  # add leak reports (a block reachable only from there), never hide one.
  asan+=":intercept_tls_get_addr=0"
  # handle_segv=0: as for ASan. die_after_fork=0: the preload's core, and
  # the preload in the integration tests, start their writer thread again in
  # a forked child, which TSan otherwise refuses ("starting new threads after
  # multi-threaded fork is not supported").
  local tsan="$common:log_path=$logs/tsan:second_deadlock_stack=1:handle_segv=0:die_after_fork=0"
  tsan+=":suppressions=$root/tests/sanitizer/tsan.supp"
  # SOAK_SECONDS=20: the soak's minute (tests/integration/soak_test.cpp) is the
  # plain run's; here a third of it runs the same mix of threads and forks.
  local -a env=(
    env -u CUMEMTRACE_BUILD_DIR -u CUMEMTRACE_FUZZ_SECONDS -u CUMEMTRACE_FUZZ_BUILD_DIR
    -u CUMEMTRACE_SANITIZE_BUILD_PREFIX
    "UBSAN_OPTIONS=$common:log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
    "TSAN_OPTIONS=$tsan"
    "LSAN_OPTIONS=suppressions=$build/sanitizer/lsan.supp"
    SOAK_SECONDS=20
  )
  local -a run_ctest=(ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600)
  local status=0
  "${env[@]}" "ASAN_OPTIONS=$asan:detect_leaks=1" "${run_ctest[@]}" "${select[@]}" "$@" || status=$?

  local reports
  # Every report ends with a SUMMARY line; a file without one holds a note
  # (LeakSanitizer in a forked child: "Running thread ... was not suspended").
  reports=$(grep -rl '^SUMMARY: ' "$logs" | sort || true)
  if [[ -n $reports ]]; then
    echo "sanitize: $kind: sanitizer reports:" >&2
    while read -r f; do
      echo "==== $f" >&2
      cat "$f" >&2
    done <<<"$reports"
    status=1
  fi
  echo "sanitize: $kind: $( ((status == 0)) && echo clean || echo FAILED ) in $((SECONDS - start)) s" >&2
  return "$status"
}

failed=0
for kind in "${kinds[@]}"; do
  run_one "$kind" "$@" || failed=1
done
exit "$failed"
