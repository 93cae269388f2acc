/* unicode_simd.h - classifying 16 bytes of valid UTF-8 at once, for the encoder's whole-text
 * passes (the UTF-8 check and the wrapper's isspace runs, tokenizer.c).
 *
 * k3_blk16(p) reads p[0..18) (two bytes past the block, so that a character starting in the
 * block is classified from all its bytes) and returns bit masks, bit i for byte p[i]:
 *   hi     the byte is >= 0x80;
 *   cont   the byte is a continuation byte (10xxxxxx);
 *   space  a Python str.isspace() character starts here: ASCII 0x09-0x0D, 0x1C-0x20, or
 *          U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000
 *          (every non-ASCII code point with K3_UC_PYSPACE; test_tokenizer checks the list
 *          against the Unicode table).
 * Three implementations with one result: SSE2 (every x86-64), NEON (aarch64) and a portable
 * byte loop (test_tokenizer holds the SIMD one to it on random and crafted blocks). */
#ifndef K3_FRONTEND_UNICODE_SIMD_H
#define K3_FRONTEND_UNICODE_SIMD_H

#include <stdint.h>

#if defined(__SSE2__) && !defined(K3_TOK_NO_SIMD)
#include <emmintrin.h>
#define K3_BLK_SIMD "sse2"
#elif defined(__aarch64__) && defined(__ARM_NEON) && !defined(K3_TOK_NO_SIMD)
#include <arm_neon.h>
#define K3_BLK_SIMD "neon"
#else
#define K3_BLK_SIMD "none"
#endif

struct k3_blk {
    uint32_t hi, cont, space;
};

/* The definition, one byte at a time (b = p[i], b1 = p[i + 1], b2 = p[i + 2]). */
static inline int k3_blk_space_at(uint8_t b, uint8_t b1, uint8_t b2)
{
    if (b < 0x80) return (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x20);
    if (b == 0xC2) return b1 == 0x85 || b1 == 0xA0;
    if (b == 0xE1) return b1 == 0x9A && b2 == 0x80;
    if (b == 0xE2)
        return (b1 == 0x80 && ((b2 >= 0x80 && b2 <= 0x8A) || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF)) ||
               (b1 == 0x81 && b2 == 0x9F);
    if (b == 0xE3) return b1 == 0x80 && b2 == 0x80;
    return 0;
}

static inline struct k3_blk k3_blk16_scalar(const uint8_t *p)
{
    struct k3_blk r = {0, 0, 0};
    for (int i = 0; i < 16; i++) {
        r.hi |= (uint32_t)(p[i] >> 7) << i;
        r.cont |= (uint32_t)((p[i] & 0xC0) == 0x80) << i;
        r.space |= (uint32_t)k3_blk_space_at(p[i], p[i + 1], p[i + 2]) << i;
    }
    return r;
}

#if defined(__SSE2__) && !defined(K3_TOK_NO_SIMD)
static inline struct k3_blk k3_blk16(const uint8_t *p)
{
    /* Signed byte compares: 0x80..0xFF are negative, so ASCII ranges exclude them. */
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 1));
    __m128i v2 = _mm_loadu_si128((const __m128i *)(p + 2));
#define K3_B(x) _mm_set1_epi8((char)(x))
    __m128i asp = _mm_or_si128(_mm_and_si128(_mm_cmpgt_epi8(v, K3_B(0x08)), _mm_cmplt_epi8(v, K3_B(0x0E))),
                               _mm_and_si128(_mm_cmpgt_epi8(v, K3_B(0x1B)), _mm_cmplt_epi8(v, K3_B(0x21))));
    __m128i e2b = _mm_or_si128(_mm_cmplt_epi8(v2, K3_B(0x8B)), /* 0x80..0x8A */
                               _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v2, K3_B(0xA8)), _mm_cmpeq_epi8(v2, K3_B(0xA9))),
                                            _mm_cmpeq_epi8(v2, K3_B(0xAF))));
    __m128i e2 = _mm_and_si128(_mm_cmpeq_epi8(v, K3_B(0xE2)),
                               _mm_or_si128(_mm_and_si128(_mm_cmpeq_epi8(v1, K3_B(0x80)), e2b),
                                            _mm_and_si128(_mm_cmpeq_epi8(v1, K3_B(0x81)), _mm_cmpeq_epi8(v2, K3_B(0x9F)))));
    __m128i c2 = _mm_and_si128(_mm_cmpeq_epi8(v, K3_B(0xC2)),
                               _mm_or_si128(_mm_cmpeq_epi8(v1, K3_B(0x85)), _mm_cmpeq_epi8(v1, K3_B(0xA0))));
    __m128i e1 = _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(v, K3_B(0xE1)), _mm_cmpeq_epi8(v1, K3_B(0x9A))),
                               _mm_cmpeq_epi8(v2, K3_B(0x80)));
    __m128i e3 = _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(v, K3_B(0xE3)), _mm_cmpeq_epi8(v1, K3_B(0x80))),
                               _mm_cmpeq_epi8(v2, K3_B(0x80)));
    struct k3_blk r;
    r.hi = (uint32_t)_mm_movemask_epi8(v);
    r.cont = (uint32_t)_mm_movemask_epi8(_mm_cmplt_epi8(v, K3_B(0xC0)));
    r.space = (uint32_t)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(asp, e2), _mm_or_si128(c2, _mm_or_si128(e1, e3))));
