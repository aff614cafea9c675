// An empty shared object: something harmless for `cumemtrace run` to preload
// in tests that check the launcher, not the tracing.
extern "C" int cumemtrace_test_empty_preload_marker() { return 0; }
