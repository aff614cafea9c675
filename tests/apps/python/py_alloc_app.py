"""Allocates on the simulated CUDA device through ctypes from many kinds of
Python frames and writes a manifest of the Python stack of every request
(tests/apps/python/README.md).

    python3 py_alloc_app.py GROUP --out DIR [--seconds S]

GROUP: basic, callbacks, codereuse, threads, fork, soak. Exit 0 when every
CUDA call returned what it should; the manifest(s) are DIR/manifest.PID.json.
Runs on CPython 3.8 and later, standard library only.
"""
import sys

sys.dont_write_bytecode = True  # never leave __pycache__ in the source tree

import argparse
import builtins
import ctypes
import functools
import gc
import os
import threading
import time
import types
from ctypes import byref

import pystack_support as S
from pystack_support import failed, note, note_bad_ptr, note_free, note_oom, ok
import pystack_more

CUDA = None


# ------------------------------------------------------------------ basic

def runtime_cdll():
    p = ctypes.c_void_p()
    ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "runtime_cdll")))
    CUDA.keep(p)


def runtime_pydll():
    p = ctypes.c_void_p()
    ok(CUDA.rt_py.cudaMalloc(byref(p), note("cudaMalloc", "runtime_pydll")))
    CUDA.keep(p)


def driver_cdll():
    d = ctypes.c_uint64()
    ok(CUDA.drv.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "driver_cdll")))
    CUDA.keep(d, "cuMemAlloc_v2")


def driver_pydll():
    d = ctypes.c_uint64()
    ok(CUDA.drv_py.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "driver_pydll")))
    CUDA.keep(d, "cuMemAlloc_v2")


def out_of_memory():
    p = ctypes.c_void_p()
    failed(CUDA.rt.cudaMalloc(byref(p), note_oom("cudaMalloc", "oom_cdll")))
    failed(CUDA.rt_py.cudaMalloc(byref(p), note_oom("cudaMalloc", "oom_pydll")))
    d = ctypes.c_uint64()
    failed(CUDA.drv.cuMemAlloc_v2(byref(d), note_oom("cuMemAlloc_v2", "oom_driver")))


def bad_frees():
    failed(CUDA.rt.cudaFree(note_bad_ptr("cudaFree", "bad_free_cdll")))
    failed(CUDA.rt_py.cudaFree(note_bad_ptr("cudaFree", "bad_free_pydll")))
    failed(CUDA.drv.cuMemFree_v2(note_bad_ptr("cuMemFree_v2", "bad_free_driver")))


def level_one(api):
    return level_two(api)


def level_two(api):
    return pystack_more.level_three(api)


def methods():
    buffer = pystack_more.DeviceBuffer()
    buffer.grow()
    pystack_more.DeviceBuffer.make()
    pystack_more.DeviceBuffer.raw()
    buffer.scratch
    pystack_more.DeviceBuffer.Shard().place()


module_lambda = lambda p: ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "lambda")))  # noqa: E731


def lambdas():
    p = ctypes.c_void_p()
    module_lambda(p)
    CUDA.keep(p)
    local = lambda p: ok(CUDA.rt_py.cudaMalloc(byref(p), note("cudaMalloc", "lambda")))  # noqa: E731
    q = ctypes.c_void_p()
    local(q)
    CUDA.keep(q)


def buffers(count):
    for _ in range(count):
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "generator")))
        yield p


def relay(count):
    yield from buffers(count)
    d = ctypes.c_uint64()
    ok(CUDA.drv.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "generator")))
    yield d


def generators():
    for p in relay(2):
        CUDA.keep(p, "cuMemAlloc_v2" if isinstance(p, ctypes.c_uint64) else "cudaMalloc")
    gen = buffers(1)
    CUDA.keep(next(gen))
    gen.close()


def recurse(depth):
    if depth == 0:
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "recursion")))
        return CUDA.keep(p)
    return recurse(depth - 1)


