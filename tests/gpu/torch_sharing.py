"""Issue 18's checks on a real GPU with PyTorch (scripts/gpu-check.sh).

  torch_sharing.py ipc
      torch.multiprocessing (spawn) sends two CUDA tensors to a child; the
      child checks their contents and writes into the first; the parent then
      checks both. Prints `ipc: ok`, `ipc: refused: <error>` (the handle was
      refused: cumemtrace's documented answer for pool memory it cannot
      share) or `ipc: CORRUPT: <what>`; exits 1 only when corrupt.
  torch_sharing.py empty_cache
      Allocates and frees 2 GiB of tensors, then torch.cuda.empty_cache();
      prints the device memory nvidia-smi reports used before and after, in
      MiB, as `empty_cache: before=N after=N`. Compare a bare run with one
      under cumemtrace: the drop must be the same (nothing cached twice).
"""
import subprocess
import sys

import torch
import torch.multiprocessing as mp


def child(tensors, results):
    try:
        a, b = tensors
        ok_a = bool(torch.all(a == 7).item())
        ok_b = bool(torch.all(b == 11).item())
        a[:16] = 99
        torch.cuda.synchronize()
        results.put(("ok", ok_a, ok_b))
    except Exception as error:  # the handle could not be opened
        results.put(("error", repr(error), None))


def ipc():
    a = torch.full((1 << 20,), 7, dtype=torch.int32, device="cuda")
    b = torch.full((1 << 16,), 11, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    try:
        process = ctx.Process(target=child, args=((a, b), results))
        process.start()
    except Exception as error:  # pickling the tensors asks for their IPC handles
        print(f"ipc: refused: {error!r}".splitlines()[0])
        return 0
    outcome = results.get(timeout=120)
    process.join(timeout=60)
    if outcome[0] == "error":
        print(f"ipc: refused: {outcome[1]}".splitlines()[0])
        return 0
    _, ok_a, ok_b = outcome
    torch.cuda.synchronize()
    problems = []
    if not ok_a or not ok_b:
        problems.append(f"the child read wrong bytes (a {ok_a}, b {ok_b})")
    if not bool(torch.all(a[:16] == 99).item()):
        problems.append("the child's write is not in the parent's tensor")
    if not bool(torch.all(a[16:] == 7).item()) or not bool(torch.all(b == 11).item()):
        problems.append("memory beside the shared tensor changed")
    if problems:
        print("ipc: CORRUPT: " + "; ".join(problems))
        return 1
    print("ipc: ok")
    return 0


def used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[0])


def empty_cache():
    tensors = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(32)]
    torch.cuda.synchronize()
    del tensors
    before = used_mib()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    after = used_mib()
    print(f"empty_cache: before={before} after={after}")
    return 0


if __name__ == "__main__":
    sys.exit({"ipc": ipc, "empty_cache": empty_cache}[sys.argv[1]]())
