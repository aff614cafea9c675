#!/usr/bin/env python3
"""Writes a synthetic cumemtrace trace for measuring the analyzer's speed.

    analyzer/tools/make_synthetic_trace.py 3000000 /tmp/big.jsonl
    cumemtrace -v report /tmp/big.jsonl > /dev/null   # prints events/s on stderr

EVENTS is the number of lines written, header and end included. The trace has
the shape of a training job under the caching pool, in the exact form the
preload writes (one flat JSON object per line, fields in its order):

- a few hundred call stacks of 6 to 16 frames with C++ names, each written once
  before its first use;
- weights allocated at the start and kept (the live set stays around a
  thousand allocations), activations allocated and freed in every iteration;
- addresses reused after a free, as a pool does, carved from 2 MiB and 20 MiB
  segments (segment_alloc when the pool grows, segment_free now and then);
- a `mark` push/pop pair around every iteration, a `pool` sample now and then,
  an `end` line;
- two threads, as in PyTorch: the one that marks the steps runs the forward
  half of each iteration, autograd's own thread the backward half.

Seeded: the same arguments always give the same bytes. With --leak N, each
iteration also leaks N bytes from one call site (a growth leak).
"""
import argparse
import random

HEADER = ('{"ev":"header","format":"cumemtrace","version":1,"pid":4242,"ppid":4100,'
          '"host":"node7","exe":"/usr/bin/python3","argv":["python3","train.py"],'
          '"start_unix_ns":1763740000123456789,"pool":"caching","config":{"stacks":32}}\n')
SEGMENT_SMALL = 2 << 20
SEGMENT_LARGE = 20 << 20
NAMES = ["at::native::empty_cuda", "c10::cuda::CUDACachingAllocator::malloc",
         "at::TensorBase::TensorBase", "torch::autograd::Engine::evaluate_function",
         "at::native::addmm_out_cuda", "at::native::conv2d", "at::native::layer_norm_cuda",
         "at::native::softmax_cuda", "train_step(Model&, Batch const&)", "Model::forward(Tensor)",
         "Attention::forward(Tensor const&)", "MLP::forward(Tensor const&)", "Optimizer::step()",
         "DataLoader::next()", "main", "__libc_start_call_main", "_PyEval_EvalFrameDefault",
         "PyObject_Call", "cublasLtMatmul", "std::vector<float>::resize(unsigned long)"]


class Writer:
    def __init__(self, out, rng, budget):
        self.out, self.rng, self.budget = out, rng, budget
        self.t, self.lines = 1000, 0

    def line(self, text):
        self.out.write(text)
        self.lines += 1

    def tick(self):
        self.t += self.rng.randint(50, 3000)
        return self.t