#undef K3_B
    return r;
}
#elif defined(__aarch64__) && defined(__ARM_NEON) && !defined(K3_TOK_NO_SIMD)
static inline uint32_t k3_neon_mask(uint8x16_t m)
{
    static const uint8_t w[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t x = vandq_u8(m, vld1q_u8(w));
    return (uint32_t)vaddv_u8(vget_low_u8(x)) | (uint32_t)vaddv_u8(vget_high_u8(x)) << 8;
}

static inline struct k3_blk k3_blk16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p), v1 = vld1q_u8(p + 1), v2 = vld1q_u8(p + 2);
#define K3_B(x) vdupq_n_u8(x)
    uint8x16_t asp = vorrq_u8(vandq_u8(vcgeq_u8(v, K3_B(0x09)), vcleq_u8(v, K3_B(0x0D))),
                              vandq_u8(vcgeq_u8(v, K3_B(0x1C)), vcleq_u8(v, K3_B(0x20))));
    uint8x16_t e2b = vorrq_u8(vandq_u8(vcgeq_u8(v2, K3_B(0x80)), vcleq_u8(v2, K3_B(0x8A))),
                              vorrq_u8(vorrq_u8(vceqq_u8(v2, K3_B(0xA8)), vceqq_u8(v2, K3_B(0xA9))),
                                       vceqq_u8(v2, K3_B(0xAF))));
    uint8x16_t e2 = vandq_u8(vceqq_u8(v, K3_B(0xE2)),
                             vorrq_u8(vandq_u8(vceqq_u8(v1, K3_B(0x80)), e2b),
                                      vandq_u8(vceqq_u8(v1, K3_B(0x81)), vceqq_u8(v2, K3_B(0x9F)))));
    uint8x16_t c2 = vandq_u8(vceqq_u8(v, K3_B(0xC2)), vorrq_u8(vceqq_u8(v1, K3_B(0x85)), vceqq_u8(v1, K3_B(0xA0))));
    uint8x16_t e1 = vandq_u8(vandq_u8(vceqq_u8(v, K3_B(0xE1)), vceqq_u8(v1, K3_B(0x9A))), vceqq_u8(v2, K3_B(0x80)));
    uint8x16_t e3 = vandq_u8(vandq_u8(vceqq_u8(v, K3_B(0xE3)), vceqq_u8(v1, K3_B(0x80))), vceqq_u8(v2, K3_B(0x80)));
    struct k3_blk r;
    r.hi = k3_neon_mask(vcgeq_u8(v, K3_B(0x80)));
    r.cont = k3_neon_mask(vandq_u8(vcgeq_u8(v, K3_B(0x80)), vcltq_u8(v, K3_B(0xC0))));
    r.space = k3_neon_mask(vorrq_u8(vorrq_u8(asp, e2), vorrq_u8(c2, vorrq_u8(e1, e3))));
#undef K3_B
    return r;
}
#else
static inline struct k3_blk k3_blk16(const uint8_t *p) { return k3_blk16_scalar(p); }
#endif

/* Population count of a 32-bit mask without a libgcc call on targets lacking the instruction. */
static inline int k3_popcount32(uint32_t x)
{
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    return (int)((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
}

#endif
