/* bpe_chars.c - BPE of pieces of multi-byte text (CJK above all), characters first and cut
 * at the boundaries no token spans. Same result as the byte merge of bpe.c, which the tests
 * hold it to.
 *
 * In text of multi-byte characters (CJK above all) most merges happen inside characters:
 * three bytes of a Han character take two merges to become its token. Starting the merge
 * from whole characters saves them, and it is exact for the characters that qualify:
 *   C(X) = the highest rank merged when X's bytes alone merge into X's single token;
 *   R    = the lowest rank of any merge that can cross a character boundary in this piece:
 *          a pair of adjacent whole characters, or a token that spans a boundary X|Y without
 *          X and Y whole in it (split_rank: the lowest rank of such tokens per byte pair);
 *   X starts whole iff it is a single token and C(X) < R; the rest start as bytes.
 * Why: the first merge across a boundary has rank >= R. Until it happens every character
 * merges alone, exactly as in isolation; a qualifying X is whole by then, because while it
 * is partial its next inner merge (rank <= C(X) < R) is available and lower. Merges inside
 * X commute with everything before that first crossing merge, so doing them first changes
 * nothing; the others start as bytes and merge in the same rank order as before. The
 * differential tests against tiktoken hold this to every id. */
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
    uint64_t info[K3_BPE_SHORT];
    uint32_t R = K3_TOK_NONE;
    (void)n;
    /* Two passes, so that the table misses of the pair lookups overlap (prefetches). */
    for (size_t j = 0, i = 0; j < k; j++) {
        info[j] = cps[j] < 65536 ? t->char_info[cps[j]] : k3_bpe_char_info(t, s + i, len[j]);
        if (j) {
            uint32_t split = t->split_rank[(uint32_t)s[i - 1] << 8 | s[i]];
            if (split < R) R = split;
            uint32_t a = (uint32_t)(info[j - 1] >> 32), b = (uint32_t)(info[j] >> 32);
            if (a && b) k3_tok_pair_prefetch(t, c, a - 1, b - 1);
        }
        i += len[j];
    }
    uint32_t pr[K3_BPE_SHORT]; /* pr[j]: rank of the pair of whole characters j - 1, j */
    for (size_t j = 1; j < k; j++) {
        uint32_t a = (uint32_t)(info[j - 1] >> 32), b = (uint32_t)(info[j] >> 32);
        pr[j] = a && b ? k3_tok_pair_rank_cached(t, c, a - 1, b - 1) : K3_TOK_NONE;
        if (pr[j] < R) R = pr[j];
    }
    uint32_t tok[K3_BPE_SHORT], rk[K3_BPE_SHORT];
    size_t m = 0, i = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t whole = (uint32_t)(info[j] >> 32);
        if (whole && (uint32_t)info[j] < R) tok[m++] = whole - 1;
        else
            for (size_t b = 0; b < len[j]; b++) tok[m++] = t->byte_rank[s[i + b]];
        i += len[j];
    }
    if (m > K3_MERGE_LINEAR_MAX) return k3_bpe_merge_heap(t, c, tok, m, out);
    if (m == k) /* every character whole: the pairs are the ones looked up above */
        for (size_t j = 0; j + 1 < m; j++) rk[j] = pr[j + 1];
    else
        for (size_t j = 0; j + 1 < m; j++) rk[j] = k3_tok_pair_rank_cached(t, c, tok[j], tok[j + 1]);
    return k3_bpe_merge_linear(t, c, tok, rk, m, out);
}

/* The merge of one segment (see bpe_chars): a single character directly, a short segment
 * through the per-call segment cache (merge results, never the whole-token shortcut). */
static size_t bpe_segment(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s,
                          size_t n, size_t k, const uint32_t *cps, const uint8_t *len,
                          int32_t *out)
{
    if (k == 1 && cps[0] < 65536) {
        uint32_t whole = (uint32_t)(t->char_info[cps[0]] >> 32);
        if (whole) {
            out[0] = (int32_t)(whole - 1);
            return 1;
        }
    }
    if (!c || !c->on || n > 16) return bpe_chars_core(t, c, s, n, k, cps, len, out);
    uint8_t buf[16] = {0};
    memcpy(buf, s, n);
    uint64_t w0, w1;
    memcpy(&w0, buf, 8);
    memcpy(&w1, buf + 8, 8);
    uint64_t h = k3_tok_mix((w0 ^ ((uint64_t)n << 56)) * 0x9E3779B97F4A7C15ull ^ w1);
    int32_t tmp[16 + 4]; /* memo_get writes 6 ids, bpe_chars_core up to n + 4 */
    size_t m = memo_get(&c->segs, w0, w1, n, h, tmp);
    if (!m) {
        m = bpe_chars_core(t, c, s, n, k, cps, len, tmp);
        memo_put(&c->segs, w0, w1, n, h, tmp, m);
    }
    memcpy(out, tmp, m * sizeof(int32_t));
    return m;
}

/* The merge of a multi-byte piece (no whole-piece lookup; the caller made it). A boundary
 * between adjacent characters X|Y that no token spans can never be crossed by a merge (every
 * merge makes a token, a substring of the piece), so the merge of the piece is the merges of
 * the segments between such boundaries, each on its own: merges on either side never change
 * the pairs available on the other. A token spans X|Y either with X and Y whole in it (then
 * the pair X Y is in bigram_filter, a Bloom filter: false positives only keep a boundary) or
 * not (then split_rank of the two bytes at the boundary is a rank). Short segments repeat
 * (words) and come from the segment cache. */
size_t k3_bpe_chars(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s, size_t n,
                    int32_t *out)
{
    uint32_t cps[K3_BPE_SHORT];
    uint8_t len[K3_BPE_SHORT];
    size_t k = 0;
    for (size_t i = 0; i < n; k++) {
        uint8_t b0 = s[i];
        int l;
        /* 2-byte, and 3-byte sequences without a narrower second-byte range, inline */
        if (b0 >= 0xC2 && b0 <= 0xDF && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) l = 2;
        else if (b0 >= 0xE1 && b0 <= 0xEF && b0 != 0xED && i + 2 < n && (s[i + 1] & 0xC0) == 0x80 &&
                 (s[i + 2] & 0xC0) == 0x80)
            l = 3;
        else l = k3_utf8_check(s + i, n - i);
        if (l <= 0) return k3_bpe_bytes(t, c, s, n, out); /* not UTF-8: only tests send that */
        int dl;
        uint32_t cp = k3_utf8_decode(s + i, &dl);
        cps[k] = cp;
        if (cp < 65536) K3_PREFETCH(&t->char_info[cp]);
        len[k] = (uint8_t)l;
        i += (size_t)l;
    }
    size_t m = 0, j0 = 0, i0 = 0, i = len[0];
    for (size_t j = 1; j < k; j++) {
        if (t->split_rank[(uint32_t)s[i - 1] << 8 | s[i]] == K3_TOK_NONE &&
            !k3_tok_bigram_maybe(t, cps[j - 1], cps[j])) {
            m += bpe_segment(t, c, s + i0, i - i0, j - j0, cps + j0, len + j0, out + m);
            j0 = j;
            i0 = i;
        }
        i += len[j];
    }
    if (j0 == 0) return bpe_chars_core(t, c, s, n, k, cps, len, out);
    return m + bpe_segment(t, c, s + i0, n - i0, k - j0, cps + j0, len + j0, out + m);
}

