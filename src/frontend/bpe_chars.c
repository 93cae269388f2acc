/* bpe_chars.c - BPE of pieces of multi-byte text (CJK above all), characters first and cut
 * at the boundaries no token spans. Same result as the byte merge of bpe.c, which the tests
 * hold it to.
 *
 * In text of multi-byte characters (CJK above all) most merges happen inside characters:
 * three bytes of a Han character take two merges to become its token. Starting the merge
 * from whole characters saves them, and it is exact for the characters that qualify.
 *   C(X)    = the highest rank merged when X's bytes alone merge into X's single token;
 *   S(W|X)  = the lowest rank of a token that spans the boundary W|X without W and X whole
 *             in it (split_rank of the two bytes at the boundary);
 *   B(W|X)  = the lowest rank of a token of whole characters that holds W X adjacent
 *             (bigram_rank; NONE at the piece's ends and at a cut).
 * In bpe_chars_core, X starts whole iff it is a single token and C(X) is below S and B at
 * both its boundaries; the rest start as bytes. Why (P: the byte merge of the piece, P': the
 * merge from these parts):
 *   - In P, X is whole before any merge joins its bytes to others. While X is partial, its
 *     next merge in isolation (rank <= C(X)) is available, so every merge P makes meanwhile
 *     has a rank <= C(X); one joining part of X to outside bytes would make a token spanning
 *     a boundary of X with X not whole, rank >= S > C(X). So P merges X's bytes as X alone
 *     does, and touches nothing else of X while X is partial.
 *   - P' makes P's other merges in P's order. The pairs P' has and P has not are a whole X
 *     (partial in P) with its neighbour part A: A + X spans X's boundary, either not of
 *     whole characters (rank >= S) or of whole characters with W X adjacent (rank >= B),
 *     so no token or above C(X) >= P's choice. The pairs P has and P' has not (inside a
 *     partial X, or a partial X with a neighbour: rank >= S) are never P's choice but X's
 *     own merges. When P ends every qualifying X is whole in it, and the parts agree.
 * bigram_rank keeps only the pairs whose B is at most the larger C of the two (about 300 of
 * 58,000); for the others B is above both C, which the test treats as NONE.
 *
 * whole_few (segments of two or three characters) uses the first form of the argument:
 * R = the lowest rank of any merge that can cross a boundary of the segment (S, and the
 * ranks of adjacent whole characters as pairs: the pair table's, since a token is only ever
 * made from its own pair, vocab.c's build_pairs); X starts whole iff it is a single token and
 * C(X) < R, because the first merge across a boundary has rank >= R and until then every
 * character merges alone. Both forms are exact; the differential tests against tiktoken
 * hold them to every id. */
#include "frontend/tok_internal.h"
#include "frontend/bpe_memo.h"
#include "frontend/unicode.h"

#include <stdlib.h>

#include "core/log.h"

uint64_t k3_bpe_char_info(const struct k3_tok *t, const uint8_t *s, size_t n)
{
    if (n == 1) return (uint64_t)(t->byte_rank[s[0]] + 1) << 32;
    uint32_t tok[4], high = 0;
    size_t m = n;
    for (size_t i = 0; i < n; i++) tok[i] = t->byte_rank[s[i]];
    while (m > 1) {
        uint32_t best = K3_TOK_NONE;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            uint32_t r = k3_tok_pair_rank(t, tok[i], tok[i + 1]);
            if (r < best) best = r, bi = i;
        }
        if (best == K3_TOK_NONE) return 0;
        if (best > high) high = best;
        tok[bi] = best;
        for (size_t i = bi + 1; i + 1 < m; i++) tok[i] = tok[i + 1];
        m--;
    }
    return (uint64_t)(tok[0] + 1) << 32 | high;
}

