/* mem_latency.c - the latency of a dependent random load over buffers of 16 KiB..128 MiB, on 2 MiB
 * pages where the kernel gives them: what a lookup in a table of that size costs when it
 * misses the caches. The tokenizer's first occurrences are chains of such loads (the
 * vocabulary's 16 MiB of slots, the 2 MiB pair table, the memos), so its time on new text
 * follows this machine's (and its neighbours') memory, where tiktoken's does not.
 *
 *   mem_latency [MAX_MIB (default 128)]
 *
 * Prints one line per size: KiB and nanoseconds per load. From 16 KiB, so that L1 and L2 show
 * (the host's L2 is 2 MiB, and some leases hold less of it than others: run 110). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "core/clock.h"

#define LINE 64
#define STEPS 4000000

/* A random cycle through the buffer's cache lines (Sattolo's shuffle); each line holds the
 * index of the next. */
static void make_cycle(uint64_t *a, size_t lines, uint64_t *seed)
{
    size_t *perm = malloc(lines * sizeof *perm);
    if (!perm) exit(1);
    for (size_t i = 0; i < lines; i++) perm[i] = i;
    for (size_t i = lines - 1; i > 0; i--) {
        *seed ^= *seed << 13, *seed ^= *seed >> 7, *seed ^= *seed << 17;
        size_t j = (size_t)(*seed % i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < lines; i++) a[perm[i] * (LINE / 8)] = perm[(i + 1) % lines] * (LINE / 8);
    free(perm);
}

int main(int argc, char **argv)
{
    size_t max_mib = argc > 1 ? (size_t)atoi(argv[1]) : 128;
    uint64_t seed = 88172645463325252ull;
    for (size_t kib = 16; kib <= max_mib << 10; kib *= 2) {
        size_t bytes = kib << 10, lines = bytes / LINE;
        uint64_t *a = aligned_alloc((size_t)2 << 20, bytes < ((size_t)2 << 20) ? (size_t)2 << 20 : bytes);
        if (!a) return 1;
#ifdef MADV_HUGEPAGE
        madvise(a, bytes, MADV_HUGEPAGE);
#endif
        make_cycle(a, lines, &seed);
        uint64_t p = 0;
        for (size_t i = 0; i < lines; i++) p = a[p]; /* once around: pages faulted, caches warm */
        double t0 = k3_now_s();
        for (size_t i = 0; i < STEPS; i++) p = a[p];
        double ns = (k3_now_s() - t0) / STEPS * 1e9;
        printf("%6zu KiB: %6.1f ns%s\n", kib, ns, p == UINT64_MAX ? " " : "");
        free(a);
    }
    return 0;
}
