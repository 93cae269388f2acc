/* unicode_simd.h - classifying 16 bytes of valid UTF-8 at once, for the encoder's whole-text
 * passes (the UTF-8 check and the wrapper's isspace runs, tokenizer.c) and the pre-tokenizer
 * (ASCII letters and classes, pretok.c).
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

/* The pre-tokenizer's per-window helpers: always inlined (a call costs more than a block). */
#if defined(__GNUC__) || defined(__clang__)
#define K3_SIMD_INLINE static inline __attribute__((always_inline))
#else
#define K3_SIMD_INLINE static inline
#endif

#if defined(__SSE2__) && !defined(K3_TOK_NO_SIMD)
#include <emmintrin.h>
#define K3_BLK_SIMD "sse2"
#define K3_BLK_HAVE_SIMD 1
#elif defined(__aarch64__) && defined(__ARM_NEON) && !defined(K3_TOK_NO_SIMD)
#include <arm_neon.h>
#define K3_BLK_SIMD "neon"
#define K3_BLK_HAVE_SIMD 1
#else
#define K3_BLK_SIMD "none"
#define K3_BLK_HAVE_SIMD 0 /* the byte loops */
#endif

struct k3_blk {
    uint32_t hi, cont, space;
};

/* For the UTF-8 check (k3_utf8_blk16, same conventions, reads p[0..17)):
 *   cont  continuation bytes;  l2, l3, l4  lead bytes of 2-, 3- and 4-byte sequences
 *   (C2-DF, E0-EF, F0-F4);  bad  bytes that are never valid (C0, C1, F5-FF) and leads whose
 *   next byte is outside their narrower range (E0 A0-BF, ED 80-9F, F0 90-BF, F4 80-8F),
 *   assuming that next byte is a continuation byte (the structure check tests that). */
struct k3_utf8_blk {
    uint32_t hi, cont, l2, l3, l4, bad;
};

/* For the wrapper's run cuts on long texts (k3_cut_blk16, reads p[0..16)): sp = ASCII
 * isspace bytes; ns = bytes that start a non-space character for sure: ASCII non-space, or
 * a lead byte other than C2, E1, E2, E3 (the leads of every non-ASCII space); cont =
 * continuation bytes. Runs are bounded by these conservatively (tokenizer.c). */
struct k3_cut_blk {
    uint32_t sp, ns, cont;
};

static inline struct k3_cut_blk k3_cut_blk16_scalar(const uint8_t *p)
{
    struct k3_cut_blk r = {0, 0, 0};
    for (int i = 0; i < 16; i++) {
        uint8_t b = p[i];
        int sp = (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x20);
        r.sp |= (uint32_t)sp << i;
        r.ns |= (uint32_t)((b < 0x80 && !sp) || (b >= 0xC3 && b <= 0xE0) || b >= 0xE4) << i;
        r.cont |= (uint32_t)(b >= 0x80 && b <= 0xBF) << i;
    }
    return r;
}

/* ASCII letters of p[0..16): bit i of *up / *lo when p[i] is in A-Z / a-z. */
static inline void k3_letters16_scalar(const uint8_t *p, uint32_t *up, uint32_t *lo)
{
    *up = *lo = 0;
    for (int i = 0; i < 16; i++) {
        *up |= (uint32_t)(p[i] >= 'A' && p[i] <= 'Z') << i;
        *lo |= (uint32_t)(p[i] >= 'a' && p[i] <= 'z') << i;
    }
}

/* ASCII classes of p[0..16) for the pre-tokenizer's 64-byte windows (pretok.c), bit i for
 * p[i]: hi >= 0x80; up A-Z; lo a-z; digit 0-9; ws \s (0x09-0x0D, 0x20); crlf CR, LF;
 * sp ' '; apos '\''. */
struct k3_ascii_cls {
    uint32_t hi, up, lo, digit, ws, crlf, sp, apos;
};

