"""The query API of libcumemtrace.so (include/cumemtrace/cumemtrace.h),
through ctypes: what this process holds on the device now, its peak since a
reset, and the allocations made since a checkpoint with their call stacks.

Only answers inside a process that runs with the library preloaded
(`cumemtrace run`, or LD_PRELOAD); `connect()` returns None elsewhere.

    api = connect()
    api.reset_peak()
    mark = api.checkpoint()
    ...                               # the code under test
    api.usage().peak_bytes            # the most held at once since the reset
    api.live_since(mark)              # what it still holds, largest first
"""
import ctypes
from collections import namedtuple

ALL_DEVICES = -1
NO_WATCH = (1 << 64) - 1

Usage = namedtuple("Usage", "live_bytes live_count peak_bytes")
Allocation = namedtuple("Allocation", "ptr size device stack")
# One frame of a call stack: python True for a Python frame (file, line,
# function), False for a native one (module, offset, function); unknown
# parts are "" (line 0).
Frame = namedtuple("Frame", "python file line function")


class _Usage(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("device", ctypes.c_int32), ("live_bytes", ctypes.c_uint64),
                ("live_count", ctypes.c_uint64), ("peak_bytes", ctypes.c_uint64)]


class _Allocation(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_uint64), ("size", ctypes.c_uint64), ("device", ctypes.c_int32),
                ("stack", ctypes.c_uint32)]


_SIGNATURES = {
    "cumemtrace_query_usage": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(_Usage)]),
    "cumemtrace_query_reset_peak": (None, []),
    "cumemtrace_query_checkpoint": (ctypes.c_uint64, []),
    "cumemtrace_query_live_since": (ctypes.c_size_t, [ctypes.c_uint64, ctypes.POINTER(_Allocation), ctypes.c_size_t,
                                                      ctypes.c_size_t]),
    "cumemtrace_query_watch": (None, [ctypes.c_uint64, ctypes.c_uint64]),
    "cumemtrace_query_watched": (ctypes.c_size_t, [ctypes.POINTER(_Allocation), ctypes.c_size_t, ctypes.c_size_t]),
    "cumemtrace_query_stack": (ctypes.c_size_t, [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]),
    "cumemtrace_range_push": (ctypes.c_int, [ctypes.c_char_p]),
    "cumemtrace_range_pop": (ctypes.c_int, []),
    "cumemtrace_mark": (None, [ctypes.c_char_p]),
}


def connect():
    """The preloaded library's query API, or None when this process does
    not run under it (or under an older one without the queries)."""
    try:
        process = ctypes.CDLL(None)  # the global scope: LD_PRELOAD's libraries first
    except OSError:
        return None
    functions = {}
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(process, name, None)
        if function is None:
            return None
        function.restype = restype
        function.argtypes = argtypes
        functions[name] = function
    return QueryApi(functions)


class QueryApi:
    """Thin methods over the C functions; sizes in bytes."""

    def __init__(self, functions):
        self._f = functions

    def usage(self, device=ALL_DEVICES):
        out = _Usage(struct_size=ctypes.sizeof(_Usage))
        if self._f["cumemtrace_query_usage"](device, ctypes.byref(out)) != 0:
            raise ValueError("cumemtrace has no figures for device %r" % (device,))
        return Usage(out.live_bytes, out.live_count, out.peak_bytes)

    def reset_peak(self):
        self._f["cumemtrace_query_reset_peak"]()

    def checkpoint(self):
        return self._f["cumemtrace_query_checkpoint"]()

    def live_since(self, checkpoint, keep=64):
        """(allocations held now that were made since `checkpoint`, the
        `keep` largest first; how many there are in all)."""
        return self._allocations(lambda out, n, size: self._f["cumemtrace_query_live_since"](checkpoint, out, n, size),
                                 keep)

    def watch(self, checkpoint, above_bytes):
        self._f["cumemtrace_query_watch"](checkpoint, above_bytes)

    def unwatch(self):
        self._f["cumemtrace_query_watch"](0, NO_WATCH)

    def watched(self, keep=64):
        """What the watch kept when its line was crossed, as live_since."""
        return self._allocations(lambda out, n, size: self._f["cumemtrace_query_watched"](out, n, size), keep)

    def stack(self, stack_id):
        """The frames of a call stack, innermost first ([] when unknown)."""
        if stack_id == 0:
            return []
        size = 8192
        while True:
            buf = ctypes.create_string_buffer(size)
            need = self._f["cumemtrace_query_stack"](stack_id, buf, size)
            if need < size:
                break
            size = need + 1
        frames = []
        for line in buf.value.decode("utf-8", "replace").splitlines():
            kind, _, rest = line.partition("\t")
            place, _, rest = rest.partition("\t")
            where, _, function = rest.partition("\t")
            if kind == "py":
                frames.append(Frame(True, place, int(where or 0), function))
            else:
                frames.append(Frame(False, place, where, function))
        return frames

    def range_push(self, name):
        return self._f["cumemtrace_range_push"](name.encode("utf-8", "replace"))

    def range_pop(self):
        return self._f["cumemtrace_range_pop"]()

    def mark(self, name):
        self._f["cumemtrace_mark"](name.encode("utf-8", "replace"))

    @staticmethod
    def _allocations(call, keep):
        out = (_Allocation * max(keep, 1))()
        total = call(out, keep, ctypes.sizeof(_Allocation))
        kept = [Allocation(a.ptr, a.size, a.device, a.stack) for a in out[:min(total, keep)]]
        return kept, total
