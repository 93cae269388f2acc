/* pretok_fast.h - the pre-tokenizer's fast paths: ASCII pieces, and 64-byte windows whose
 * piece starts come from byte-class masks (pretok.c holds the definition, the scanner every
 * other piece goes to). Compiled once per SIMD width: pretok.c (SSE2, NEON or the portable
 * loops), and through tok_scans64.h tok_avx2.c and tok_avx512.c (which k3_tok_simd picks where
 * the CPU has them) and tok_neon.c (aarch64). The includer defines win_classify, the one part
 * that differs. */
#ifndef K3_FRONTEND_PRETOK_FAST_H
#define K3_FRONTEND_PRETOK_FAST_H

#include "frontend/tok_internal.h"
#include "frontend/unicode.h"
#include "frontend/unicode_simd.h"

#include <string.h>

/* Words through 16-byte letter masks where SIMD has them (the byte loop would be slower
 * than the 8-byte runs below). */
#define K3_LETTERS_SIMD K3_BLK_HAVE_SIMD

/* ASCII flags (the same bits as the Unicode table), filled by the rules of the pattern
 * (pretok.c). */
#define A_L (K3_UC_L)
#define A_UP (K3_UC_UP | K3_UC_L)
#define A_LO (K3_UC_LO | K3_UC_L)
#define A_N (K3_UC_N)
#define A_WS (K3_UC_WS | K3_UC_PYSPACE)
static const uint8_t ascii_flags[128] = {
    ['\t'] = A_WS, ['\n'] = A_WS, ['\v'] = A_WS, ['\f'] = A_WS, ['\r'] = A_WS,
    [0x1C] = K3_UC_PYSPACE, [0x1D] = K3_UC_PYSPACE, [0x1E] = K3_UC_PYSPACE, [0x1F] = K3_UC_PYSPACE,
    [' '] = A_WS,
    ['0'] = A_N, ['1'] = A_N, ['2'] = A_N, ['3'] = A_N, ['4'] = A_N,
    ['5'] = A_N, ['6'] = A_N, ['7'] = A_N, ['8'] = A_N, ['9'] = A_N,
    ['A'] = A_UP, ['B'] = A_UP, ['C'] = A_UP, ['D'] = A_UP, ['E'] = A_UP, ['F'] = A_UP,
    ['G'] = A_UP, ['H'] = A_UP, ['I'] = A_UP, ['J'] = A_UP, ['K'] = A_UP, ['L'] = A_UP,
    ['M'] = A_UP, ['N'] = A_UP, ['O'] = A_UP, ['P'] = A_UP, ['Q'] = A_UP, ['R'] = A_UP,
    ['S'] = A_UP, ['T'] = A_UP, ['U'] = A_UP, ['V'] = A_UP, ['W'] = A_UP, ['X'] = A_UP,
    ['Y'] = A_UP, ['Z'] = A_UP,
    ['a'] = A_LO, ['b'] = A_LO, ['c'] = A_LO, ['d'] = A_LO, ['e'] = A_LO, ['f'] = A_LO,
    ['g'] = A_LO, ['h'] = A_LO, ['i'] = A_LO, ['j'] = A_LO, ['k'] = A_LO, ['l'] = A_LO,
    ['m'] = A_LO, ['n'] = A_LO, ['o'] = A_LO, ['p'] = A_LO, ['q'] = A_LO, ['r'] = A_LO,
    ['s'] = A_LO, ['t'] = A_LO, ['u'] = A_LO, ['v'] = A_LO, ['w'] = A_LO, ['x'] = A_LO,
    ['y'] = A_LO, ['z'] = A_LO,
};

/* Flags of the character at s[p] and its byte length. */
static inline unsigned char_at(const uint8_t *s, size_t p, int *len)
{
    if (s[p] < 0x80) {
        *len = 1;
        return ascii_flags[s[p]];
    }
    uint32_t cp = k3_utf8_decode(s + p, len);
    return k3_uc_flags(cp);
}

static inline int is_crlf(uint8_t c) { return c == '\r' || c == '\n'; }