/* The merge of s[0..n), k characters (code points cps, byte lengths len), characters first. */
static size_t bpe_chars_core(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s,
                             size_t n, size_t k, const uint32_t *cps, const uint8_t *len,
                             int32_t *out)
{
    /* info[j]: char_info of character j; sp[j], bm[j]: S and B at the boundary before it */
    uint64_t info[K3_BPE_SHORT];
    uint32_t sp[K3_BPE_SHORT + 1], bm[K3_BPE_SHORT + 1];
    sp[0] = bm[0] = sp[k] = bm[k] = K3_TOK_NONE;
    for (size_t j = 0, i = 0; j < k; j++) {
        info[j] = cps[j] < 65536 ? t->char_info[cps[j]] : k3_bpe_char_info(t, s + i, len[j]);
        if (j) sp[j] = t->split_rank[(uint32_t)s[i - 1] << 8 | s[i]];
        i += len[j];
    }
    for (size_t j = 1; j < k; j++) {
        bm[j] = k3_tok_bigram_rank(t, cps[j - 1], cps[j]);
        uint32_t a = (uint32_t)(info[j - 1] >> 32), b = (uint32_t)(info[j] >> 32);
        if (a && b) k3_tok_pair_prefetch(t, a - 1, b - 1); /* the misses overlap */
    }
    /* The parts, and the ranks of adjacent parts: two bytes from the byte-pair table, the
     * others through the pair cache. */
    uint32_t tok[K3_BPE_SHORT], rk[K3_BPE_SHORT];
    size_t m = 0, i = 0;
    int prev_whole = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t whole = (uint32_t)(info[j] >> 32), cx = (uint32_t)info[j];
        if (whole && cx < sp[j] && cx < sp[j + 1] && cx < bm[j] && cx < bm[j + 1]) {
            tok[m] = whole - 1;
            if (m) rk[m - 1] = k3_tok_pair_rank(t, tok[m - 1], tok[m]);
            m++;
            prev_whole = 1;
        } else {
            for (size_t b = 0; b < len[j]; b++, m++) {
                const uint8_t *p = s + i + b;
                tok[m] = t->byte_rank[p[0]];
                if (m)
                    rk[m - 1] = prev_whole ? k3_tok_pair_rank(t, tok[m - 1], tok[m])
                                           : t->byte_pairs[(uint32_t)p[-1] << 8 | p[0]];
                prev_whole = 0;
            }
        }
        i += len[j];
    }
    if (m > K3_MERGE_LINEAR_MAX) return k3_bpe_merge_heap(t, tok, m, out);
    return k3_bpe_merge_linear(t, tok, rk, m, out);
}

/* A segment of two or three characters that all start whole (C(X) < R, the segment's R: the
 * header's first form of the argument): its merge from the one or two pair ranks, which
 * costs less than a probe of the segment memo (-3% on CJK text). 0 when a character would
 * start as bytes: the caller merges the segment the general way. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))
#endif
static inline size_t whole_few(const struct k3_tok *t, struct k3_bpe_cache *c,
                               const uint8_t *s, size_t k, const uint32_t *cps,
                               const uint8_t *len, int32_t *out)
{
    uint32_t x[3], r[2], R = K3_TOK_NONE, high = 0;
    for (size_t j = 0; j < k; j++) {
        uint64_t info = t->char_info[cps[j]];
        x[j] = (uint32_t)(info >> 32);
        if (!x[j]) return 0;
        x[j]--;
        high = (uint32_t)info > high ? (uint32_t)info : high;
    }
    for (size_t j = 0, i = 0; j + 1 < k; j++) {
        i += len[j];
        uint32_t split = t->split_rank[(uint32_t)s[i - 1] << 8 | s[i]];
        r[j] = k3_tok_pair_rank(t, x[j], x[j + 1]);
        R = split < R ? split : R;
        R = r[j] < R ? r[j] : R;
    }
    if (high >= R) return 0;
    if (k == 2) {
        if (r[0] == K3_TOK_NONE) {
            out[0] = (int32_t)x[0];
            out[1] = (int32_t)x[1];
            return 2;
        }
        out[0] = (int32_t)r[0];
        return 1;
    }
    if (r[0] == K3_TOK_NONE && r[1] == K3_TOK_NONE) {
        for (int j = 0; j < 3; j++) out[j] = (int32_t)x[j];
        return 3;
    }
    /* the lower pair merges first (the left one on a tie), then maybe the result and the third */
    uint32_t a = r[0] <= r[1] ? r[0] : x[0], b = r[0] <= r[1] ? x[2] : r[1];
    uint32_t ab = k3_tok_pair_rank(t, a, b);
    if (ab != K3_TOK_NONE) {
        out[0] = (int32_t)ab;
        return 1;
    }
    out[0] = (int32_t)a;
    out[1] = (int32_t)b;
    return 2;
}

/* The merge of one segment (see bpe_chars): a single character directly, two or three
 * whole characters from their pair ranks, another short segment through the per-call
 * segment memo (merge results, never the whole-token shortcut). */
static size_t bpe_segment(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s,
                          size_t n, size_t avail, size_t k, const uint32_t *cps, const uint8_t *len,
                          int32_t *out)
{
    if (k == 1 && cps[0] < 65536) {
        uint32_t whole = (uint32_t)(t->char_info[cps[0]] >> 32);
        if (whole) {
            out[0] = (int32_t)(whole - 1);
            return 1;
        }
    }
    if ((k == 2 || k == 3) && (cps[0] | cps[1] | cps[k - 1]) < 65536) {
        /* a constant k, so that its loops unroll */
        size_t m = k == 2 ? whole_few(t, c, s, 2, cps, len, out)
                          : whole_few(t, c, s, 3, cps, len, out);
        if (m) return m;
    }
    if (!c || !c->on || n > K3_MEMO_BYTES) return bpe_chars_core(t, c, s, n, k, cps, len, out);
    /* s[0..avail) is readable (the rest of the piece) */
    uint64_t w0 = k3_tok_word(s, n, avail), w1 = memo_word1(s, n, avail), h = memo_hash(w0, w1, n);
    /* out has room for n + 4 >= 6 ids (the piece's room less the ids before): memo_get
     * writes 6, bpe_chars_core up to n */
    size_t m = memo_get(&c->segs, w0, w1, n, h, out);
    if (!m) {
        m = bpe_chars_core(t, c, s, n, k, cps, len, out);
        memo_put(&c->segs, w0, w1, n, h, out, m);
    }
    return m;
}

