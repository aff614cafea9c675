// Reachable only from probe_local's scope.
extern "C" int probe_local_only() { return 42; }
