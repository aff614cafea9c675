#!/usr/bin/env python3
"""Writes the generated golden traces into traces/ (the hand-written ones,
normal_leak, truncated and two_devices, are not touched):

    tests/integration/golden/make_traces.py

training_loop.jsonl      nested marks (init, epoch N > step N > forward/backward),
                         pool samples, backward allocations on another thread than the
                         marks, and a growth leak: one 2000-byte tensor kept per step
oom_fragmentation.jsonl  a 64 MiB device whose cache is full of 1 MiB holes: a 12 MiB
                         request fails from fragmentation, a 100 MiB one from capacity;
                         a double free and a free of an unknown pointer
job.rank0.jsonl,         two ranks of one job, no marks; rank 1 keeps a buffer per
job.rank1.jsonl          iteration (found from the period of its allocations)
parent.jsonl,            a process and the child it forked (ppid = the parent's pid);
child.jsonl              the child leaks what it allocated

Every figure in these traces is deterministic, so the expected reports can be
checked by hand (see README.md).
"""
import json
import os

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


class Trace:
    def __init__(self, name, pid, ppid, argv, exe="/usr/bin/python3", host="node7"):
        self.path = os.path.join(HERE, "traces", name)
        self.lines = []
        self.t = 0
        self.live = {}  # ptr -> size
        self.emit({"ev": "header", "format": "cumemtrace", "version": 1, "pid": pid, "ppid": ppid,
                   "host": host, "exe": exe, "argv": argv, "start_unix_ns": 1763740000000000000,
                   "pool": "caching", "config": {"max_split_size": None, "stacks": 32}})

    def emit(self, event):
        self.lines.append(json.dumps(event, separators=(",", ":")))

    def tick(self, ns=1000):
        self.t += ns
        return self.t

    def device(self, total, name="NVIDIA H100 80GB HBM3", dev=0):
        self.emit({"ev": "device", "t": self.tick(), "dev": dev, "name": name, "total": total})

    def stack(self, id, *functions):
        frames = [{"ip": "0x%x" % (0x401000 + 0x100 * i + id), "fn": fn, "module": "/opt/app/bin/app",
                   "off": "0x%x" % (0x1000 + 0x100 * i + id)} for i, fn in enumerate(functions)]
        self.emit({"ev": "stack", "id": id, "frames": frames})

    def segment(self, ptr, size, dev=0):
        self.emit({"ev": "segment_alloc", "t": self.tick(), "dev": dev, "ptr": "0x%x" % ptr, "size": size,
                   "api": "cuMemAlloc_v2"})

    def alloc(self, ptr, size, stack, tid=100, dev=0, block=None):
        self.live[ptr] = size
        self.emit({"ev": "alloc", "t": self.tick(), "tid": tid, "api": "cudaMalloc", "kind": "device",
                   "dev": dev, "ptr": "0x%x" % ptr, "size": size,
                   "block": block if block is not None else (size + 511) // 512 * 512, "stack": stack})

    def free(self, ptr, tid=100, dev=0):
        size = self.live.pop(ptr)
        self.emit({"ev": "free", "t": self.tick(), "tid": tid, "api": "cudaFree", "kind": "device", "dev": dev,
                   "ptr": "0x%x" % ptr, "size": size, "stack": 0})

    def mark(self, name, kind, tid=100):
        self.emit({"ev": "mark", "t": self.tick(), "tid": tid, "name": name, "kind": kind})

    def pool(self, allocated, reserved, cached_free, largest_free, free_blocks, inactive_split, dev=0):
        self.emit({"ev": "pool", "t": self.tick(), "dev": dev, "allocated": allocated, "reserved": reserved,
                   "cached_free": cached_free, "largest_free": largest_free, "free_blocks": free_blocks,
                   "inactive_split": inactive_split})

    def end(self, dropped=0):
        self.emit({"ev": "end", "t": self.tick(), "reason": "exit", "live": len(self.live),
                   "live_bytes": sum(self.live.values()), "dropped": dropped})
        with open(self.path, "w") as out:
            out.write("\n".join(self.lines) + "\n")


def training_loop():
    tr = Trace("training_loop.jsonl", 7000, 6999, ["python3", "train.py", "--epochs", "2"])
    tr.device(85045870592)
    tr.stack(1, "load_weights(Model&)", "main")
    tr.stack(2, "Model::forward(Batch const&)", "train_step(Model&, Batch const&)", "main")
    tr.stack(3, "Model::backward()", "train_step(Model&, Batch const&)", "main")
    tr.stack(4, "record_loss(std::vector<Tensor>&)", "train_step(Model&, Batch const&)", "main")
    base = 0x7f0000000000
    tr.mark("init", "push")
    tr.segment(base, 64 * MIB)
    tr.alloc(base, 16 * MIB, 1)
    tr.mark("init", "pop")
    kept = base + 60 * MIB  # the kept loss tensors, 2 KiB each
    step = 0
    for epoch in (1, 2):
        tr.mark("epoch %d" % epoch, "push")
        for _ in range(4):
            step += 1
            tr.mark("step %d" % step, "push")
            tr.mark("forward", "push")
            tr.alloc(base + 16 * MIB, 8 * MIB, 2)
            tr.mark("forward", "pop")
            tr.mark("backward", "push")
            tr.alloc(base + 24 * MIB, 4 * MIB, 3, tid=101)  # on autograd's thread
            tr.free(base + 16 * MIB, tid=101)
            tr.free(base + 24 * MIB, tid=101)
            tr.mark("backward", "pop")
            tr.alloc(kept, 2000, 4)
            kept += 2048
            tr.mark("step %d" % step, "pop")
        allocated = sum(tr.live.values())
        tr.pool(allocated, 64 * MIB, 64 * MIB - allocated, 64 * MIB - 16 * MIB - 12 * MIB - 8 * 2048 * epoch, 3,
                0)
        tr.mark("epoch %d" % epoch, "pop")
    tr.end()


def oom_fragmentation():
    tr = Trace("oom_fragmentation.jsonl", 8100, 8000, ["./solver", "--small-device"], exe="/opt/app/bin/solver")
    tr.device(64 * MIB, name="Simulated GPU")
    tr.stack(1, "Solver::workspace(int)", "Solver::step(int)", "main")
    tr.stack(2, "Solver::factor(Matrix const&)", "Solver::step(int)", "main")
    tr.stack(3, "Solver::assemble()", "main")
    base = 0x7e0000000000
    for s in range(3):  # 60 MiB reserved: three 20 MiB segments
        tr.segment(base + s * 20 * MIB, 20 * MIB)
    tr.mark("step 1", "push")
    blocks = [base + i * MIB for i in range(60)]
    for i, ptr in enumerate(blocks):  # fill the cache with 1 MiB blocks
        tr.alloc(ptr, MIB - 4096 if i % 2 else MIB, 1 if i % 2 else 2)
    tr.mark("step 1", "pop")
    tr.mark("step 2", "push")
    for ptr in blocks[1::2]:  # free every other one: 30 MiB cached in 1 MiB holes
        tr.free(ptr)
    tr.pool(30 * MIB, 60 * MIB, 30 * MIB, MIB, 30, 0)
    tr.mark("forward", "push")
    tr.emit({"ev": "oom", "t": tr.tick(), "tid": 100, "api": "cudaMalloc", "dev": 0, "size": 12 * MIB - 100,
             "block": 12 * MIB, "allocated": 30 * MIB, "reserved": 60 * MIB, "cached_free": 30 * MIB,
             "largest_free": MIB, "device_free": 3 * MIB, "device_total": 64 * MIB, "cause": "fragmentation",
             "stack": 3})
    tr.mark("forward", "pop")
    tr.mark("step 2", "pop")
    tr.emit({"ev": "error", "t": tr.tick(), "tid": 100, "api": "cudaFree", "ptr": "0x%x" % blocks[1],
             "what": "double_free", "stack": 3})
    tr.emit({"ev": "error", "t": tr.tick(), "tid": 100, "api": "cudaFree", "ptr": "0xdead",
             "what": "unknown_pointer", "stack": 0})
    tr.emit({"ev": "oom", "t": tr.tick(), "tid": 100, "api": "cudaMalloc", "dev": 0, "size": 100 * MIB,
             "block": 100 * MIB, "allocated": 30 * MIB, "reserved": 60 * MIB, "cached_free": 30 * MIB,
             "largest_free": MIB, "device_free": 3 * MIB, "device_total": 64 * MIB, "cause": "capacity",
             "stack": 3})
    for ptr in blocks[0::2]:
        tr.free(ptr)
    tr.pool(0, 60 * MIB, 60 * MIB, 20 * MIB, 3, 0)
    tr.end()


def rank(r, leak):
    tr = Trace("job.rank%d.jsonl" % r, 9000 + r, 8999, ["python3", "train.py"])
    tr.device(85045870592)
    tr.stack(1, "Model::forward(Batch const&)", "main")
    tr.stack(2, "Model::backward()", "main")
    tr.stack(3, "Metrics::update(Tensor const&)", "main")
    base = 0x7f0000000000 + r * 0x1000000000
    tr.segment(base, 256 * MIB)
    kept = base + 200 * MIB
    for _ in range(6):  # iterations, no marks
        tr.alloc(base, (40 + 10 * r) * MIB, 1)
        tr.alloc(base + 64 * MIB, 20 * MIB, 2)
        tr.free(base)
        tr.free(base + 64 * MIB)
        if leak:
            tr.alloc(kept, MIB, 3)
            kept += MIB
    tr.end()


def forked():
    parent = Trace("parent.jsonl", 5000, 4000, ["./server", "--workers", "1"], exe="/opt/app/bin/server")
    parent.device(85045870592)
    parent.stack(1, "Server::load_model()", "main")
    parent.segment(0x7f0000000000, 2 * MIB)
    parent.alloc(0x7f0000000000, MIB, 1)
    child = Trace("child.jsonl", 5001, 5000, ["./server", "--workers", "1"], exe="/opt/app/bin/server")
    child.device(85045870592)
    child.stack(1, "Worker::serve(Request const&)", "Server::fork_worker()", "main")
    child.segment(0x7e0000000000, 20 * MIB)
    child.alloc(0x7e0000000000, 3 * MIB, 1)
    child.alloc(0x7e0000300000, 3 * MIB, 1)
    child.free(0x7e0000000000)
    child.end()
    parent.free(0x7f0000000000)
    parent.end()


if __name__ == "__main__":
    training_loop()
    oom_fragmentation()
    rank(0, leak=False)
    rank(1, leak=True)
    forked()
