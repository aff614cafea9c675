// For test programs that fork while other threads run and whose children
// then exit() (fork_child, fork_paths, soak, sim_fork_exit). Include it in
// exactly one source file of the program.
//
// Under scripts/sanitize.sh's ASan build such a child can hang forever in
// exit(): GCC 12's LeakSanitizer takes its allocator and thread-registry
// locks for its at-exit check, and its runtime does not take them around
// fork(), so a lock another thread of the parent held at that instant (our
// writer thread starting, a sim stream worker allocating) is never released
// in the child. Reproduced without cumemtrace: one thread looping over
// malloc/free while main forks children that exit() hangs 1-2 children in
// 40 with detect_leaks=1, none with it off. (CI, 2026-11-25: fork_child's
// child hung in Fork.ChildNeverWritesIntoTheParentsTrace.)
//
// So these programs turn off the at-exit leak check for themselves, parent
// and children alike; ASAN_OPTIONS does not set leak_check_at_exit, so this
// default stands while detect_leaks=1 keeps checking every other program of
// the run (the tests, the CLI, the simulated device in the programs that do
// not fork). Their children's reports would be false anyway: the parent's
// other threads, and the memory only they pointed to, are gone.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __lsan_default_options();  // read by the ASan runtime at start
extern "C" const char* __lsan_default_options() { return "leak_check_at_exit=0"; }
#endif