static inline struct k3_ascii_cls k3_ascii_cls16_scalar(const uint8_t *p)
{
    struct k3_ascii_cls r = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 16; i++) {
        uint8_t b = p[i];
        r.hi |= (uint32_t)(b >> 7) << i;
        r.up |= (uint32_t)(b >= 'A' && b <= 'Z') << i;
        r.lo |= (uint32_t)(b >= 'a' && b <= 'z') << i;
        r.digit |= (uint32_t)(b >= '0' && b <= '9') << i;
        r.ws |= (uint32_t)((b >= 0x09 && b <= 0x0D) || b == ' ') << i;
        r.crlf |= (uint32_t)(b == '\r' || b == '\n') << i;
        r.sp |= (uint32_t)(b == ' ') << i;
        r.apos |= (uint32_t)(b == '\'') << i;
    }
    return r;
}

/* CJK characters the pre-tokenizer classifies without the Unicode table (pretok.c), bit i
 * for a 3-byte sequence starting at p[i] (reads p[0..18)): han  U+4E00-U+9FFF (Han);
 * both  Hangul syllables U+AC00-U+D77F, kana U+3041-U+3096, U+30A1-U+30FF but U+30FB (Lo or
 * Lm: in the pattern's U and W sets); and apart (k3_punct16, only where those do not cover a
 * block) punct  U+2013-U+2027, U+3001-U+3003, U+3008-U+3011, U+FF01-U+FF0F, U+FF1A-U+FF20
 * (dashes, quotes, CJK and fullwidth punctuation: no letter, digit or space).
 * test_tokenizer checks all three against the Unicode table. */
struct k3_cjk_blk {
    uint32_t han, both;
};

static inline int k3_cjk_punct_at(uint8_t b, uint8_t b1, uint8_t b2)
{
    if (b == 0xE2) return b1 == 0x80 && b2 >= 0x93 && b2 <= 0xA7;
    if (b == 0xE3) return b1 == 0x80 && ((b2 >= 0x81 && b2 <= 0x83) || (b2 >= 0x88 && b2 <= 0x91));
    if (b == 0xEF) return b1 == 0xBC && ((b2 >= 0x81 && b2 <= 0x8F) || (b2 >= 0x9A && b2 <= 0xA0));
    return 0;
}

static inline int k3_cjk_han_at(uint8_t b, uint8_t b1) { return (b >= 0xE5 && b <= 0xE9) || (b == 0xE4 && b1 >= 0xB8); }

static inline int k3_cjk_both_at(uint8_t b, uint8_t b1, uint8_t b2)
{
    if (b == 0xEB || b == 0xEC) return 1;
    if (b == 0xEA) return b1 >= 0xB0;
    if (b == 0xED) return b1 <= 0x9D;
    if (b == 0xE3)
        return (b1 == 0x81 && b2 >= 0x81) || (b1 == 0x82 && (b2 <= 0x96 || b2 >= 0xA1)) || (b1 == 0x83 && b2 != 0xBB);
    return 0;
}

static inline struct k3_cjk_blk k3_cjk16_scalar(const uint8_t *p)
{
    struct k3_cjk_blk r = {0, 0};
    for (int i = 0; i < 16; i++) {
        r.han |= (uint32_t)k3_cjk_han_at(p[i], p[i + 1]) << i;
        r.both |= (uint32_t)k3_cjk_both_at(p[i], p[i + 1], p[i + 2]) << i;
    }
    return r;
}

static inline uint32_t k3_punct16_scalar(const uint8_t *p)
{
    uint32_t r = 0;
    for (int i = 0; i < 16; i++) r |= (uint32_t)k3_cjk_punct_at(p[i], p[i + 1], p[i + 2]) << i;
    return r;
}

