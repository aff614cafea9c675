"""Time per tensor in a PyTorch process: torch.empty and its free, in a loop,
called from a few Python frames deep, as a model's code calls them.

scripts/gpu-check.sh runs it three ways to price what cumemtrace adds per
tensor in a real framework process (hundreds of shared libraries, Python
frames): untraced with PyTorch's own caching allocator, and under
`cumemtrace run --torch-tensors` (every tensor a cudaMalloc/cudaFree served by
our pool) without and with call stacks. A training loop's step time is too
noisy (runs differ by 3%) to show a cost per allocation; this loop is not.

    python3 torch_alloc_loop.py --out result.json [--count N] [--depth D]
"""
import argparse
import json
import os
import time

import torch


def nested(depth, fn):
    return fn() if depth == 0 else nested(depth - 1, fn)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the result")
    parser.add_argument("--count", type=int, default=50000, help="tensors per timed loop")
    parser.add_argument("--depth", type=int, default=16, help="Python frames above the loop")
    parser.add_argument("--repeats", type=int, default=5, help="timed loops (the fastest counts)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_alloc_loop: torch.cuda.is_available() is False")
    device = torch.device("cuda", 0)
    torch.empty(1, device=device)  # the context and the allocator, untimed
    # Irregular sizes from 256 B to 16 KiB, the same in every run.
    sizes = [256 * (1 + (i * 7919) % 64) for i in range(args.count)]

    def loop():
        start = time.perf_counter_ns()
        for size in sizes:
            tensor = torch.empty(size, dtype=torch.uint8, device=device)
            del tensor
        torch.cuda.synchronize(device)
        return time.perf_counter_ns() - start

    nested(args.depth, loop)  # warm-up: caches, pools, lazy bindings
    best = min(nested(args.depth, loop) for _ in range(args.repeats))
    result = {
        "ns_per_tensor": best / args.count,
        "count": args.count,
        "depth": args.depth,
        "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", ""),
        "torch": torch.__version__,
    }
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(f"torch_alloc_loop: {result['ns_per_tensor']:.0f} ns per tensor (alloc and free), "
          f"{args.count} tensors, best of {args.repeats}", flush=True)


if __name__ == "__main__":
    main()
