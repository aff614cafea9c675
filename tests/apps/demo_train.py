"""A small Python training loop that reaches CUDA through ctypes, as a
framework's allocator does, for scripts/demo.sh: cumemtrace names its Python
lines. load_weights() keeps 12 MiB for the whole run (as a model does);
train_step() allocates activations and frees them, but keeps 4 KiB every
step in a list that nobody clears (a slow leak).

    python3 demo_train.py [STEPS]

Runs on the real libcudart.so or the simulated one (tests/sim).
"""
import ctypes
import sys

cudart = ctypes.CDLL("libcudart.so.13")  # ctypes.CDLL releases the GIL around each call
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]


def device_alloc(size):
    pointer = ctypes.c_void_p()
    if cudart.cudaMalloc(ctypes.byref(pointer), size) != 0:
        raise MemoryError(f"cudaMalloc({size}) failed")
    return pointer


class Model:
    def __init__(self):
        self.weights = []
        self.history = []  # grows every step: the leak

    def load_weights(self):
        for _ in range(3):
            self.weights.append(device_alloc(4 << 20))

    def train_step(self, step):
        activations = [device_alloc(1 << 20) for _ in range(4)]
        self.history.append(device_alloc(4096))  # kept "for logging", never freed
        for buffer in activations:
            cudart.cudaFree(buffer)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    model = Model()
    model.load_weights()
    for step in range(steps):
        model.train_step(step)
    print(f"demo_train: {steps} steps done")


main()