/* 2-byte letters the pre-tokenizer classifies without the Unicode table (pretok.c), bit i
 * for a sequence starting at p[i] (reads p[0..17)): up  U+00C0-U+00D6, U+00D8-U+00DE,
 * U+0400-U+042F (Lu: in U only); lo  U+00DF-U+00F6, U+00F8-U+00FF, U+0430-U+045F (Ll: in W
 * only). test_tokenizer checks both against the Unicode table. */
struct k3_lat_blk {
    uint32_t up, lo;
};

static inline int k3_lat_up_at(uint8_t b, uint8_t b1)
{
    return (b == 0xC3 && ((b1 >= 0x80 && b1 <= 0x96) || (b1 >= 0x98 && b1 <= 0x9E))) ||
           (b == 0xD0 && b1 >= 0x80 && b1 <= 0xAF);
}

static inline int k3_lat_lo_at(uint8_t b, uint8_t b1)
{
    return (b == 0xC3 && b1 >= 0x9F && b1 <= 0xBF && b1 != 0xB7) || (b == 0xD0 && b1 >= 0xB0 && b1 <= 0xBF) ||
           (b == 0xD1 && b1 >= 0x80 && b1 <= 0x9F);
}

static inline struct k3_lat_blk k3_lat16_scalar(const uint8_t *p)
{
    struct k3_lat_blk r = {0, 0};
    for (int i = 0; i < 16; i++) {
        r.up |= (uint32_t)k3_lat_up_at(p[i], p[i + 1]) << i;
        r.lo |= (uint32_t)k3_lat_lo_at(p[i], p[i + 1]) << i;
    }
    return r;
}

static inline struct k3_utf8_blk k3_utf8_blk16_scalar(const uint8_t *p)
{
    struct k3_utf8_blk r = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 16; i++) {
        uint8_t b = p[i], b1 = p[i + 1];
        r.hi |= (uint32_t)(b >> 7) << i;
        r.cont |= (uint32_t)(b >= 0x80 && b <= 0xBF) << i;
        r.l2 |= (uint32_t)(b >= 0xC2 && b <= 0xDF) << i;
        r.l3 |= (uint32_t)(b >= 0xE0 && b <= 0xEF) << i;
        r.l4 |= (uint32_t)(b >= 0xF0 && b <= 0xF4) << i;
        int bad = b == 0xC0 || b == 0xC1 || b >= 0xF5 || (b == 0xE0 && b1 < 0xA0 && b1 >= 0x80) ||
                  (b == 0xED && b1 > 0x9F && b1 <= 0xBF) || (b == 0xF0 && b1 < 0x90 && b1 >= 0x80) ||
                  (b == 0xF4 && b1 > 0x8F && b1 <= 0xBF);
        r.bad |= (uint32_t)bad << i;
    }
    return r;
}

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
/* 0xFF where lo <= byte <= hi (lo <= hi, unsigned): byte - lo, unsigned, below hi - lo + 1,
 * compared signed with both sides' top bit flipped; two operations where the signed pair of
 * compares takes three. */
static inline __m128i k3_sse_in(__m128i v, int lo, int hi)
{
    return _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8((char)(0x80 - lo))),
                          _mm_set1_epi8((char)(hi - lo + 1 + 0x80)));
}

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

static inline void k3_letters16(const uint8_t *p, uint32_t *up, uint32_t *lo)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    *up = (uint32_t)_mm_movemask_epi8(k3_sse_in(v, 'A', 'Z'));
    *lo = (uint32_t)_mm_movemask_epi8(k3_sse_in(v, 'a', 'z'));
}

