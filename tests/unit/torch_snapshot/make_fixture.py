#!/usr/bin/env python3
"""Writes tiny_snapshot.pickle: a PyTorch memory snapshot in miniature, built
from plain dicts with Python's own pickle (protocol 4, memo shared frames, as
torch.cuda.memory._dump_snapshot writes them), so CI tests import-torch
without a GPU or PyTorch. The expected figures are in
tests/unit/analyzer_torch_import_test.cpp; change both together.

    python3 tests/unit/torch_snapshot/make_fixture.py tests/unit/torch_snapshot/tiny_snapshot.pickle
"""
import pickle
import sys

MiB = 1 << 20

# Frames innermost first, as PyTorch records them: its capture machinery and
# the allocator on top (import-torch drops those), then the program.
capture = [
    {"name": "torch::unwind::unwind()", "filename": "??", "line": 0},
    {"name": "torch::CapturedTraceback::gather(bool, bool, bool)", "filename": "??", "line": 0},
    {"name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
     "filename": "CUDACachingAllocator.cpp", "line": 0},
]
linear = {"name": "forward", "filename": "/home/u/model.py", "line": 42}
train = {"name": "train_step", "filename": "/home/u/train.py", "line": 7}
empty = {"name": "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", "filename": "??", "line": 0}
frames_forward = capture + [empty, linear, train]   # the same dicts, shared through the memo
frames_train = capture + [train]


def event(action, addr, size, t, frames=None, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t,
            "frames": frames if frames is not None else []}


def block(address, size, requested, state, frames=None):
    return {"address": address, "size": size, "requested_size": requested, "state": state,
            "frames": frames if frames is not None else []}


def segment(device, address, total, blocks, stream=0):
    allocated = sum(b["size"] for b in blocks if b["state"].startswith("active"))
    return {"device": device, "address": address, "total_size": total, "allocated_size": allocated,
            "active_size": allocated, "requested_size": allocated, "stream": stream,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "blocks": blocks, "frames": []}


A, B, C, D = 0x7f0010000000, 0x7f0020000000, 0x7f0030000000, 0x7f0140000000
T = 1_700_000_000_000_000  # time_us, Unix epoch

# The final state.
segments = [
    # Reserved before the trace began; block A live since then (it has a
    # stack), A+1024 was freed during the trace.
    segment(0, A, 2 * MiB, [block(A, 1024, 1000, "active_allocated", frames_train),
                            block(A + 1024, 2 * MiB - 1024, 0, "inactive")]),
    # Reserved during the trace: B allocated in it (PyTorch gave it a larger
    # block than asked for), B+4MiB allocated before it, its free requested
    # but not completed at the end.
    segment(0, B, 20 * MiB, [block(B, 5 * MiB, 4 * MiB, "active_allocated", frames_forward),
                             block(B + 5 * MiB, MiB, 1_000_000, "active_pending_free"),
                             block(B + 6 * MiB, 14 * MiB, 0, "inactive")]),
    # Device 1: reserved and allocated during the trace.
    segment(1, D, 2 * MiB, [block(D, 2 * MiB, 2 * MiB, "active_allocated", frames_forward)]),
]
# Segment C (2 MiB) existed before the trace and is released during it.
device0 = [
    event("free_requested", A + 1024, 512, T + 10, frames_train),
    event("free_completed", A + 1024, 512, T + 11, frames_train),
    event("segment_alloc", B, 20 * MiB, T + 20, frames_forward),
    event("alloc", B, 4 * MiB, T + 21, frames_forward),
    event("alloc", B + 8 * MiB, 2 * MiB, T + 30, frames_forward),
    event("free_requested", B + 8 * MiB, 2 * MiB, T + 40, frames_train),
    event("free_completed", B + 8 * MiB, 2 * MiB, T + 41, frames_train),
    event("free_requested", B + 5 * MiB, 1_000_000, T + 50, frames_train),
    event("segment_free", C, 2 * MiB, T + 60, frames_train),
    {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": T + 70},
    event("oom", 1 * MiB, 64 * MiB, T + 80, frames_forward),
]
device1 = [
    event("segment_alloc", D, 2 * MiB, T + 25, frames_forward, stream=0x5000),
    event("alloc", D, 2 * MiB, T + 26, frames_forward, stream=0x5000),
]
snapshot = {
    "segments": segments,
    "device_traces": [device0, device1],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                           "garbage_collection_threshold": 0.0, "expandable_segments": False,
                           "roundup_power2_divisions": {"1": 0, "2": 0}},
}

with open(sys.argv[1], "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
