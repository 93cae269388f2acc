/* tok_scans64.h - the encoder's byte scans over 64-byte blocks whose classes are bit masks
 * (bit i for byte i), compiled once per SIMD build: tok_avx2.c and tok_avx512.c on x86-64,
 * tok_neon.c on aarch64. The includer compiles for its ISA (x86: a target pragma before the
 * include) and defines the vector type and the operations that differ:
 *   vec v = load64(q)          the 64 bytes at q;
 *   load_after(q, rest, &v1, &v2)   the bytes at q + 1 and q + 2 (rest >= 64 readable at q;
 *                              zeros past it: a character of valid UTF-8 never reaches there);
 *   high(v)                    the bytes >= 0x80;
 *   in(v, lo, hi), eq(v, c)    the bytes in [lo, hi] (unsigned, hi - lo < 255), equal to c;
 *   in_k(k, ...), eq_k(k, ...) the same within the mask k.
 * A build with byte-masked loads and compares (AVX-512) defines K3_SCANS64_MASKED and all of
 * these; for the others (AVX2, NEON) this file defines the last three from the rest.
 * With these: the pre-tokenizer's window classes (win_classify, for pretok_fast.h), the UTF-8
 * check (scans64_utf8_valid_prefix) and the wrapper's run bound (cut_classify, for tok_runs.h).
 * The results are the base build's (test_tokenizer runs every build the CPU has). */
#ifndef K3_FRONTEND_TOK_SCANS64_H
#define K3_FRONTEND_TOK_SCANS64_H

#include "frontend/pretok_fast.h"
#include "frontend/tok_runs.h"
#include "frontend/unicode.h"

#include <string.h>

#ifndef K3_SCANS64_MASKED
static inline uint64_t in_k(uint64_t k, vec v, int lo, int hi) { return k & in(v, lo, hi); }
static inline uint64_t eq_k(uint64_t k, vec v, int c) { return k & eq(v, c); }

/* No masked loads: within 2 bytes of the end, the bytes are copied first. */
static inline void load_after(const uint8_t *q, size_t rest, vec *v1, vec *v2)
{
    if (rest >= 66) {
        *v1 = load64(q + 1);
        *v2 = load64(q + 2);
        return;
    }
    uint8_t tail[66] = {0};
    memcpy(tail, q, rest);
    *v1 = load64(tail + 1);
    *v2 = load64(tail + 2);
}
#endif

/* The window's classes (struct k3_win_cls), all 64 bytes: the same sets as k3_ascii_cls16,
 * k3_cjk16, k3_punct16 and k3_lat16 (unicode_simd.h; v1, v2: the bytes after each). */
K3_SIMD_INLINE void win_classify(const uint8_t *s, size_t p, size_t n, struct k3_win_cls *c)
{
    const uint8_t *q = s + p;
    vec v = load64(q);
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
    vec v1, v2;
    load_after(q, n - p, &v1, &v2);
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

/* The same blocks as k3_utf8_valid_prefix's (unicode_simd.h, struct k3_utf8_blk), 64 bytes
 * each; the first failing block, and the tail, go to it from the character start before. */
static inline size_t scans64_utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    uint64_t carry = 0; /* continuation bytes the blocks before still need, from bit 0 */
    for (; i + 65 <= n; i += 64) {
        vec v = load64(s + i);
        if (!(high(v) | carry)) continue;
        vec v1 = load64(s + i + 1);
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
    vec v = load64(s);
    uint64_t sp = in(v, 0x09, 0x0D) | in(v, 0x1C, 0x20);
    uint64_t ns = (~high(v) & ~sp) | in(v, 0xC3, 0xE0) | in(v, 0xE4, 0xFF);
    return (struct k3_cut64){sp != 0, ns != 0, in(v, 0x80, 0xBF)};
}

#endif