K3_SIMD_INLINE struct k3_ascii_cls k3_ascii_cls16(const uint8_t *p)
{
    /* signed compares: bytes >= 0x80 are negative and fall outside every ASCII range */
    __m128i v = _mm_loadu_si128((const __m128i *)p);
#define K3_B(x) _mm_set1_epi8((char)(x))
#define K3_IN(lo, hi) k3_sse_in(v, lo, hi)
    __m128i sp = _mm_cmpeq_epi8(v, K3_B(' '));
    struct k3_ascii_cls r;
    r.hi = (uint32_t)_mm_movemask_epi8(v);
    r.up = (uint32_t)_mm_movemask_epi8(K3_IN('A', 'Z'));
    r.lo = (uint32_t)_mm_movemask_epi8(K3_IN('a', 'z'));
    r.digit = (uint32_t)_mm_movemask_epi8(K3_IN('0', '9'));
    r.ws = (uint32_t)_mm_movemask_epi8(_mm_or_si128(K3_IN(0x09, 0x0D), sp));
    r.crlf = (uint32_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, K3_B('\r')), _mm_cmpeq_epi8(v, K3_B('\n'))));
    r.sp = (uint32_t)_mm_movemask_epi8(sp);
    r.apos = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, K3_B('\'')));
#undef K3_IN
#undef K3_B
    return r;
}

K3_SIMD_INLINE struct k3_cjk_blk k3_cjk16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 1));
    __m128i v2 = _mm_loadu_si128((const __m128i *)(p + 2));
#define K3_B(x) _mm_set1_epi8((char)(x))
#define K3_EQ(x, c) _mm_cmpeq_epi8(x, K3_B(c))
#define K3_GE(x, c) _mm_cmpeq_epi8(_mm_max_epu8(x, K3_B(c)), x) /* unsigned */
#define K3_LE(x, c) _mm_cmpeq_epi8(_mm_min_epu8(x, K3_B(c)), x)
    __m128i han = _mm_or_si128(_mm_and_si128(K3_GE(v, 0xE5), K3_LE(v, 0xE9)), _mm_and_si128(K3_EQ(v, 0xE4), K3_GE(v1, 0xB8)));
    __m128i hangul = _mm_or_si128(_mm_or_si128(K3_EQ(v, 0xEB), K3_EQ(v, 0xEC)),
                                  _mm_or_si128(_mm_and_si128(K3_EQ(v, 0xEA), K3_GE(v1, 0xB0)),
                                               _mm_and_si128(K3_EQ(v, 0xED), K3_LE(v1, 0x9D))));
    __m128i kana = _mm_or_si128(
        _mm_or_si128(_mm_and_si128(K3_EQ(v1, 0x81), K3_GE(v2, 0x81)),
                     _mm_and_si128(K3_EQ(v1, 0x82), _mm_or_si128(K3_LE(v2, 0x96), K3_GE(v2, 0xA1)))),
        _mm_andnot_si128(K3_EQ(v2, 0xBB), K3_EQ(v1, 0x83)));
    struct k3_cjk_blk r;
    r.han = (uint32_t)_mm_movemask_epi8(han);
    r.both = (uint32_t)_mm_movemask_epi8(_mm_or_si128(hangul, _mm_and_si128(K3_EQ(v, 0xE3), kana)));
    return r;
} /* (its macros serve k3_punct16 too) */

K3_SIMD_INLINE uint32_t k3_punct16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 1));
    __m128i v2 = _mm_loadu_si128((const __m128i *)(p + 2));
#define K3_IN(x, lo, hi) _mm_and_si128(K3_GE(x, lo), K3_LE(x, hi))
    __m128i punct = _mm_or_si128(
        _mm_and_si128(_mm_and_si128(K3_EQ(v, 0xE2), K3_EQ(v1, 0x80)), K3_IN(v2, 0x93, 0xA7)),
        _mm_or_si128(_mm_and_si128(_mm_and_si128(K3_EQ(v, 0xE3), K3_EQ(v1, 0x80)),
                                   _mm_or_si128(K3_IN(v2, 0x81, 0x83), K3_IN(v2, 0x88, 0x91))),
                     _mm_and_si128(_mm_and_si128(K3_EQ(v, 0xEF), K3_EQ(v1, 0xBC)),
                                   _mm_or_si128(K3_IN(v2, 0x81, 0x8F), K3_IN(v2, 0x9A, 0xA0)))));
    return (uint32_t)_mm_movemask_epi8(punct);
