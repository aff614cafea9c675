"""Two threads run the same training step at once, each keeping 2 KiB of
device memory per step (a list nobody clears), with no marks: the growth
verdict must not depend on how the threads interleave (issue 32).

    python3 two_thread_leak.py [STEPS] [--no-loop]

--no-loop: each thread allocates a few buffers once and frees them: there
are no iterations to judge growth by. Runs on the simulated libcudart.
"""
import ctypes
import sys
import threading

cudart = ctypes.CDLL("libcudart.so.13")  # releases the GIL around each call: the threads run at once


def device_alloc(size):
    pointer = ctypes.c_void_p()
    status = cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size))
    assert status == 0, f"cudaMalloc({size}): error {status}"
    return pointer


def train_step(kept):
    activations = [device_alloc(256 << 10) for _ in range(3)]
    kept.append(device_alloc(2048))  # the leak: 2 KiB per step
    for buffer in activations:
        cudart.cudaFree(buffer)


def train(steps):
    kept = []
    for _ in range(steps):
        train_step(kept)


def load_once():
    buffers = [device_alloc((i + 1) << 20) for i in range(3)]
    for buffer in buffers:
        cudart.cudaFree(buffer)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 40
    work = (load_once, ()) if "--no-loop" in sys.argv else (train, (steps,))
    threads = [threading.Thread(target=work[0], args=work[1]) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


main()
