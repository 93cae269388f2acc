/* pretok.c - the Kimi pre-tokenizer: a hand-written scanner for tokenization_kimi.py's
 * pat_str (research/frontend.md §1.2), with the regex engine's semantics reproduced
 * exactly. fancy-regex matches leftmost-first, alternatives in order, quantifiers greedy
 * with backtracking; find_iter restarts at the end of each match. Every character is
 * matched by some alternative, so the pieces tile the text.
 *
 *   1 [\p{Han}]+
 *   2 P? U* W+ C?        P = [^\r\n\p{L}\p{N}]   U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
 *   3 P? U+ W* C?        W = [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]   C = (?i:'s|'t|'re|'ve|'m|'ll|'d)
 *   4 \p{N}{1,3}
 *   5 ' '? O+ [\r\n]*    O = [^\s\p{L}\p{N}]
 *   6 \s*[\r\n]+         ends at the last CR/LF of the whitespace run
 *   7 \s+(?!\S)          the run minus its last character, or all of it at the end of text
 *   8 \s+
 *
 * Backtracking that matters: in 2, U* and W+ overlap (Lm, Lo, M are in both), so when no
 * W follows the maximal U run, W+ takes the last W-capable character of the run; the
 * optional prefix P? is tried with and then without (a mark can be a prefix or a letter);
 * 2 is tried completely (both prefix choices) before 3. The contraction is case-
 * insensitive under Unicode simple case folding: 'S, and 'ſ (U+017F) for 's.
 *
 * ASCII takes a byte table; other code points the generated Unicode 16.0 table. */
#include "frontend/pretok_fast.h"

#include "core/log.h"

/* Maximal run of characters having any of the bits `want`, from q. */
static inline size_t run_of(const uint8_t *s, size_t q, size_t n, unsigned want)
{
    while (q < n) {
        int len;
        if (!(char_at(s, q, &len) & want)) break;
        q += (size_t)len;
    }
    return q;
}

/* CJK runs 5 characters (15 bytes) a block where SIMD has the masks (k3_cjk16). */
#define K3_CJK_SIMD K3_BLK_HAVE_SIMD
#define K3_CJK_STARTS 0x1249u /* bits 0, 3, 6, 9, 12: the starts of 3-byte characters */

/* [\p{Han}]+ continued from q: 3-byte characters (nearly all Han) decoded inline. */
static inline size_t han_run(const uint8_t *s, size_t q, size_t n)
{
    for (;;) {
        if (K3_CJK_SIMD)
            while (q + 18 <= n) {
                uint32_t miss = ~k3_cjk16(s + q).han & K3_CJK_STARTS;
                if (miss) {
                    q += (size_t)__builtin_ctz(miss);
                    break;
                }
                q += 15;
            }
        if (!(q + 3 <= n && (s[q] & 0xF0) == 0xE0)) break;
        uint32_t cp = (uint32_t)(s[q] & 0x0F) << 12 | (uint32_t)(s[q + 1] & 0x3F) << 6 | (s[q + 2] & 0x3F);
        if (!(k3_uc_flags(cp) & K3_UC_HAN)) return q;
        q += 3;
    }
    return run_of(s, q, n, K3_UC_HAN);
}

/* The run from r of characters k3_cjk16 knows to be in both U and W (Hangul, kana). */
static inline size_t both_run(const uint8_t *s, size_t r, size_t n)
{
    while (r + 18 <= n) {
        uint32_t miss = ~k3_cjk16(s + r).both & K3_CJK_STARTS;
        if (miss) return r + (size_t)__builtin_ctz(miss);
        r += 15;
    }
    return r;
}

/* Alternative 2 without the prefix, from q: U* W+ C?. Returns the end or 0. */
static size_t alt_upper_lower(const uint8_t *s, size_t q, size_t n)
{
    size_t r = q, last_w_end = 0;
    unsigned f = 0; /* the flags of the character at r that ends the U run */
    while (r < n) {
        if (K3_CJK_SIMD && s[r] >= 0xE3 && s[r] <= 0xED) {
            size_t b = both_run(s, r, n);
            if (b != r) {
                r = last_w_end = b;
                if (r == n) break;
            }
        }
        int len;
        f = char_at(s, r, &len);
        if (!(f & K3_UC_UP)) break;
        r += (size_t)len;
        if (f & K3_UC_LO) last_w_end = r;
    }
    if (r < n && (f & K3_UC_LO)) return contraction(s, run_of(s, r, n, K3_UC_LO), n);
    /* W+ backtracks into the U run: the last W-capable character of it, alone (everything
     * after it in the run is Lu/Lt, and the character at r is not in W). */
    return last_w_end ? contraction(s, last_w_end, n) : 0;
}

/* Alternative 3 without the prefix, from q: U+ W* C?. Returns the end or 0. */
static size_t alt_upper(const uint8_t *s, size_t q, size_t n)
{
    size_t r = run_of(s, q, n, K3_UC_UP);
    if (r == q) return 0;
    return contraction(s, run_of(s, r, n, K3_UC_LO), n);
}