#undef K3_IN
#undef K3_LE
#undef K3_GE
#undef K3_EQ
#undef K3_B
}

K3_SIMD_INLINE struct k3_lat_blk k3_lat16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 1));
#define K3_B(x) _mm_set1_epi8((char)(x))
#define K3_EQ(x, c) _mm_cmpeq_epi8(x, K3_B(c))
#define K3_IN(x, lo, hi) _mm_and_si128(_mm_cmpeq_epi8(_mm_max_epu8(x, K3_B(lo)), x), _mm_cmpeq_epi8(_mm_min_epu8(x, K3_B(hi)), x))
    __m128i c3 = K3_EQ(v, 0xC3), d0 = K3_EQ(v, 0xD0);
    __m128i up = _mm_or_si128(_mm_and_si128(c3, _mm_or_si128(K3_IN(v1, 0x80, 0x96), K3_IN(v1, 0x98, 0x9E))),
                              _mm_and_si128(d0, K3_IN(v1, 0x80, 0xAF)));
    __m128i lo = _mm_or_si128(_mm_and_si128(c3, _mm_andnot_si128(K3_EQ(v1, 0xB7), K3_IN(v1, 0x9F, 0xBF))),
                              _mm_or_si128(_mm_and_si128(d0, K3_IN(v1, 0xB0, 0xBF)),
                                           _mm_and_si128(K3_EQ(v, 0xD1), K3_IN(v1, 0x80, 0x9F))));
    struct k3_lat_blk r;
    r.up = (uint32_t)_mm_movemask_epi8(up);
    r.lo = (uint32_t)_mm_movemask_epi8(lo);
#undef K3_IN
#undef K3_EQ
#undef K3_B
    return r;
}

static inline struct k3_cut_blk k3_cut_blk16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
#define K3_B(x) _mm_set1_epi8((char)(x))
    __m128i sp = _mm_or_si128(k3_sse_in(v, 0x09, 0x0D), k3_sse_in(v, 0x1C, 0x20));
    __m128i lead = _mm_or_si128(k3_sse_in(v, 0xC3, 0xE0), k3_sse_in(v, 0xE4, 0xFF));
    __m128i ascii_ns = _mm_andnot_si128(sp, _mm_cmpgt_epi8(v, K3_B(0xFF)));
    struct k3_cut_blk r;
    r.sp = (uint32_t)_mm_movemask_epi8(sp);
    r.ns = (uint32_t)_mm_movemask_epi8(_mm_or_si128(ascii_ns, lead));
    r.cont = (uint32_t)_mm_movemask_epi8(_mm_cmplt_epi8(v, K3_B(0xC0)));
#undef K3_B
    return r;
}