def frames_json(rng, stack_id):
    depth = rng.randint(6, 16)
    frames = []
    for level in range(depth):
        ip = 0x55d0c2a00000 + stack_id * 0x1000 + level * 0x40
        fn = rng.choice(NAMES)
        frames.append('{"ip":"0x%x","fn":"%s","module":"/opt/app/bin/train","off":"0x%x"}'
                      % (ip, fn, ip - 0x55d0c2a00000))
    return "[" + ",".join(frames) + "]"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("events", type=int, help="lines to write (at least 10)")
    parser.add_argument("output")
    parser.add_argument("--stacks", type=int, default=300, help="distinct call stacks")
    parser.add_argument("--leak", type=int, default=0, help="bytes leaked per iteration")
    args = parser.parse_args()
    events = max(args.events, 10)
    rng = random.Random(42)
    with open(args.output, "w", buffering=1 << 20) as out:
        w = Writer(out, rng, events)
        w.line(HEADER)
        w.line('{"ev":"device","t":1200,"dev":0,"name":"NVIDIA H100 80GB HBM3","total":85045870592}\n')
        written_stacks = set()
        free_by_size = {}      # block size -> freed addresses, reused first (a pool's cache)
        segment_room = []      # [next free address, end] of the current segment per class
        segments = []          # (ptr, size) of every live segment
        next_segment = 0x7f3a00000000
        live = {}              # ptr -> (size, block, stack)
        segment_of = {}        # every address carved -> its segment's ptr
        live_in_segment = {}   # segment ptr -> live allocations in it
        weights = []
        iteration = 0
        activations = []

        def stack_for(site):
            if site not in written_stacks:
                written_stacks.add(site)
                w.line('{"ev":"stack","id":%d,"frames":%s}\n' % (site, frames_json(rng, site)))
            return site

        def carve(block):
            nonlocal next_segment
            cached = free_by_size.get(block)
            if cached:
                return cached.pop()
            large = block > (1 << 20)
            for room in segment_room:
                if room[2] == large and room[1] - room[0] >= block:
                    ptr = room[0]
                    room[0] += block
                    segment_of[ptr] = room[3]
                    return ptr
            seg_size = max(block, SEGMENT_LARGE if large else SEGMENT_SMALL)
            seg_size = (seg_size + SEGMENT_SMALL - 1) // SEGMENT_SMALL * SEGMENT_SMALL
            ptr = next_segment
            next_segment += seg_size
            segments.append((ptr, seg_size))
            w.line('{"ev":"segment_alloc","t":%d,"dev":0,"ptr":"0x%x","size":%d,"api":"cudaMalloc"}\n'
                   % (w.tick(), ptr, seg_size))
            segment_room.append([ptr + block, ptr + seg_size, large, ptr])
            segment_of[ptr] = ptr
            live_in_segment[ptr] = 0
            if len(segment_room) > 8:
                segment_room.pop(0)
            return ptr

        tid = [4242]  # the thread doing the current allocations and frees

        def alloc(size, site):
            block = (size + 511) // 512 * 512
            stack = stack_for(site)
            ptr = carve(block)
            live[ptr] = (size, block, stack)
            live_in_segment[segment_of[ptr]] += 1
            w.line('{"ev":"alloc","t":%d,"tid":%d,"api":"cudaMalloc","kind":"device","dev":0,'
                   '"ptr":"0x%x","size":%d,"block":%d,"stream":"0x0","stack":%d}\n'
                   % (w.tick(), tid[0], ptr, size, block, stack))
            return ptr

        def free(ptr):
            size, block, _ = live.pop(ptr)
            live_in_segment[segment_of[ptr]] -= 1
            free_by_size.setdefault(block, []).append(ptr)
            w.line('{"ev":"free","t":%d,"tid":%d,"api":"cudaFree","kind":"device","dev":0,'
                   '"ptr":"0x%x","size":%d,"stream":"0x0","stack":%d}\n'
                   % (w.tick(), tid[0], ptr, size, 1 + rng.randrange(args.stacks)))

        # Each step below writes at most 4 lines (a stack, a segment, an
        # alloc, a pop); `room` keeps enough for it, the rest is filled with
        # instant marks so that the trace has exactly `events` lines.
        def room():
            return w.lines < events - 8

        for i in range(min(800, events // 4)):
            if not room():
                break
            weights.append(alloc(rng.choice([4096, 65536, 1 << 20, 4 << 20, 16 << 20]) + rng.randrange(512),
                                 1 + rng.randrange(20)))
        while room():
            iteration += 1
            w.line('{"ev":"mark","t":%d,"tid":4242,"name":"iteration","kind":"push"}\n' % w.tick())
            steps = rng.randint(100, 400)
            for step in range(steps):
                if not room():
                    break
                tid[0] = 4242 if step < steps // 2 else 4250  # forward, then backward
                if activations and (rng.random() < 0.5 or len(activations) > 300):
                    free(activations.pop(rng.randrange(len(activations))))
                else:
                    size = rng.choice([512, 8192, 131072, 1 << 20, 3 << 20]) + rng.randrange(4096)
                    activations.append(alloc(size, 21 + rng.randrange(max(1, args.stacks - 21))))
            tid[0] = 4242
            if args.leak and room():
                alloc(args.leak, 21)
            if iteration % 20 == 0 and room():
                allocated = sum(v[0] for v in live.values())
                reserved = sum(s for _, s in segments)
                w.line('{"ev":"pool","t":%d,"dev":0,"allocated":%d,"reserved":%d,"cached_free":%d,'
                       '"largest_free":%d,"free_blocks":%d,"inactive_split":0}\n'
                       % (w.tick(), allocated, reserved, max(0, reserved - allocated), SEGMENT_SMALL,
                          sum(len(v) for v in free_by_size.values())))
            if iteration % 50 == 0 and room():
                # The pool gives an unused segment back (empty_cache).
                empty = [(p, size) for p, size in segments if live_in_segment[p] == 0]
                if empty:
                    ptr, size = empty[0]
                    segments.remove((ptr, size))
                    del live_in_segment[ptr]
                    segment_room[:] = [r for r in segment_room if r[3] != ptr]
                    for addresses in free_by_size.values():
                        addresses[:] = [a for a in addresses if segment_of[a] != ptr]
                    w.line('{"ev":"segment_free","t":%d,"dev":0,"ptr":"0x%x","size":%d}\n' % (w.tick(), ptr, size))
            w.line('{"ev":"mark","t":%d,"tid":4242,"name":"iteration","kind":"pop"}\n' % w.tick())
        while w.lines < events - 1:
            w.line('{"ev":"mark","t":%d,"tid":4242,"name":"tail","kind":"instant"}\n' % w.tick())
        w.line('{"ev":"end","t":%d,"reason":"exit","live":%d,"live_bytes":%d,"dropped":0}\n'
               % (w.tick(), len(live), sum(v[0] for v in live.values())))


if __name__ == "__main__":
    main()