/* The classes of the window s[p..p+64), 16 bytes at a time (struct k3_win_cls). */
K3_SIMD_INLINE void win_classify(const uint8_t *s, size_t p, size_t n, struct k3_win_cls *cls)
{
    uint64_t hi = 0, up = 0, lo = 0, dg = 0, ws = 0, cr = 0, sp = 0, ap = 0;
    uint64_t han = 0, both = 0, pl = 0, u2 = 0, l2 = 0; /* lead bytes (k3_cjk16, k3_punct16, k3_lat16) */
    uint64_t known = ~0ull; /* the bytes classified */
    for (int k = 0; k < 4; k++) {
        struct k3_ascii_cls c = k3_ascii_cls16(s + p + 16 * k);
        hi |= (uint64_t)c.hi << 16 * k;
        up |= (uint64_t)c.up << 16 * k;
        lo |= (uint64_t)c.lo << 16 * k;
        dg |= (uint64_t)c.digit << 16 * k;
        ws |= (uint64_t)c.ws << 16 * k;
        cr |= (uint64_t)c.crlf << 16 * k;
        sp |= (uint64_t)c.sp << 16 * k;
        ap |= (uint64_t)c.apos << 16 * k;
        if (!c.hi) continue;
        /* non-ASCII: the characters the masks know, tried in turn while some byte of the
         * block has no class; up to the block of a character none knows */
        if (n - p < 16 * (size_t)k + 18) {
            known = (1ull << 16 * k) - 1;
            break;
        }
        struct k3_cjk_blk j = k3_cjk16(s + p + 16 * k);
        han |= (uint64_t)j.han << 16 * k;
        both |= (uint64_t)j.both << 16 * k;
#define K3_COVER(l3, l2) ((l3) | (l3) << 1 | (l3) << 2 | (l2) | (l2) << 1)
#define K3_REST (hi & ~K3_COVER(han | both | pl, u2 | l2)) >> 16 * k & 0xFFFF
        if (K3_REST) {
            struct k3_lat_blk l = k3_lat16(s + p + 16 * k);
            u2 |= (uint64_t)l.up << 16 * k;
            l2 |= (uint64_t)l.lo << 16 * k;
        }
        if (K3_REST) pl |= (uint64_t)k3_punct16(s + p + 16 * k) << 16 * k;
        if (K3_REST) {
            known = k == 3 ? ~0ull : (1ull << 16 * (k + 1)) - 1;
            break;
        }
#undef K3_REST
    }
#undef K3_COVER
    *cls = (struct k3_win_cls){hi, up, lo, dg, ws, cr, sp, ap, han, both, pl, u2, l2, known};
}

size_t k3_pretok_next(const uint8_t *s, size_t p, size_t n)
{
    size_t fast = ascii_piece(s, p, n);
    return fast ? fast : k3_pretok_general(s, p, n);
}

size_t k3_pretok_batch_base(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max)
{
    return pretok_batch(s, p, n, ends, max);
}

/* Every piece the ASCII fast path does not decide. */
size_t k3_pretok_general(const uint8_t *s, size_t p, size_t n)
{
    int len;
    unsigned f = char_at(s, p, &len);
    size_t q = p + (size_t)len, e;
    if (f & K3_UC_HAN) return han_run(s, q, n); /* 1 */
    int prefix = in_prefix(f, s[p]);
    /* 2, then 3: each with the prefix first, then without. */
    if (prefix && (e = alt_upper_lower(s, q, n))) return e;
    if ((f & (K3_UC_UP | K3_UC_LO)) && (e = alt_upper_lower(s, p, n))) return e;
    if (prefix && (e = alt_upper(s, q, n))) return e;
    if ((f & K3_UC_UP) && (e = alt_upper(s, p, n))) return e;
    if (f & K3_UC_N) { /* 4 */
        size_t r = q;
        for (int k = 1; k < 3 && r < n; k++) {
            int l2;
            if (!(char_at(s, r, &l2) & K3_UC_N)) break;
            r += (size_t)l2;
        }
        return r;
    }
    /* 5: ' '? O+ [\r\n]* */
    size_t o = (size_t)-1;
    if (in_punct(f)) o = p;
    else if (s[p] == ' ' && q < n) {
        int l2;
        if (in_punct(char_at(s, q, &l2))) o = q;
    }
    if (o != (size_t)-1) {
        size_t r = o;
        while (r < n) {
            int l2;
            if (!in_punct(char_at(s, r, &l2))) break;
            r += (size_t)l2;
        }
        while (r < n && is_crlf(s[r])) r++;
        return r;
    }
    K3_CHECK(f & K3_UC_WS, "pre-tokenizer: no alternative matches U+%04X", k3_utf8_decode(s + p, &len));
    /* 6, 7, 8 over the maximal whitespace run [p, r). */
    size_t r = p, last_crlf = (size_t)-1, last_start = p;
    while (r < n) {
        int l2;
        if (!(char_at(s, r, &l2) & K3_UC_WS)) break;
        if (is_crlf(s[r])) last_crlf = r;
        last_start = r;
        r += (size_t)l2;
    }
    if (last_crlf != (size_t)-1) return last_crlf + 1;  /* 6 */
    if (r == n || last_start == p) return r;            /* 7 at the end of text, or 8 */
    return last_start;                                  /* 7: leave the last one */
}
