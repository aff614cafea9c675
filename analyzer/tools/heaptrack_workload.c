/* The host-memory twin of make_synthetic_trace.py, for timing heaptrack_print
 * beside `cumemtrace report` (scripts/bench_analyzer.sh): EVENTS malloc and
 * free calls in all (half each), shaped like the synthetic trace so that both
 * tools read comparable traces:
 *   - about 300 distinct call stacks, 6 to 16 frames deep (a chain of calls
 *     through distinct call sites, chosen per allocation site);
 *   - sizes from a few classes plus a random part, so many (size, stack)
 *     pairs, as a training job has;
 *   - about a thousand blocks live at a time, the oldest freed first.
 *
 *   cc -O2 -o heaptrack_workload analyzer/tools/heaptrack_workload.c
 *   heaptrack -o /tmp/w ./heaptrack_workload 3000000 && heaptrack_print /tmp/w.zst
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE 1024
#define SITES 300

static volatile unsigned sink;

/* One frame of the chain: four call sites, picked by two bits of the path,
 * each a distinct return address (the stores around the calls keep the
 * compiler from merging them or turning them into tail calls). */
__attribute__((noipa)) static void* frame(int depth, unsigned path, size_t size) {
  void* p;
  if (depth == 0) return malloc(size);
  switch (path & 3) {
    case 0: sink = 0; p = frame(depth - 1, path >> 2, size); sink = 10; break;
    case 1: sink = 1; p = frame(depth - 1, path >> 2, size); sink = 11; break;
    case 2: sink = 2; p = frame(depth - 1, path >> 2, size); sink = 12; break;
    default: sink = 3; p = frame(depth - 1, path >> 2, size); sink = 13; break;
  }
  return p;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s EVENTS\n", argv[0]);
    return 2;
  }
  const long events = atol(argv[1]);
  static const size_t classes[] = {512, 8192, 32768, 65536};
  static void* live[LIVE];
  uint64_t state = 42;
  long calls = 0;
  for (long i = 0; calls + 2 <= events; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const unsigned slot = (unsigned)(i % LIVE);  /* the oldest block goes first */
    if (live[slot] != NULL) {
      free(live[slot]);
      live[slot] = NULL;
      ++calls;
    }
    const unsigned site = (unsigned)(state >> 33) % SITES;
    const int depth = 6 + (int)(site % 11);  /* 6 to 16 frames, fixed per site */
    const size_t size = classes[(state >> 20) & 3] + 64 * (size_t)((state >> 40) & 63);
    live[slot] = frame(depth - 1, site * 2654435761u, size);
    ((volatile char*)live[slot])[0] = 1;
    ++calls;
  }
  for (unsigned slot = 0; slot < LIVE && calls < events; ++slot) {
    if (live[slot] != NULL) {
      free(live[slot]);
      live[slot] = NULL;
      ++calls;
    }
  }
  printf("%ld\n", calls);
  return 0;
}
