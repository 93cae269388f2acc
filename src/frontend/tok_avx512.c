/* tok_avx512.c - the encoder's byte scans 64 bytes at a time with AVX-512BW, for the x86-64
 * CPUs that have it (k3_tok_simd decides at load; elsewhere tok_avx2.c's or the 16-byte build
 * runs): tok_scans64.h's scanner windows, UTF-8 check and run bound, with compares straight
 * into 64-bit masks, where the 16-byte build takes four blocks, a movemask per class and
 * block, and stops a window at the first block with a character it does not know. Every
 * function in this file is compiled for AVX-512BW (the pragma), so nothing here may run
 * before k3_tok_simd said so. */
#include "frontend/tok_internal.h"

#if K3_TOK_HAVE_X86_SIMD
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,popcnt,bmi,bmi2"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,popcnt,bmi,bmi2")
#endif
#include <immintrin.h>

#define K3_SCANS64_MASKED /* its own in_k, eq_k, load_after */

typedef __m512i vec;

static inline vec load64(const uint8_t *q) { return _mm512_loadu_si512(q); }
static inline __m512i z8(int c) { return _mm512_set1_epi8((char)c); }
static inline uint64_t high(vec v) { return _mm512_movepi8_mask(v); }

/* The bytes of v in [lo, hi] (unsigned, lo <= hi), of those in k. */
static inline uint64_t in_k(uint64_t k, vec v, int lo, int hi)
{
    return _mm512_mask_cmplt_epu8_mask(k, _mm512_sub_epi8(v, z8(lo)), z8(hi - lo + 1));
}
static inline uint64_t in(vec v, int lo, int hi) { return in_k(~0ull, v, lo, hi); }
static inline uint64_t eq_k(uint64_t k, vec v, int c) { return _mm512_mask_cmpeq_epi8_mask(k, v, z8(c)); }
static inline uint64_t eq(vec v, int c) { return _mm512_cmpeq_epi8_mask(v, z8(c)); }

/* Masked loads: the bytes after the text's end read zeros, and no fault. */
static inline void load_after(const uint8_t *q, size_t rest, vec *v1, vec *v2)
{
    uint64_t m1 = rest > 64 ? ~0ull : ~0ull >> 1, m2 = rest > 65 ? ~0ull : ~0ull >> (66 - rest);
    *v1 = _mm512_maskz_loadu_epi8(m1, q + 1);
    *v2 = _mm512_maskz_loadu_epi8(m2, q + 2);
}

#include "frontend/tok_scans64.h"

size_t k3_pretok_batch_avx512(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max)
{
    return pretok_batch(s, p, n, ends, max);
}

size_t k3_utf8_valid_prefix_avx512(const uint8_t *s, size_t n) { return scans64_utf8_valid_prefix(s, n); }

int k3_runs_bounded_avx512(const uint8_t *s, size_t n, size_t *cuts, size_t *n_cuts)
{
    return runs_bounded(s, n, cuts, n_cuts);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
