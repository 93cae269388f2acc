/* tok_avx2.c - the encoder's byte scans 64 bytes at a time with AVX2, for the x86-64 CPUs
 * that have it but not AVX-512BW (most AMD EPYC before Zen 4, and the cloud machines built on
 * them; k3_tok_simd decides at load): tok_scans64.h's scanner windows, UTF-8 check and run
 * bound, each 64-byte block as two 32-byte halves whose compares become one 64-bit mask,
 * where the 16-byte build takes four blocks and stops a window at the first block with a
 * character it does not know. Every function in this file is compiled for AVX2 (the pragma),
 * so nothing here may run before k3_tok_simd said so. */
#include "frontend/tok_internal.h"

#if K3_TOK_HAVE_X86_SIMD
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,popcnt,bmi,bmi2"))), apply_to = function)
#else
#pragma GCC target("avx2,popcnt,bmi,bmi2")
#endif
#include <immintrin.h>

/* 64 bytes as two halves. */
typedef struct {
    __m256i a, b;
} vec;

static inline vec load64(const uint8_t *q)
{
    return (vec){_mm256_loadu_si256((const __m256i *)q), _mm256_loadu_si256((const __m256i *)(q + 32))};
}

static inline uint64_t mask64(__m256i a, __m256i b)
{
    return (uint32_t)_mm256_movemask_epi8(a) | (uint64_t)(uint32_t)_mm256_movemask_epi8(b) << 32;
}

static inline uint64_t high(vec v) { return mask64(v.a, v.b); }

/* v - lo < hi - lo + 1 unsigned, as a signed compare of both sides moved by 0x80 (one add,
 * one compare a half). */
static inline uint64_t in(vec v, int lo, int hi)
{
    __m256i bias = _mm256_set1_epi8((char)(0x80 - lo)), lim = _mm256_set1_epi8((char)((hi - lo + 1) ^ 0x80));
    return mask64(_mm256_cmpgt_epi8(lim, _mm256_add_epi8(v.a, bias)),
                  _mm256_cmpgt_epi8(lim, _mm256_add_epi8(v.b, bias)));
}

static inline uint64_t eq(vec v, int c)
{
    __m256i x = _mm256_set1_epi8((char)c);
    return mask64(_mm256_cmpeq_epi8(v.a, x), _mm256_cmpeq_epi8(v.b, x));
}

#include "frontend/tok_scans64.h"

size_t k3_pretok_batch_avx2(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max)
{
    return pretok_batch(s, p, n, ends, max);
}

size_t k3_utf8_valid_prefix_avx2(const uint8_t *s, size_t n) { return scans64_utf8_valid_prefix(s, n); }

int k3_runs_bounded_avx2(const uint8_t *s, size_t n, size_t *cuts, size_t *n_cuts)
{
    return runs_bounded(s, n, cuts, n_cuts);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