static inline struct k3_utf8_blk k3_utf8_blk16(const uint8_t *p)
{
    /* Signed compares: 0x80..0xBF = -128..-65, 0xC0..0xFF = -64..-1. */
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 1));
#define K3_B(x) _mm_set1_epi8((char)(x))
/* lo..hi inside C1..FF or 00..7E as signed bytes (lo - 1 and hi + 1 must not wrap) */
#define K3_IN(x, lo, hi) _mm_and_si128(_mm_cmpgt_epi8(x, K3_B((lo) - 1)), _mm_cmplt_epi8(x, K3_B((hi) + 1)))
    __m128i bad = _mm_or_si128(_mm_cmplt_epi8(v, K3_B(0xC2)), _mm_cmpgt_epi8(v, K3_B(0xF4)));
    bad = _mm_andnot_si128(_mm_cmplt_epi8(v, K3_B(0xC0)), bad); /* C0, C1 (and not 80..BF) */
    bad = _mm_and_si128(bad, _mm_cmplt_epi8(v, _mm_setzero_si128()));
    __m128i nr = _mm_or_si128(
        _mm_or_si128(_mm_and_si128(_mm_cmpeq_epi8(v, K3_B(0xE0)), _mm_cmplt_epi8(v1, K3_B(0xA0))),
                     _mm_and_si128(_mm_cmpeq_epi8(v, K3_B(0xED)), K3_IN(v1, 0xA0, 0xBF))),
        _mm_or_si128(_mm_and_si128(_mm_cmpeq_epi8(v, K3_B(0xF0)), _mm_cmplt_epi8(v1, K3_B(0x90))),
                     _mm_and_si128(_mm_cmpeq_epi8(v, K3_B(0xF4)), K3_IN(v1, 0x90, 0xBF))));
    struct k3_utf8_blk r;
    r.hi = (uint32_t)_mm_movemask_epi8(v);
    r.cont = (uint32_t)_mm_movemask_epi8(_mm_cmplt_epi8(v, K3_B(0xC0)));
    r.l2 = (uint32_t)_mm_movemask_epi8(K3_IN(v, 0xC2, 0xDF));
    r.l3 = (uint32_t)_mm_movemask_epi8(K3_IN(v, 0xE0, 0xEF));
    r.l4 = (uint32_t)_mm_movemask_epi8(K3_IN(v, 0xF0, 0xF4));
    r.bad = (uint32_t)_mm_movemask_epi8(_mm_or_si128(bad, nr));
#undef K3_IN
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

static inline void k3_letters16(const uint8_t *p, uint32_t *up, uint32_t *lo)
{
    uint8x16_t v = vld1q_u8(p);
    *up = k3_neon_mask(vandq_u8(vcgeq_u8(v, vdupq_n_u8('A')), vcleq_u8(v, vdupq_n_u8('Z'))));
    *lo = k3_neon_mask(vandq_u8(vcgeq_u8(v, vdupq_n_u8('a')), vcleq_u8(v, vdupq_n_u8('z'))));
}

K3_SIMD_INLINE struct k3_ascii_cls k3_ascii_cls16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p);
#define K3_B(x) vdupq_n_u8(x)
#define K3_IN(lo, hi) vandq_u8(vcgeq_u8(v, K3_B(lo)), vcleq_u8(v, K3_B(hi)))
    uint8x16_t sp = vceqq_u8(v, K3_B(' '));
    struct k3_ascii_cls r;
    r.hi = k3_neon_mask(vcgeq_u8(v, K3_B(0x80)));
    r.up = k3_neon_mask(K3_IN('A', 'Z'));
    r.lo = k3_neon_mask(K3_IN('a', 'z'));
    r.digit = k3_neon_mask(K3_IN('0', '9'));
    r.ws = k3_neon_mask(vorrq_u8(K3_IN(0x09, 0x0D), sp));
    r.crlf = k3_neon_mask(vorrq_u8(vceqq_u8(v, K3_B('\r')), vceqq_u8(v, K3_B('\n'))));
    r.sp = k3_neon_mask(sp);
    r.apos = k3_neon_mask(vceqq_u8(v, K3_B('\'')));
#undef K3_IN
#undef K3_B
    return r;
}