/* The merge of a multi-byte piece, its whole-token lookup included (whole: NULL when the
 * piece is longer than any token). A boundary
 * between adjacent characters X|Y that no token spans can never be crossed by a merge (every
 * merge makes a token, a substring of the piece), so the merge of the piece is the merges of
 * the segments between such boundaries, each on its own: merges on either side never change
 * the pairs available on the other. A token spans X|Y either with X and Y whole in it (then
 * the pair X Y is in bigram_filter, a Bloom filter: false positives only keep a boundary) or
 * not (then split_rank of the two bytes at the boundary is a rank). Short segments repeat
 * (words) and come from the segment cache. A piece cut at such a boundary is no token (a token
 * equal to it would span the boundary), so only a piece without one takes the whole-token
 * lookup. valid: s is valid UTF-8 (else it is checked). */
size_t k3_bpe_chars(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s, size_t n,
                    int valid, const struct k3_piece_key *whole, int32_t *out)
{
    uint32_t cps[K3_BPE_SHORT];
    uint8_t len[K3_BPE_SHORT];
    size_t k = 0;
    for (size_t i = 0; i < n; k++) {
        uint32_t b0 = s[i], cp;
        size_t l;
        /* valid UTF-8 (the encoder's text): the lead byte says the length, 3-byte characters
         * (CJK) first; otherwise (k3_bpe_piece takes any bytes) 3-byte characters (lead
         * E1..EF but ED: no narrower second-byte range) and 2-byte ones inline, the rest
         * through the checker */
        if (valid) {
            if (b0 - 0xE0 < 16) {
                cp = (b0 & 15) << 12 | (uint32_t)(s[i + 1] & 63) << 6 | (s[i + 2] & 63);
                l = 3;
            } else if (b0 < 0x80) {
                cp = b0;
                l = 1;
            } else if (b0 < 0xE0) {
                cp = (b0 & 31) << 6 | (s[i + 1] & 63);
                l = 2;
            } else {
                cp = (b0 & 7) << 18 | (uint32_t)(s[i + 1] & 63) << 12 | (uint32_t)(s[i + 2] & 63) << 6 |
                     (s[i + 3] & 63);
                l = 4;
            }
        } else if (i + 2 < n && (b0 - 0xE1 < 15) & (b0 != 0xED) &
                             ((((uint32_t)s[i + 1] << 8 | s[i + 2]) & 0xC0C0) == 0x8080)) {
            cp = (b0 & 15) << 12 | (uint32_t)(s[i + 1] & 63) << 6 | (s[i + 2] & 63);
            l = 3;
        } else if (i + 1 < n && (b0 - 0xC2 < 30) & ((s[i + 1] & 0xC0) == 0x80)) {
            cp = (b0 & 31) << 6 | (s[i + 1] & 63);
            l = 2;
        } else {
            int cl = k3_utf8_check(s + i, n - i), dl;
            if (cl <= 0) /* not UTF-8: only tests send that */
                return k3_bpe_whole_token(t, s, n, whole, out) ? 1 : k3_bpe_bytes(t, s, n, out);
            cp = k3_utf8_decode(s + i, &dl);
            l = (size_t)cl;
        }
        cps[k] = cp;
        if (cp < 65536) K3_PREFETCH(&t->char_info[cp]);
        len[k] = (uint8_t)l;
        i += l;
    }
    size_t m = 0, j0 = 0, i0 = 0, i = len[0];
    for (size_t j = 1; j < k; j++) {
        if (t->split_rank[(uint32_t)s[i - 1] << 8 | s[i]] == K3_TOK_NONE &&
            !k3_tok_bigram_maybe(t, cps[j - 1], cps[j])) {
            m += bpe_segment(t, c, s + i0, i - i0, n - i0, j - j0, cps + j0, len + j0, out + m);
            j0 = j;
            i0 = i;
        }
        i += len[j];
    }
    if (j0 == 0) return k3_bpe_whole_token(t, s, n, whole, out) ? 1 : bpe_chars_core(t, c, s, n, k, cps, len, out);
    return m + bpe_segment(t, c, s + i0, n - i0, n - i0, k - j0, cps + j0, len + j0, out + m);
}