/* P = [^\r\n\p{L}\p{N}] */
static inline int in_prefix(unsigned f, uint8_t first_byte)
{
    return !(f & (K3_UC_L | K3_UC_N)) && !is_crlf(first_byte);
}

/* O = [^\s\p{L}\p{N}] */
static inline int in_punct(unsigned f) { return !(f & (K3_UC_WS | K3_UC_L | K3_UC_N)); }

static inline int lower_eq(uint8_t c, char lc) { return (c | 0x20) == lc; }

/* C = (?i:'s|'t|'re|'ve|'m|'ll|'d)? at s[e]: the end after it. */
static inline size_t contraction(const uint8_t *s, size_t e, size_t n)
{
    if (e + 1 >= n || s[e] != '\'') return e;
    uint8_t c = s[e + 1];
    if (lower_eq(c, 's') || lower_eq(c, 't') || lower_eq(c, 'm') || lower_eq(c, 'd')) return e + 2;
    if (c == 0xC5 && e + 2 < n && s[e + 2] == 0xBF) return e + 3; /* U+017F folds to s */
    if (e + 2 < n) {
        uint8_t c2 = s[e + 2];
        if ((lower_eq(c, 'r') || lower_eq(c, 'v')) && lower_eq(c2, 'e')) return e + 3;
        if (lower_eq(c, 'l') && lower_eq(c2, 'l')) return e + 3;
    }
    return e;
}

/* ---- ASCII fast path ------------------------------------------------------------------
 * Most pieces of ordinary text are ASCII words with an optional leading space, or short
 * ASCII digit runs. For those the alternatives reduce to: [prefix] UPPER* lower* [C], where
 * the prefix is one byte (not CR/LF, not a letter or digit). The fast path takes only cases
 * whose end is decided by ASCII bytes; anything touching a byte >= 0x80 goes to the general
 * scanner, which is the definition. */

/* End of the run of bytes in [lo, hi] from q, 8 bytes at a time. */
static inline size_t ascii_range_run(const uint8_t *s, size_t q, size_t n, uint8_t lo, uint8_t hi)
{
#if K3_TOK_LE
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    while (q + 8 <= n) {
        uint64_t w;
        memcpy(&w, s + q, 8);
        /* per byte (all < 0x80 required): x >= lo and x <= hi, as the high bit of a sum */
        uint64_t ge = w + ones * (0x80 - lo), gt = w + ones * (0x7F - hi);
        uint64_t in = ge & ~gt & ~w & high;
        if (in != high) return q + (size_t)(__builtin_ctzll(~in & high) >> 3);
        q += 8;
    }
#endif
    while (q < n && s[q] >= lo && s[q] <= hi) q++;
    return q;
}

/* Alternative 5 from its O+ at o (ASCII): the punctuation run and [\r\n]*, or 0 when a
 * non-ASCII character (which may continue the run) ends it. */
static inline size_t ascii_punct(const uint8_t *s, size_t o, size_t n)
{
    size_t r = o;
    while (r < n && s[r] < 0x80 && in_punct(ascii_flags[s[r]])) r++;
    if (r < n && s[r] >= 0x80) return 0;
    while (r < n && is_crlf(s[r])) r++;
    return r;
}

/* Alternatives 6-8 over an ASCII whitespace run from p (as in k3_pretok_next), or 0 when a
 * non-ASCII character (which may be whitespace too) ends it. */
static inline size_t ascii_space(const uint8_t *s, size_t p, size_t n)
{
    size_t r = p, last_crlf = (size_t)-1, last_start = p;
    for (; r < n; r++) {
        if (s[r] >= 0x80) return 0;
        if (!(ascii_flags[s[r]] & K3_UC_WS)) break;
        if (is_crlf(s[r])) last_crlf = r;
        last_start = r;
    }
    if (last_crlf != (size_t)-1) return last_crlf + 1;
    if (r == n || last_start == p) return r;
    return last_start;
}