def exceptions():
    try:
        raise ValueError("on purpose")
    except ValueError:
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "except")))
        CUDA.keep(p)
    try:
        {}["missing"]
    except KeyError:
        try:
            raise RuntimeError("nested")
        except RuntimeError:
            p = ctypes.c_void_p()
            ok(CUDA.rt_py.cudaMalloc(byref(p), note("cudaMalloc", "except")))
            CUDA.keep(p)
    try:
        pass
    finally:
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "finally")))
        CUDA.keep(p)


def outer():
    def inner():
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "nested_function")))
        return CUDA.keep(p)

    def middle():
        def innermost():
            d = ctypes.c_uint64()
            ok(CUDA.drv.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "nested_function")))
            return CUDA.keep(d, "cuMemAlloc_v2")
        return innermost()

    inner()
    middle()


def comprehension():
    # A frame of its own before 3.12 (<listcomp>), inlined from 3.12 on (PEP 709).
    pointers = [ctypes.c_void_p() for _ in range(2)]
    [ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "comprehension"))) for p in pointers]
    for p in pointers:
        CUDA.keep(p)


async def coro_inner():
    p = ctypes.c_void_p()
    ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "coroutine")))
    return p


async def coro_outer():
    return await coro_inner()


def coroutines():
    c = coro_outer()
    try:
        c.send(None)
    except StopIteration as done:
        CUDA.keep(done.value)


def logged(fn):
    @functools.wraps(fn)  # copies __qualname__ to the function, not to its code
    def wrapper(*args):
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "decorator")))
        CUDA.keep(p)
        return fn(*args)
    return wrapper


@logged
def decorated():
    return recurse(1)


def allocating_key(value):
    p = ctypes.c_void_p()
    ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "builtin_callback")))
    CUDA.keep(p)
    return -value


def through_builtins():
    # Python -> sorted()/map() (C) -> Python: native frames of the
    # interpreter between the two Python frames, no ctypes.
    sorted([3, 1, 2], key=allocating_key)
    list(map(allocating_key, [4, 5]))


class Finalized:
    """Allocates in __del__: called from the interpreter's deallocation,
    at a `del` statement and from the cycle collector (native code between
    the two Python frames)."""

    def __init__(self):
        self.cycle = self

    def __del__(self):
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "finalizer")))
        CUDA.keep(p)


def finalizers():
    plain = Finalized()
    plain.cycle = None
    del plain
    Finalized()  # a cycle: collected below
    gc.collect()


def basic():
    runtime_cdll()
    runtime_pydll()
    CUDA.use_driver_here()
    driver_cdll()
    driver_pydll()
    out_of_memory()
    bad_frees()
    level_one("cudaMalloc")
    level_one("cuMemAlloc_v2")
    methods()
    lambdas()
    generators()
    recurse(32)
    exceptions()
    outer()
    comprehension()
    coroutines()
    decorated()
    through_builtins()
    finalizers()
    import pystack_import_alloc  # noqa: F401  (allocates at import)
    CUDA.free_all()


# -------------------------------------------------------------- callbacks

COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def _libc(kind):
    libc = kind("libc.so.6")
    libc.qsort.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, COMPARE]
    libc.qsort.restype = None
    return libc


def compare_runtime(a, b):
    S.enter_callback()
    try:
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "qsort")))
        CUDA.keep(p)
        return a[0] - b[0]
    finally:
        S.exit_callback()


def compare_pydll(a, b):
    S.enter_callback()
    try:
        p = ctypes.c_void_p()
        ok(CUDA.rt_py.cudaMalloc(byref(p), note("cudaMalloc", "qsort")))
        CUDA.keep(p)
        return a[0] - b[0]
    finally:
        S.exit_callback()


def allocate_for_comparison():
    d = ctypes.c_uint64()
    ok(CUDA.drv.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "qsort")))
    CUDA.keep(d, "cuMemAlloc_v2")


