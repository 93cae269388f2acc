/* l3_thrash.c - a neighbour that takes the shared last-level cache: writes one 64-bit word in
 * every cache line of a buffer of MIB MiB, round after round, for SECONDS, on whatever core it
 * is pinned to. Run beside tok_bench and tiktoken on other cores, it puts them in the state
 * the GPU machine's host is in when another tenant takes the L3 (README "Run 82").
 *
 *   l3_thrash MIB SECONDS
 *
 * Prints the rounds it made and its write rate. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: l3_thrash MIB SECONDS\n");
        return 2;
    }
    size_t words = (size_t)atoi(argv[1]) << 17; /* 8-byte words in MIB MiB */
    double seconds = atof(argv[2]);
    volatile uint64_t *a = calloc(words, sizeof *a);
    if (!a || !words) {
        fprintf(stderr, "l3_thrash: cannot allocate %s MiB\n", argv[1]);
        return 1;
    }
    double t0 = k3_now_s(), t = t0;
    uint64_t rounds = 0;
    while (t - t0 < seconds) {
        for (size_t i = 0; i < words; i += 8) a[i] += rounds;
        rounds++;
        t = k3_now_s();
    }
    printf("l3_thrash: %llu rounds of %s MiB in %.1f s (%.1f GB/s of lines written)\n",
           (unsigned long long)rounds, argv[1], t - t0, (double)rounds * (double)words * 8 / (t - t0) / 1e9);
    return 0;
}
