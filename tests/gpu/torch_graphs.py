"""Issue 31's PyTorch check on a real GPU (scripts/gpu-check.sh).

  torch_graphs.py REPLAYS
      A small MLP's training step (forward, backward, SGD update, on static
      input and target tensors) captured with torch.cuda.graph after three
      warm-up steps on a side stream, as PyTorch's CUDA graphs note does,
      then replayed REPLAYS times with new inputs copied in. Prints
      `torch_graphs: replays=N loss=<the last loss, 9 digits> checksum=<the
      weights' sum, 9 digits>`: a bare run and a run under cumemtrace must
      print the same line. Exits 77 (skip) when PyTorch refuses to capture
      (with PYTORCH_NO_CUDA_MEMORY_CACHING=1, under `run --torch-tensors`,
      it may: its graphs take their memory from the caching allocator's
      private pool).
"""
import sys

import torch


def main():
    replays = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    static_input = torch.randn(64, 256, device=device)
    static_target = torch.randint(0, 10, (64,), device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(static_input), static_target)
        loss.backward()
        optimizer.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    try:
        with torch.cuda.graph(graph):
            static_loss = step()
    except RuntimeError as error:
        print(f"torch_graphs: capture refused: {error}")
        return 77

    inputs = torch.Generator(device="cpu").manual_seed(1)
    for _ in range(replays):
        static_input.copy_(torch.randn(64, 256, generator=inputs))
        static_target.copy_(torch.randint(0, 10, (64,), generator=inputs))
        graph.replay()
    torch.cuda.synchronize()
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    print(f"torch_graphs: replays={replays} loss={float(static_loss):.9g} checksum={checksum:.9g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