class Sorter:
    def __init__(self, libc):
        self.libc = libc
        self.inner = COMPARE(compare_runtime)

    def compare_nested(self, a, b):
        # native -> Python -> libc -> Python -> libc -> Python -> cudaMalloc
        S.enter_callback()
        try:
            allocate_for_comparison()
            small = (ctypes.c_int * 2)(2, 1)
            self.libc.qsort(small, 2, ctypes.sizeof(ctypes.c_int), self.inner)
            return a[0] - b[0]
        finally:
            S.exit_callback()


def sort_with(libc, compare, values):
    array = (ctypes.c_int * len(values))(*values)
    callback = COMPARE(compare)
    libc.qsort(array, len(values), ctypes.sizeof(ctypes.c_int), callback)
    if list(array) != sorted(values):
        raise S.ProgramError("qsort did not sort: %r" % list(array))


def callbacks():
    CUDA.use_driver_here()
    libc = _libc(ctypes.CDLL)      # GIL released around qsort, taken again by the callback
    libc_py = _libc(ctypes.PyDLL)  # GIL held through qsort
    sort_with(libc, compare_runtime, [5, 3, 9, 1])
    sort_with(libc_py, compare_pydll, [4, 8, 2])
    sort_with(libc, compare_pydll, [7, 6])
    sorter = Sorter(libc)
    sort_with(libc_py, sorter.compare_nested, [3, 2, 1])
    CUDA.free_all()


# -------------------------------------------------------------- codereuse

def codereuse_marker():
    pass


GENERATED = """{padding}class Holder_{n}:
    def fn_{n}(self, cuda, byref, note, ok):
        return helper_{n}(cuda, byref, note, ok)

def helper_{n}(cuda, byref, note, ok):
    import ctypes
    p = ctypes.c_void_p()
    ok(cuda.rt.cudaMalloc(byref(p), note("cudaMalloc", "codereuse")))
    cuda.keep(p)

def fn_{n}(cuda, byref, note, ok):
    return Holder_{n}().fn_{n}(cuda, byref, note, ok)
"""


# The other way to make functions: a code object copied with another name,
# qualified name, file and first line (CodeType.replace).
TEMPLATE = next(c for c in compile(
    "def template(cuda, ctypes, note, ok):\n"
    "    p = ctypes.c_void_p()\n"
    "    ok(cuda.rt.cudaMalloc(ctypes.byref(p), note(\"cudaMalloc\", \"codereuse_replace\")))\n"
    "    cuda.keep(p)\n",
    "/generated/template.py", "exec").co_consts if isinstance(c, type(codereuse_marker.__code__)))


def make_by_exec(n, padding):
    source = GENERATED.format(n=n, padding="\n" * padding)
    namespace = {}
    exec(compile(source, "/generated/gen_%s.py" % n, "exec"), namespace)
    fn = namespace["fn_" + n]
    return lambda: fn(CUDA, byref, note, ok), (fn.__code__, namespace["helper_" + n].__code__)


def make_by_replace(n, first_line):
    changes = {"co_name": "fn_" + n, "co_filename": "/generated/gen_%s.py" % n,
               "co_firstlineno": first_line}
    if hasattr(TEMPLATE, "co_qualname"):
        changes["co_qualname"] = "Generated_%s.fn_%s" % (n, n)
    fn = types.FunctionType(TEMPLATE.replace(**changes), {"__builtins__": builtins}, "fn_" + n)
    return lambda: fn(CUDA, ctypes, note, ok), (fn.__code__,)