K3_SIMD_INLINE struct k3_cjk_blk k3_cjk16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p), v1 = vld1q_u8(p + 1), v2 = vld1q_u8(p + 2);
#define K3_B(x) vdupq_n_u8(x)
    uint8x16_t han = vorrq_u8(vandq_u8(vcgeq_u8(v, K3_B(0xE5)), vcleq_u8(v, K3_B(0xE9))),
                              vandq_u8(vceqq_u8(v, K3_B(0xE4)), vcgeq_u8(v1, K3_B(0xB8))));
    uint8x16_t hangul = vorrq_u8(vorrq_u8(vceqq_u8(v, K3_B(0xEB)), vceqq_u8(v, K3_B(0xEC))),
                                 vorrq_u8(vandq_u8(vceqq_u8(v, K3_B(0xEA)), vcgeq_u8(v1, K3_B(0xB0))),
                                          vandq_u8(vceqq_u8(v, K3_B(0xED)), vcleq_u8(v1, K3_B(0x9D)))));
    uint8x16_t kana = vorrq_u8(
        vorrq_u8(vandq_u8(vceqq_u8(v1, K3_B(0x81)), vcgeq_u8(v2, K3_B(0x81))),
                 vandq_u8(vceqq_u8(v1, K3_B(0x82)), vorrq_u8(vcleq_u8(v2, K3_B(0x96)), vcgeq_u8(v2, K3_B(0xA1))))),
        vbicq_u8(vceqq_u8(v1, K3_B(0x83)), vceqq_u8(v2, K3_B(0xBB))));
    struct k3_cjk_blk r;
    r.han = k3_neon_mask(han);
    r.both = k3_neon_mask(vorrq_u8(hangul, vandq_u8(vceqq_u8(v, K3_B(0xE3)), kana)));
    return r;
} /* (its macro serves k3_punct16 too) */

K3_SIMD_INLINE uint32_t k3_punct16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p), v1 = vld1q_u8(p + 1), v2 = vld1q_u8(p + 2);
#define K3_IN(x, lo, hi) vandq_u8(vcgeq_u8(x, K3_B(lo)), vcleq_u8(x, K3_B(hi)))
    uint8x16_t punct = vorrq_u8(
        vandq_u8(vandq_u8(vceqq_u8(v, K3_B(0xE2)), vceqq_u8(v1, K3_B(0x80))), K3_IN(v2, 0x93, 0xA7)),
        vorrq_u8(vandq_u8(vandq_u8(vceqq_u8(v, K3_B(0xE3)), vceqq_u8(v1, K3_B(0x80))),
                          vorrq_u8(K3_IN(v2, 0x81, 0x83), K3_IN(v2, 0x88, 0x91))),
                 vandq_u8(vandq_u8(vceqq_u8(v, K3_B(0xEF)), vceqq_u8(v1, K3_B(0xBC))),
                          vorrq_u8(K3_IN(v2, 0x81, 0x8F), K3_IN(v2, 0x9A, 0xA0)))));
    return k3_neon_mask(punct);
#undef K3_IN
#undef K3_B
}

K3_SIMD_INLINE struct k3_lat_blk k3_lat16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p), v1 = vld1q_u8(p + 1);
#define K3_B(x) vdupq_n_u8(x)
#define K3_IN(x, lo, hi) vandq_u8(vcgeq_u8(x, K3_B(lo)), vcleq_u8(x, K3_B(hi)))
    uint8x16_t c3 = vceqq_u8(v, K3_B(0xC3)), d0 = vceqq_u8(v, K3_B(0xD0));
    uint8x16_t up = vorrq_u8(vandq_u8(c3, vorrq_u8(K3_IN(v1, 0x80, 0x96), K3_IN(v1, 0x98, 0x9E))),
                             vandq_u8(d0, K3_IN(v1, 0x80, 0xAF)));
    uint8x16_t lo = vorrq_u8(vandq_u8(c3, vbicq_u8(K3_IN(v1, 0x9F, 0xBF), vceqq_u8(v1, K3_B(0xB7)))),
                             vorrq_u8(vandq_u8(d0, K3_IN(v1, 0xB0, 0xBF)),
                                      vandq_u8(vceqq_u8(v, K3_B(0xD1)), K3_IN(v1, 0x80, 0x9F))));
    struct k3_lat_blk r;
    r.up = k3_neon_mask(up);
    r.lo = k3_neon_mask(lo);
#undef K3_IN
#undef K3_B
    return r;
}

