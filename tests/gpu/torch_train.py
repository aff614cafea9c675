#!/usr/bin/env python3
"""A small transformer training loop for scripts/gpu-check.sh (issue 7).

Batch size and sequence length vary from step to step (seeded, so every run
sees the same shapes), as in real training. After each step the script
synchronises, samples PyTorch's own accounting (torch.cuda.memory_reserved(),
memory_allocated(), max_memory_reserved()) and the step's wall time, and
writes them to --samples as JSON. Under cumemtrace it also writes a mark
"sample N" at that moment (cumemtrace_mark from the preloaded library, found
with ctypes; nothing happens without cumemtrace), so gpu_checks.py can read
the trace's state at exactly the points PyTorch was sampled.

  torch_train.py --samples OUT.json [--steps N] [--leak] [--oom] [--record-history]

--leak keeps every step's loss on the GPU in a list (the planted growth
leak: one small tensor per step, allocated in compute_loss). --oom asks for
more memory than the device has after a few steps, catches PyTorch's
OutOfMemoryError and trains on: the trace must explain the failure.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 8192
D_MODEL = 512
LAYERS = 4
HEADS = 8
MAX_TOKENS = 16384  # B * L per batch
SEQ_LENGTHS = (64, 96, 128, 192, 256, 384, 512)


def cumemtrace_marker():
    """cumemtrace_mark(const char*) of the preloaded libcumemtrace.so, or None."""
    try:
        mark = ctypes.CDLL(None).cumemtrace_mark
    except (AttributeError, OSError):
        return None
    mark.argtypes = [ctypes.c_char_p]
    mark.restype = None
    return mark


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.position = nn.Embedding(max(SEQ_LENGTHS), D_MODEL)
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, 4 * D_MODEL, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.encoder(x, mask=mask, is_causal=True))


def batch_shape(rng):
    length = SEQ_LENGTHS[int(torch.randint(len(SEQ_LENGTHS), (1,), generator=rng))]
    largest = MAX_TOKENS // length
    batch = int(torch.randint(max(1, largest // 4), largest + 1, (1,), generator=rng))
    return batch, length


def compute_loss(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def provoke_oom(device):
    """Asks for half as much again as the whole device; returns what was asked."""
    total = torch.cuda.get_device_properties(device).total_memory
    request = int(total * 1.5) // 4 * 4
    try:
        torch.empty(request // 4, dtype=torch.float32, device=device)
    except torch.cuda.OutOfMemoryError as error:
        print(f"torch_train: out of memory as planned: {str(error).splitlines()[0]}", flush=True)
        return request
    raise SystemExit("torch_train: a request larger than the device succeeded")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", required=True, help="JSON file for the per-step samples")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--leak", action="store_true", help="keep every loss on the GPU (planted leak)")
    parser.add_argument("--oom", action="store_true", help="provoke one out-of-memory failure")
    parser.add_argument("--record-history", action="store_true",
                        help="PyTorch's own allocation history with Python stacks "
                             "(_record_memory_history(stacks='python')): the cost gpu-check.sh compares ours with")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_train: torch.cuda.is_available() is False")

    if args.record_history:
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    device = torch.device("cuda", 0)
    torch.manual_seed(args.seed)
    rng = torch.Generator().manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")  # TF32 matrix products
    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    mark = cumemtrace_marker()
    kept_losses = []  # --leak: the planted leak
    samples = []
    oom_request = None

    for step in range(args.steps):
        batch, length = batch_shape(rng)
        tokens = torch.randint(VOCAB, (batch, length + 1), generator=rng).to(device, non_blocking=False)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = compute_loss(model, tokens)
        loss.backward()
        optimizer.step()
        if args.leak:
            kept_losses.append(loss.detach())
        del loss, tokens
        torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
        if args.oom and step == 5:
            oom_request = provoke_oom(device)
            torch.cuda.synchronize(device)
        samples.append({
            "step": step,
            "batch": batch,
            "length": length,
            "seconds": elapsed,
            "allocated": torch.cuda.memory_allocated(device),
            # The bytes the tensors asked for, before the caching allocator
            # rounds them or keeps a block's unsplit tail (PyTorch >= 2.1).
            "requested": torch.cuda.memory_stats(device).get("requested_bytes.all.current", 0),
            "reserved": torch.cuda.memory_reserved(device),
            "max_reserved": torch.cuda.max_memory_reserved(device),
        })
        if mark is not None:
            mark(f"sample {step}".encode())

    steady = [s["seconds"] for s in samples[min(20, len(samples) // 4):]]
    result = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "allocator_backend": torch.cuda.get_allocator_backend(),
        "alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")),
        "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", ""),
        "traced": mark is not None,
        "steps": args.steps,
        "median_step_seconds": statistics.median(steady),
        "max_reserved": torch.cuda.max_memory_reserved(device),
        "max_allocated": torch.cuda.max_memory_allocated(device),
        "kept_losses": len(kept_losses),
        "oom_request": oom_request,
        "samples": samples,
    }
    with open(args.samples, "w") as out:
        json.dump(result, out)
    final_loss = compute_loss(model, torch.randint(VOCAB, (2, 65), generator=rng).to(device)).item()
    if not math.isfinite(final_loss):
        raise SystemExit(f"torch_train: the loss diverged ({final_loss})")
    print(f"torch_train: {args.steps} steps, median step {result['median_step_seconds'] * 1e3:.2f} ms, "
          f"max reserved {result['max_reserved']} bytes, loss {final_loss:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