/* The piece at p if the fast path decides it, else 0. Inlined into the batch loop: most
 * pieces end here, and a call per piece costs more than the piece. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))
#endif
static inline size_t ascii_piece(const uint8_t *s, size_t p, size_t n)
{
    uint8_t c = s[p];
    size_t q = p;
    if (c >= '0' && c <= '9') { /* \p{N}{1,3}: ASCII digits, unless a non-ASCII N could follow */
        size_t r = p + 1;
        while (r < n && r < p + 3 && s[r] >= '0' && s[r] <= '9') r++;
        if (r < n && r < p + 3 && s[r] >= 0x80) return 0;
        return r;
    }
    if (!((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) {
        if (c >= 0x80 || p + 1 >= n) return 0;
        uint8_t d = s[p + 1];
        if (c != '\r' && c != '\n' && (d | 0x20) >= 'a' && (d | 0x20) <= 'z') {
            q = p + 1; /* a one-byte prefix (ASCII, not CR/LF, not alphanumeric), then a word */
        } else {
            /* c is not a letter, digit or prefix of a word: with d ASCII, alternatives 2-4
             * cannot match (no letter at p or p + 1, no digit at p) */
            if (d >= 0x80) return 0;
            if (in_punct(ascii_flags[c])) return ascii_punct(s, p, n);               /* 5 */
            if (c == ' ' && in_punct(ascii_flags[d])) return ascii_punct(s, p + 1, n); /* 5 */
            return ascii_space(s, p, n);                                             /* 6-8 */
        }
    }
    size_t r;
    uint32_t up, lo, u, l;
    if (K3_LETTERS_SIMD && q + 16 <= n &&
        (k3_letters16(s + q, &up, &lo), u = (uint32_t)__builtin_ctz(~up),
         l = (uint32_t)__builtin_ctz(~(lo >> u)), u + l < 16)) {
        r = q + u + l; /* [A-Z]*[a-z]* ends inside the 16 bytes */
    } else {
        r = ascii_range_run(s, q, n, 'A', 'Z');
        r = ascii_range_run(s, r, n, 'a', 'z');
    }
    if (r < n) {
        if (s[r] >= 0x80) return 0; /* a non-ASCII letter or mark may continue the word */
        if (s[r] == '\'') return contraction(s, r, n);
    }
    return r;
}

/* ---- ASCII windows ---------------------------------------------------------------------
 * In ASCII text every piece start is decided by the bytes around it, so the starts of a
 * 64-byte window come from its class masks at once (bit i for s[p + i]; p is a piece start,
 * and the text is taken to begin there, as the scanner never looks back). With L letters
 * (U upper, W lower), D digits, S whitespace (R CR/LF, X the rest, SP ' '), O the other
 * ASCII bytes, and P = O | X the word prefixes, i is a piece start when:
 *   a  L(i), not L(i-1), and i-1 is not a free prefix;    b  i is a free prefix, L(i+1);
 *   c  W(i-1), U(i) (U* W+ stops at an upper);             d  D(i), not D(i-1): then every
 *      third digit of the run;                            f  O(i), not O(i-1), not SP(i-1);
 *   g  S(i), not S(i-1), unless R(i) after O (alternative 5's [\r\n]* takes those CR/LF);
 *   h  the end of such a taken CR/LF run;                i  X(i) after the last CR/LF of a
 *      whitespace run (alternative 6 ends there);          j  X(i-1), X(i), not S(i+1)
 *      (alternative 7 leaves the run's last character).
 * A prefix is free unless alternative 5 took it: O(i) after O or SP. A contraction after a
 * word's last letter joins the word and ends the piece. The CJK characters of k3_cjk16 take
 * part with all their bytes: Han ones make runs of their own (alternative 1: a start where
 * one follows another class), Hangul and kana ones are letters in both U and W (a run of
 * them is one word) except before an ASCII letter (U* W+ may stop there: left undecided);
 * the punctuation of k3_punct16 is O (a prefix's free status moves to its last byte for a);
 * the Latin-1 and Cyrillic letters of k3_lat16 are U or W like A-Z and a-z.
 * Starts are decided up to two bytes before the first other non-ASCII byte or the window's
 * end, and not inside a whitespace run that reaches it (its end is unknown); pieces beyond
 * go to ascii_piece and pretok.c's scanner. */
#define K3_WINDOWS_SIMD K3_BLK_HAVE_SIMD

static inline int ctz64(uint64_t x) { return __builtin_ctzll(x); }

/* The classes of a window's bytes, bit i for s[p + i]. ASCII, for every byte: hi >= 0x80;
 * up A-Z; lo a-z; dg 0-9; ws \s; cr CR, LF; sp ' '; ap '\''. At the lead byte of a
 * non-ASCII character the masks know: han, both (k3_cjk16), pl (k3_punct16), u2, l2
 * (k3_lat16). known: the bytes classified (a block past a character none knows may be left
 * out). */
struct k3_win_cls {
    uint64_t hi, up, lo, dg, ws, cr, sp, ap;
    uint64_t han, both, pl, u2, l2;
    uint64_t known;
};

/* The pieces of s[p..p+64) whose ends the window's classes cls decide (up to max): their
 * count. */
K3_SIMD_INLINE size_t window_starts(const uint8_t *s, size_t p, const struct k3_win_cls *cls,
                                    size_t *ends, size_t max)
{
    uint64_t hi = cls->hi, up = cls->up, lo = cls->lo, dg = cls->dg, ws = cls->ws, cr = cls->cr, sp = cls->sp, ap = cls->ap;
    uint64_t han = cls->han, both = cls->both, pl = cls->pl, u2 = cls->u2, l2 = cls->l2, known = cls->known;
    han |= han << 1 | han << 2, both |= both << 1 | both << 2; /* all bytes of the characters */
    up |= u2 | u2 << 1, lo |= l2 | l2 << 1;
    uint64_t pfull = pl | pl << 1 | pl << 2;
    /* A letter in U or W only after a Hangul/kana one: U* W+ may end before it, not decided
     * here. */
    uint64_t unknown = (hi & ~(han | both | pfull | up | lo)) | ~known | ((up | lo) & (both << 1));
    int h = unknown ? ctz64(unknown) : 64; /* bytes [0, h) are classified */
    if (h < 4) return 0;
    uint64_t valid = h == 64 ? ~0ull : (1ull << h) - 1;
    up &= valid, lo &= valid, dg &= valid, ws &= valid, cr &= valid, sp &= valid, ap &= valid;
    han &= valid, both &= valid, pl &= valid;
    uint64_t let = up | lo | both, x = ws & ~cr, o = valid & ~(let | dg | ws | han); /* pfull in o */
    int t = h - 2; /* the last start decided */
    if (ws >> (h - 1) & 1) { /* a whitespace run reaches h: only its start is decided */
        uint64_t before = ~ws & (valid >> 1);
        int a = before ? 64 - __builtin_clzll(before) : 0;
        if (a < t) t = a;
    }
    /* free prefixes at their first byte, and at their last (3-byte punctuation: 2 later; as
     * a prefix it starts a piece by f already) */
    uint64_t free_prefix = (o | x) & ~(o & ((o | sp) << 1));
    uint64_t fp_last = (free_prefix & ~pl) | (free_prefix & pl) << 2;
    uint64_t st = (let & ~(let << 1) & ~(fp_last << 1))     /* a */
                | (free_prefix & (let >> 1))                 /* b */
                | (up & (lo << 1))                           /* c */
                | (dg & ~(dg << 1))                          /* d */
                | (o & ~((o | sp) << 1))                     /* f */
                | (ws & ~(ws << 1) & ~(cr & (o << 1)))       /* g */
                | ((cr + (cr & (o << 1))) & ~cr)             /* h */
                | (x & (x << 1) & ~(ws >> 1))                /* j */
                | (han & ~(han << 1));                       /* a Han run (alternative 1) */
    for (uint64_t c = x & (cr << 1); c; c &= c - 1) { /* i */
        int i = ctz64(c), e = i + ctz64(~(x >> i));
        if (e < 64 && !(cr >> e & 1)) st |= 1ull << i;
    }
    for (uint64_t d4 = dg & (dg << 1) & (dg << 2) & (dg << 3); d4;) { /* d: digits 4, 7, ... */
        int b = ctz64(d4);
        st |= 1ull << b;
        d4 = b + 3 >= 64 ? 0 : d4 & ~((1ull << (b + 3)) - 1);
    }
    int prev_end = -1; /* contractions: "'" after a word's last letter */
    for (uint64_t c = ap & (let << 1); c; c &= c - 1) {
        int i = ctz64(c);
        if (i == prev_end) continue; /* after a contraction's letter: not a word's */
        if (i + 3 > h) {
            if (i - 1 < t) t = i - 1;
            break;
        }
        int e = (int)(contraction(s, p + (size_t)i, p + (size_t)h) - p);
        if (e > i) {
            st &= ~(((1ull << (e - i)) - 1) << i);
            if (e < 64) st |= 1ull << e;
            prev_end = e;
        }
    }
    if (t < 1) return 0;
    st &= ((2ull << t) - 1) & ~1ull;
    size_t m = 0;
    size_t c = (size_t)k3_popcount64(st);
    if (c + 3 <= max) {
        /* Four at a time: the loop's exit depends on the window's piece count, which the
         * branch predictor cannot know; one exit per four pieces instead of one per piece
         * (scanner -5% on long_1m and prose). Up to three entries past the last are
         * written (with bit 63 set, an empty mask gives 63) and not counted; max has room. */
        for (; m < c; m += 4) {
            ends[m] = p + (size_t)ctz64(st | 1ull << 63);
            st &= st - 1;
            ends[m + 1] = p + (size_t)ctz64(st | 1ull << 63);
            st &= st - 1;
            ends[m + 2] = p + (size_t)ctz64(st | 1ull << 63);
            st &= st - 1;
            ends[m + 3] = p + (size_t)ctz64(st | 1ull << 63);
            st &= st - 1;
        }
        return c;
    }
    for (; st && m < max; st &= st - 1) ends[m++] = p + (size_t)ctz64(st);
    return m;
}

/* Whether a window at s may decide a piece: no non-ASCII byte in the first 4, or the first
 * one may lead a k3_cjk16 character (a cheap test: a failed window costs more). */
static inline int window_worth(const uint8_t *s)
{
    int i = 0;
#if K3_TOK_LE
    uint32_t head;
    memcpy(&head, s, 4);
    head &= 0x80808080u;
    if (!head) return 1;
    i = __builtin_ctz(head) >> 3;
#else
    while (i < 4 && s[i] < 0x80) i++;
    if (i == 4) return 1;
#endif
    return (s[i] >= 0xE2 && s[i] <= 0xEF) || s[i] == 0xC3 || s[i] == 0xD0 || s[i] == 0xD1; /* the masks' leads */
}

/* The includer's: the classes of the window s[p..p+64) (n - p >= 64). */
K3_SIMD_INLINE void win_classify(const uint8_t *s, size_t p, size_t n, struct k3_win_cls *c);

/* pretok.c: every piece the fast paths do not decide. */
size_t k3_pretok_general(const uint8_t *s, size_t p, size_t n);

/* The ends of up to max pieces from s[p] (fewer only at n); returns their count. */
K3_SIMD_INLINE size_t pretok_batch(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max)
{
    size_t m = 0;
    while (m < max && p < n) {
        if (K3_WINDOWS_SIMD && n - p >= 64 && window_worth(s + p)) {
            /* the text a little ahead (a window usually moves on by 30-40 bytes): long_1m
             * -3% on the host in each of three rounds (run 10), even on the dev VM */
            K3_PREFETCH(s + (n - p > 1024 ? p + 1024 : n - 1));
            struct k3_win_cls c;
            win_classify(s, p, n, &c);
            size_t k = window_starts(s, p, &c, ends + m, max - m);
            if (k) {
                m += k;
                p = ends[m - 1];
                continue;
            }
        }
        size_t e = ascii_piece(s, p, n);
        if (!e) e = k3_pretok_general(s, p, n);
        ends[m++] = p = e;
    }
    return m;
}

#endif
