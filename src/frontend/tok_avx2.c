/* tok_avx2.c - the encoder's byte scans 64 bytes at a time with AVX2, for the x86-64 CPUs
 * that have it but not AVX-512BW (most AMD EPYC before Zen 4, and the cloud machines built on
 * them; k3_tok_simd decides at load): the same three scans as tok_avx512.c, each 64-byte
 * block as two 32-byte halves whose compares become one 64-bit mask, where the 16-byte build
 * takes four blocks and stops a window at the first block with a character it does not know.
 * Everything else is the same source as the base build; the results are the same
 * (test_tokenizer runs every build the CPU has on the same texts). Every function in this
 * file is compiled for AVX2 (the pragma), so nothing here may run before k3_tok_simd said so. */
#include "frontend/tok_internal.h"

#if K3_TOK_HAVE_X86_SIMD
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,popcnt,bmi,bmi2"))), apply_to = function)
#else
#pragma GCC target("avx2,popcnt,bmi,bmi2")
#endif
#include <immintrin.h>

#include "frontend/pretok_fast.h"
#include "frontend/tok_runs.h"
#include "frontend/unicode.h"

/* 64 bytes as two halves; masks bit i for byte i. */
struct v64 {
    __m256i a, b;
};

static inline struct v64 load64(const uint8_t *q)
{
    return (struct v64){_mm256_loadu_si256((const __m256i *)q), _mm256_loadu_si256((const __m256i *)(q + 32))};
}

static inline uint64_t mask64(__m256i a, __m256i b)
{
    return (uint32_t)_mm256_movemask_epi8(a) | (uint64_t)(uint32_t)_mm256_movemask_epi8(b) << 32;
}

/* The bytes >= 0x80. */
static inline uint64_t high(struct v64 v) { return mask64(v.a, v.b); }

/* The bytes in [lo, hi] (unsigned, hi - lo < 255): v - lo < hi - lo + 1 unsigned, as a signed
 * compare of both sides moved by 0x80 (one add, one compare a half). */
static inline uint64_t in(struct v64 v, int lo, int hi)
{
    __m256i bias = _mm256_set1_epi8((char)(0x80 - lo)), lim = _mm256_set1_epi8((char)((hi - lo + 1) ^ 0x80));
    return mask64(_mm256_cmpgt_epi8(lim, _mm256_add_epi8(v.a, bias)),
                  _mm256_cmpgt_epi8(lim, _mm256_add_epi8(v.b, bias)));
}

static inline uint64_t eq(struct v64 v, int c)
{
    __m256i x = _mm256_set1_epi8((char)c);
    return mask64(_mm256_cmpeq_epi8(v.a, x), _mm256_cmpeq_epi8(v.b, x));
}

static inline uint64_t in_k(uint64_t k, struct v64 v, int lo, int hi) { return k & in(v, lo, hi); }
static inline uint64_t eq_k(uint64_t k, struct v64 v, int c) { return k & eq(v, c); }

/* The window's classes (struct k3_win_cls), all 64 bytes: the same sets as tok_avx512.c's
 * (and k3_ascii_cls16, k3_cjk16, k3_punct16, k3_lat16; v1, v2: the bytes after each). */
