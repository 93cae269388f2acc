/* synth.h - synthetic dumps for the writer's tests and benchmark: sample
 * lengths from a seed, token ids, loss masks and hidden rows that are a pure
 * function of (sample, dataset, row, column), so any rank can produce any
 * sample and a reader can check every value. Values are small integers, exact
 * in bf16, so bf16 files can be compared bit for bit too. */
#ifndef K3_TESTS_IO_SYNTH_H
#define K3_TESTS_IO_SYNTH_H

#include <stdint.h>

static inline uint64_t synth_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Lengths in [lo, hi]. */
static inline int64_t synth_len(uint64_t seed, int64_t s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(synth_mix(seed * 1000003u + (uint64_t)s) % (uint64_t)(hi - lo + 1));
}

static inline int32_t synth_token(int64_t s, int64_t t) { return (int32_t)((s * 7919 + t * 31) % 50000); }
static inline uint8_t synth_mask(int64_t s, int64_t t) { return (uint8_t)((s + t) % 3 != 0); }

static inline float synth_value(int64_t s, int ds, int64_t t, int64_t j)
{
    return (float)((s * 131 + t * 7 + j * 3 + ds * 17) % 251) - 125.0f;
}

#endif
