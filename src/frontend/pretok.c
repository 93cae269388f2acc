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
#include "frontend/tok_internal.h"
#include "frontend/unicode.h"
#include "frontend/unicode_simd.h"

#include <string.h>

/* Words through 16-byte letter masks where SIMD has them (the byte loop would be slower
 * than the 8-byte runs below). */
#define K3_LETTERS_SIMD (K3_BLK_SIMD[0] != 'n')

#include "core/log.h"

/* ASCII flags (the same bits as the Unicode table), filled by the rules above. */
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
#define K3_CJK_SIMD (K3_BLK_SIMD[0] != 'n')
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
 * go to the scanners above. */
#define K3_WINDOWS_SIMD (K3_BLK_SIMD[0] != 'n')

static inline int ctz64(uint64_t x) { return __builtin_ctzll(x); }

/* The pieces of s[p..p+64) whose ends the window decides (up to max): their count. */
static size_t window_pieces(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max)
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
    han |= han << 1 | han << 2, both |= both << 1 | both << 2; /* all bytes of the characters */
    up |= u2 | u2 << 1, lo |= l2 | l2 << 1;
    uint64_t pfull = pl | pl << 1 | pl << 2;
    /* A letter in U or W only after a Hangul/kana one: U* W+ may end before it, not decided
     * here. */
    uint64_t unknown = (hi & ~(han | both | pfull | up | lo)) | ~known | ((up | lo) & (both << 1));
#undef K3_COVER
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

static size_t pretok_general(const uint8_t *s, size_t p, size_t n);

size_t k3_pretok_next(const uint8_t *s, size_t p, size_t n)
{
    size_t fast = ascii_piece(s, p, n);
    return fast ? fast : pretok_general(s, p, n);
}

size_t k3_pretok_batch(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max)
{
    size_t m = 0;
    while (m < max && p < n) {
        if (K3_WINDOWS_SIMD && n - p >= 64 && window_worth(s + p)) {
            size_t k = window_pieces(s, p, n, ends + m, max - m);
            if (k) {
                m += k;
                p = ends[m - 1];
                continue;
            }
        }
        size_t e = ascii_piece(s, p, n);
        if (!e) e = pretok_general(s, p, n);
        ends[m++] = p = e;
    }
    return m;
}

/* Every piece the ASCII fast path does not decide. */
static size_t pretok_general(const uint8_t *s, size_t p, size_t n)
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
