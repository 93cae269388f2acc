/* tok_neon.c - the encoder's byte scans 64 bytes at a time with NEON, for aarch64 (Grace):
 * tok_scans64.h's scanner windows, UTF-8 check and run bound, each 64-byte block as four
 * 16-byte registers whose compares become one 64-bit mask in four pairwise adds, where the
 * 16-byte build takes four blocks, two horizontal adds per class and block (NEON has no
 * movemask), and stops a window at the first block with a character it does not know.
 * Every aarch64 CPU has NEON; K3_TOK_SIMD=base keeps the 16-byte build (k3_tok_simd). */
#include "frontend/tok_internal.h"

#if K3_TOK_HAVE_NEON64
#include <arm_neon.h>

typedef uint8x16x4_t vec;

static inline vec load64(const uint8_t *q) { return vld1q_u8_x4(q); }

/* The 64 compare results (0 or 0xFF a byte) as bits: each byte keeps its bit of its group
 * of 8, and pairwise adds sum each group into one byte. */
static inline uint64_t mask64(uint8x16_t a, uint8x16_t b, uint8x16_t c, uint8x16_t d)
{
    const uint8x16_t w = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t ab = vpaddq_u8(vandq_u8(a, w), vandq_u8(b, w));
    uint8x16_t cd = vpaddq_u8(vandq_u8(c, w), vandq_u8(d, w));
    uint8x16_t s = vpaddq_u8(ab, cd);
    return vgetq_lane_u64(vreinterpretq_u64_u8(vpaddq_u8(s, s)), 0);
}

static inline uint64_t high(vec v)
{
    uint8x16_t h = vdupq_n_u8(0x80);
    return mask64(vcgeq_u8(v.val[0], h), vcgeq_u8(v.val[1], h), vcgeq_u8(v.val[2], h), vcgeq_u8(v.val[3], h));
}

/* v - lo <= hi - lo, unsigned: one subtract, one compare a register. */
static inline uint64_t in(vec v, int lo, int hi)
{
    uint8x16_t l = vdupq_n_u8((uint8_t)lo), w = vdupq_n_u8((uint8_t)(hi - lo));
    return mask64(vcleq_u8(vsubq_u8(v.val[0], l), w), vcleq_u8(vsubq_u8(v.val[1], l), w),
                  vcleq_u8(vsubq_u8(v.val[2], l), w), vcleq_u8(vsubq_u8(v.val[3], l), w));
}

static inline uint64_t eq(vec v, int c)
{
    uint8x16_t x = vdupq_n_u8((uint8_t)c);
    return mask64(vceqq_u8(v.val[0], x), vceqq_u8(v.val[1], x), vceqq_u8(v.val[2], x), vceqq_u8(v.val[3], x));
}

#include "frontend/tok_scans64.h"

size_t k3_pretok_batch_neon(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max)
{
    return pretok_batch(s, p, n, ends, max);
}

size_t k3_utf8_valid_prefix_neon(const uint8_t *s, size_t n) { return scans64_utf8_valid_prefix(s, n); }

int k3_runs_bounded_neon(const uint8_t *s, size_t n, size_t *cuts, size_t *n_cuts)
{
    return runs_bounded(s, n, cuts, n_cuts);
}
#endif