K3_SIMD_INLINE void win_classify(const uint8_t *s, size_t p, size_t n, struct k3_win_cls *c)
{
    const uint8_t *q = s + p;
    struct v64 v = load64(q);
    uint64_t sp = eq(v, ' ');
    *c = (struct k3_win_cls){
        .hi = high(v),
        .up = in(v, 'A', 'Z'),
        .lo = in(v, 'a', 'z'),
        .dg = in(v, '0', '9'),
        .ws = in(v, 0x09, 0x0D) | sp,
        .cr = eq(v, '\r') | eq(v, '\n'),
        .sp = sp,
        .ap = eq(v, '\''),
        .known = ~0ull,
    };
    if (!c->hi) return;
    /* The bytes after each: within the text, or zeros past its end (as tok_avx512.c's masked
     * loads; a character of valid UTF-8 never reaches past it). */
    size_t rest = n - p; /* >= 64 */
    struct v64 v1, v2;
    if (rest >= 66) {
        v1 = load64(q + 1);
        v2 = load64(q + 2);
    } else {
        uint8_t tail[66] = {0};
        memcpy(tail, q, rest);
        v1 = load64(tail + 1);
        v2 = load64(tail + 2);
    }
    uint64_t e3 = eq(v, 0xE3), c3 = eq(v, 0xC3), d0 = eq(v, 0xD0);
    c->han = in(v, 0xE5, 0xE9) | in_k(eq(v, 0xE4), v1, 0xB8, 0xFF);
    uint64_t hangul = in(v, 0xEB, 0xEC) | in_k(eq(v, 0xEA), v1, 0xB0, 0xFF) | in_k(eq(v, 0xED), v1, 0x00, 0x9D);
    uint64_t kana = in_k(eq_k(e3, v1, 0x81), v2, 0x81, 0xFF) | (eq_k(e3, v1, 0x82) & ~in(v2, 0x97, 0xA0)) |
                    (eq_k(e3, v1, 0x83) & ~eq(v2, 0xBB));
    c->both = hangul | kana;
    c->pl = in_k(eq_k(eq(v, 0xE2), v1, 0x80), v2, 0x93, 0xA7) |
            (eq_k(e3, v1, 0x80) & (in(v2, 0x81, 0x83) | in(v2, 0x88, 0x91))) |
            (eq_k(eq(v, 0xEF), v1, 0xBC) & (in(v2, 0x81, 0x8F) | in(v2, 0x9A, 0xA0)));
    c->u2 = (c3 & (in(v1, 0x80, 0x96) | in(v1, 0x98, 0x9E))) | in_k(d0, v1, 0x80, 0xAF);
    c->l2 = in_k(c3 & ~eq(v1, 0xB7), v1, 0x9F, 0xBF) | in_k(d0, v1, 0xB0, 0xBF) | in_k(eq(v, 0xD1), v1, 0x80, 0x9F);
}

size_t k3_pretok_batch_avx2(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max)
{
    return pretok_batch(s, p, n, ends, max);
}

/* The same blocks as k3_utf8_valid_prefix's (unicode_simd.h, struct k3_utf8_blk), 64 bytes
 * each; the first failing block, and the tail, go to it from the character start before. */
size_t k3_utf8_valid_prefix_avx2(const uint8_t *s, size_t n)
{
    size_t i = 0;
    uint64_t carry = 0; /* continuation bytes the blocks before still need, from bit 0 */
    for (; i + 65 <= n; i += 64) {
        struct v64 v = load64(s + i);
        if (!(high(v) | carry)) continue;
        struct v64 v1 = load64(s + i + 1);
        uint64_t cont = in(v, 0x80, 0xBF), l2 = in(v, 0xC2, 0xDF), l3 = in(v, 0xE0, 0xEF), l4 = in(v, 0xF0, 0xF4);
        uint64_t bad = in(v, 0xC0, 0xC1) | in(v, 0xF5, 0xFF) | in_k(eq(v, 0xE0), v1, 0x80, 0x9F) |
                       in_k(eq(v, 0xED), v1, 0xA0, 0xBF) | in_k(eq(v, 0xF0), v1, 0x80, 0x8F) |
                       in_k(eq(v, 0xF4), v1, 0x90, 0xBF);
        uint64_t need = carry | (l2 | l3 | l4) << 1 | (l3 | l4) << 2 | l4 << 3;
        if (bad || need != cont) break;
        carry = (l2 | l3 | l4) >> 63 | (l3 | l4) >> 62 | l4 >> 61;
    }
    if (carry) /* i is inside a character whose lead (before i, all valid) is the last non-continuation byte */
        do i--;
        while ((s[i] & 0xC0) == 0x80);
    return i + k3_utf8_valid_prefix(s + i, n - i);
}

/* 64 bytes for runs_bounded (tok_runs.h): the sets of k3_cut_blk16. */
K3_SIMD_INLINE struct k3_cut64 cut_classify(const uint8_t *s)
{
    struct v64 v = load64(s);
    uint64_t sp = in(v, 0x09, 0x0D) | in(v, 0x1C, 0x20);
    uint64_t ns = (~high(v) & ~sp) | in(v, 0xC3, 0xE0) | in(v, 0xE4, 0xFF);
    return (struct k3_cut64){sp != 0, ns != 0, in(v, 0x80, 0xBF)};
}

int k3_runs_bounded_avx2(const uint8_t *s, size_t n, size_t *cuts, size_t *n_cuts)
{
    return runs_bounded(s, n, cuts, n_cuts);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
