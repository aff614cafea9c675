// The definition of probe_value() that follows probe_a's.
extern "C" int probe_value() { return 'B'; }