def codereuse(rounds=10):
    """Functions made by exec(compile(...)) and by CodeType.replace, each
    with its own name and file, called once, then dropped and collected in
    batches, so CPython hands later ones code-object addresses of earlier
    ones: each allocation must still name its own function and file."""
    seen = set()
    reused = {"exec": 0, "replace": 0}
    for round_ in range(rounds):
        batch = []
        for k in range(4):
            n = "%03d" % (round_ * 4 + k)
            if k % 2 == 0:
                batch.append(("exec",) + make_by_exec(n, round_ % 3))
            else:
                batch.append(("replace",) + make_by_replace(n, 100 + 7 * round_ + k))
        for maker, call, codes in batch:
            addresses = [id(code) for code in codes]
            reused[maker] += any(a in seen for a in addresses)
            seen.update(addresses)
            call()
        del batch, call, codes
        gc.collect()
    manifest = S.manifest()
    manifest.extra["code_object_addresses_reused"] = reused["exec"] + reused["replace"]
    manifest.extra["code_object_reuse"] = reused
    print("codereuse: functions at a code-object address used before: %d of %d made by exec, "
          "%d of %d by CodeType.replace" % (reused["exec"], 2 * rounds, reused["replace"], 2 * rounds))
    if not reused["exec"] + reused["replace"]:
        raise S.ProgramError("no code-object address was used twice: the case proves nothing here")
    CUDA.free_all()


# ---------------------------------------------------------------- threads

def thread_step(index, round_):
    p = ctypes.c_void_p()
    ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "threads")))
    q = ctypes.c_void_p()
    ok(CUDA.rt_py.cudaMalloc(byref(q), note("cudaMalloc", "threads")))
    d = ctypes.c_uint64()
    ok(CUDA.drv.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "threads")))
    r = recurse(index + round_ % 3)
    ok(CUDA.rt.cudaFree(note_free(p.value, "cudaFree", "threads")))
    ok(CUDA.rt_py.cudaFree(note_free(q.value, "cudaFree", "threads")))
    ok(CUDA.drv.cuMemFree_v2(note_free(d.value, "cuMemFree_v2", "threads")))
    return r


def thread_body(index, barrier, rounds):
    CUDA.use_driver_here()
    barrier.wait()
    for round_ in range(rounds):
        thread_step(index, round_)


class Worker(threading.Thread):
    def __init__(self, index, barrier, rounds):
        super().__init__(name="worker-%d" % index)
        self.index, self.barrier, self.rounds = index, barrier, rounds
        self.error = None

    def run(self):
        try:
            thread_body(self.index, self.barrier, self.rounds)
        except BaseException as error:  # reported by the main thread
            self.error = error
            self.barrier.abort()


THREAD_START = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


def foreign_thread_start(arg):
    """Runs on a thread that pthread_create started (not threading): Python
    is entered through the ctypes callback, which makes a thread state."""
    S.enter_callback()
    try:
        CUDA.use_driver_here()
        thread_step(arg or 0, 0)
        return None
    finally:
        S.exit_callback()


def foreign_threads(count=2):
    libc = ctypes.CDLL("libc.so.6")
    libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, THREAD_START,
                                    ctypes.c_void_p]
    libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    start = THREAD_START(foreign_thread_start)  # alive until joined
    handles = []
    for index in range(count):
        handle = ctypes.c_ulong()
        ok(libc.pthread_create(byref(handle), None, start, index))
        handles.append(handle)
    for handle in handles:
        ok(libc.pthread_join(handle.value, None))


def threads(count=6, rounds=12):
    barrier = threading.Barrier(count)
    errors = []

    def target(index):
        try:
            thread_body(index, barrier, rounds)
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    started = []
    for index in range(count):
        if index % 2:
            t = Worker(index, barrier, rounds)
        else:
            t = threading.Thread(target=target, args=(index,), name="target-%d" % index)
        t.start()
        started.append(t)
    for t in started:
        t.join()
    errors += [t.error for t in started if getattr(t, "error", None)]
    if errors:
        raise errors[0]
    foreign_threads()
    CUDA.free_all()


# ------------------------------------------------------------------- fork

def child_work(label):
    level_one("cudaMalloc")
    runtime_pydll()
    recurse(3)
    p = ctypes.c_void_p()
    failed(CUDA.rt.cudaMalloc(byref(p), note_oom("cudaMalloc", "fork_" + label)))
    failed(CUDA.rt.cudaFree(note_bad_ptr("cudaFree", "fork_" + label)))


