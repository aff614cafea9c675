#!/usr/bin/env python3
"""Writes a synthetic cumemtrace trace for measuring the analyzer's speed.

    analyzer/tools/make_synthetic_trace.py 2000000 /tmp/big.jsonl
    cumemtrace -v report /tmp/big.jsonl > /dev/null   # prints events/s on stderr

Half allocs, half frees (at most ~1000 live), in the exact shape the preload
writes: one flat JSON object per line. Seeded, so runs are comparable.
"""
import random
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_synthetic_trace.py EVENTS OUTPUT")
    events, path = int(sys.argv[1]), sys.argv[2]
    rng = random.Random(42)
    with open(path, "w") as out:
        out.write('{"ev":"header","format":"cumemtrace","version":1,"pid":4242,"ppid":4100,'
                  '"host":"node7","exe":"/usr/bin/python3","argv":["python3","train.py"],'
                  '"start_unix_ns":1763740000123456789,"pool":"caching","config":{"stacks":32}}\n')
        out.write('{"ev":"device","t":1200,"dev":0,"name":"NVIDIA H100 80GB HBM3","total":85045870592}\n')
        out.write('{"ev":"stack","id":3,"frames":[{"ip":"0x55d0c2a1b136","fn":"train_step(Model&)",'
                  '"module":"/opt/app/bin/train","off":"0x1b136"}]}\n')
        live, t, next_offset = [], 2000, 0
        for _ in range(events):
            t += rng.randint(1, 100)
            if live and (rng.random() < 0.5 or len(live) > 1000):
                ptr, size = live.pop(rng.randrange(len(live)))
                out.write('{"ev":"free","t":%d,"tid":4242,"api":"cudaFree","kind":"device","dev":0,'
                          '"ptr":"0x%x","size":%d,"stack":3}\n' % (t, ptr, size))
            else:
                size = rng.randint(1, 1 << 20)
                block = (size + 511) // 512 * 512
                ptr = 0x7f3a00000000 + next_offset
                next_offset += block
                live.append((ptr, size))
                out.write('{"ev":"alloc","t":%d,"tid":4242,"api":"cudaMalloc","kind":"device","dev":0,'
                          '"ptr":"0x%x","size":%d,"block":%d,"stream":"0x0","stack":3}\n'
                          % (t, ptr, size, block))
        out.write('{"ev":"end","t":%d,"reason":"exit","live":%d,"live_bytes":%d,"dropped":0}\n'
                  % (t + 1, len(live), sum(size for _, size in live)))


if __name__ == "__main__":
    main()