static inline struct k3_cut_blk k3_cut_blk16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p);
#define K3_B(x) vdupq_n_u8(x)
#define K3_IN(x, lo, hi) vandq_u8(vcgeq_u8(x, K3_B(lo)), vcleq_u8(x, K3_B(hi)))
    uint8x16_t sp = vorrq_u8(K3_IN(v, 0x09, 0x0D), K3_IN(v, 0x1C, 0x20));
    uint8x16_t lead = vorrq_u8(K3_IN(v, 0xC3, 0xE0), vcgeq_u8(v, K3_B(0xE4)));
    struct k3_cut_blk r;
    r.sp = k3_neon_mask(sp);
    r.ns = k3_neon_mask(vorrq_u8(vbicq_u8(vcltq_u8(v, K3_B(0x80)), sp), lead));
    r.cont = k3_neon_mask(K3_IN(v, 0x80, 0xBF));
#undef K3_IN
#undef K3_B
    return r;
}

static inline struct k3_utf8_blk k3_utf8_blk16(const uint8_t *p)
{
    uint8x16_t v = vld1q_u8(p), v1 = vld1q_u8(p + 1);
#define K3_B(x) vdupq_n_u8(x)
#define K3_IN(x, lo, hi) vandq_u8(vcgeq_u8(x, K3_B(lo)), vcleq_u8(x, K3_B(hi)))
    uint8x16_t bad = vorrq_u8(K3_IN(v, 0xC0, 0xC1), vcgeq_u8(v, K3_B(0xF5)));
    uint8x16_t nr = vorrq_u8(
        vorrq_u8(vandq_u8(vceqq_u8(v, K3_B(0xE0)), K3_IN(v1, 0x80, 0x9F)),
                 vandq_u8(vceqq_u8(v, K3_B(0xED)), K3_IN(v1, 0xA0, 0xBF))),
        vorrq_u8(vandq_u8(vceqq_u8(v, K3_B(0xF0)), K3_IN(v1, 0x80, 0x8F)),
                 vandq_u8(vceqq_u8(v, K3_B(0xF4)), K3_IN(v1, 0x90, 0xBF))));
    struct k3_utf8_blk r;
    r.hi = k3_neon_mask(vcgeq_u8(v, K3_B(0x80)));
    r.cont = k3_neon_mask(K3_IN(v, 0x80, 0xBF));
    r.l2 = k3_neon_mask(K3_IN(v, 0xC2, 0xDF));
    r.l3 = k3_neon_mask(K3_IN(v, 0xE0, 0xEF));
    r.l4 = k3_neon_mask(K3_IN(v, 0xF0, 0xF4));
    r.bad = k3_neon_mask(vorrq_u8(bad, nr));
#undef K3_IN
#undef K3_B
    return r;
}
#else
static inline struct k3_blk k3_blk16(const uint8_t *p) { return k3_blk16_scalar(p); }
static inline struct k3_utf8_blk k3_utf8_blk16(const uint8_t *p) { return k3_utf8_blk16_scalar(p); }
static inline struct k3_cut_blk k3_cut_blk16(const uint8_t *p) { return k3_cut_blk16_scalar(p); }
static inline void k3_letters16(const uint8_t *p, uint32_t *up, uint32_t *lo) { k3_letters16_scalar(p, up, lo); }
static inline struct k3_ascii_cls k3_ascii_cls16(const uint8_t *p) { return k3_ascii_cls16_scalar(p); }
static inline struct k3_cjk_blk k3_cjk16(const uint8_t *p) { return k3_cjk16_scalar(p); }
static inline uint32_t k3_punct16(const uint8_t *p) { return k3_punct16_scalar(p); }
static inline struct k3_lat_blk k3_lat16(const uint8_t *p) { return k3_lat16_scalar(p); }
#endif

/* Population counts of masks without a libgcc call on targets lacking the instruction. */
static inline int k3_popcount32(uint32_t x)
{
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    return (int)((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
}

static inline int k3_popcount64(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    return (int)((((x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full) * 0x0101010101010101ull) >> 56);
}

#endif