def fork_child(out, label, exit_through_libc):
    """In the child: a manifest of its own, allocations from Python, then out
    without Python's shutdown, as forked workers leave."""
    status = 1
    try:
        manifest = S.start_manifest(out, "fork-" + label)
        manifest.extra["fork_exit"] = "libc exit(0)" if exit_through_libc else "os._exit(0)"
        child_work(label)
        # os._exit runs no destructor either: the preload's _exit writes the
        # end line (preload/hooks/exit.cpp).
        manifest.write()
        status = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if exit_through_libc and status == 0:
            # exit(3) runs the C atexit handlers and the preload's destructor
            # (which writes the end line), not Python's finalisation.
            ctypes.CDLL("libc.so.6").exit(0)
        os._exit(status)


def fork_group(out):
    # A child of a process that has used CUDA cannot use the device, so the
    # children are forked before the parent's first CUDA call.
    children = {}
    for label, through_libc in (("exit", True), ("os_exit", False)):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            fork_child(out, label, through_libc)
        children[label] = pid
    for label, pid in children.items():
        _, status = os.waitpid(pid, 0)
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            raise S.ProgramError("child %s (%d) ended with status %d" % (label, pid, status))
    S.manifest().extra["children"] = children
    runtime_cdll()
    level_one("cudaMalloc")
    CUDA.free_all()


# ------------------------------------------------------------------- soak

def soak_leaf(index, i):
    if i % 7 == 3:
        d = ctypes.c_uint64()
        ok(CUDA.drv.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "soak", full=False)))
        ok(CUDA.drv.cuMemFree_v2(d))
    elif i % 5 == 1:
        p = ctypes.c_void_p()
        ok(CUDA.rt_py.cudaMalloc(byref(p), note("cudaMalloc", "soak", full=False)))
        ok(CUDA.rt_py.cudaFree(p))
    else:
        p = ctypes.c_void_p()
        ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "soak", full=False)))
        ok(CUDA.rt.cudaFree(p))


def soak_descend(depth, index, i):
    if depth == 0:
        return soak_leaf(index, i)
    return soak_descend(depth - 1, index, i)


def soak_thread(index, deadline, counts, errors):
    try:
        CUDA.use_driver_here()
        i = 0
        while time.monotonic() < deadline:
            soak_descend((i * 7 + index) % 6, index, i)
            i += 1
            time.sleep(0.002)  # some thousand requests a second: a trace the checker reads quickly
        counts[index] = i
    except BaseException as error:
        errors.append(error)


def soak(seconds, count=8):
    deadline = time.monotonic() + seconds
    counts = [0] * count
    errors = []
    started = [threading.Thread(target=soak_thread, args=(i, deadline, counts, errors),
                                name="soak-%d" % i) for i in range(count)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    if errors:
        raise errors[0]
    print("soak: %d allocations by %d threads in %.1f s" % (sum(counts), count, seconds))


# ------------------------------------------------------------------- main

def main(argv):
    global CUDA
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("group", choices=["basic", "callbacks", "codereuse", "threads", "fork", "soak"])
    parser.add_argument("--out", required=True, help="folder for manifest.PID.json")
    parser.add_argument("--seconds", type=float, default=3.0, help="soak duration")
    args = parser.parse_args(argv)
    CUDA = S.setup()
    manifest = S.start_manifest(args.out, args.group)
    if args.group == "basic":
        basic()
    elif args.group == "callbacks":
        callbacks()
    elif args.group == "codereuse":
        codereuse()
    elif args.group == "threads":
        threads()
    elif args.group == "fork":
        fork_group(args.out)
    elif args.group == "soak":
        soak(args.seconds)
    manifest.write()
    print("%s: %d requests noted (Python %s)" % (args.group, len(manifest.entries), sys.version.split()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
