/* bpe.c - byte-level BPE of one pre-tokenizer piece, exactly as tiktoken merges
 * (research/tokenizer.md §1.1): start from single bytes; repeatedly merge the adjacent pair
 * whose concatenation has the lowest rank, the leftmost on ties; stop when no adjacent
 * concatenation is a token. A piece that is itself a token is that token (tiktoken's
 * whole-piece lookup; the merge would reach the same result only when ranks agree, so it
 * is part of the definition, not an optimization).
 *
 * Three implementations, one result:
 *   - short pieces: parts in stack arrays, a linear scan for the minimum (cache-friendly;
 *     tiktoken does the same below 100 bytes);
 *   - long pieces: a binary heap of (rank, position) over a linked list of parts, with lazy
 *     invalidation: O(n log n), so a 1 MB piece without whitespace is not quadratic;
 *   - k3_bpe_piece_ref: the plain O(n^2) loop, the reference the tests hold the others to. */
#include "frontend/tok_internal.h"
#include "frontend/unicode.h"

#include <stdlib.h>

#include "core/log.h"

#ifndef BPE_SHORT
#define BPE_SHORT 128 /* longest piece for the linear scan; above it the heap wins */
#endif
#define BPE_STACK 512 /* longest piece whose heap merge works in stack arrays */
#ifndef MERGE_LINEAR_MAX
#define MERGE_LINEAR_MAX 24 /* most parts for the linear-scan merge; the heap above */
#endif

static size_t merge_heap(const struct k3_tok *t, struct k3_bpe_cache *c, const uint32_t *tok0,
                         size_t n, int32_t *out);

/* The merge loop over parts tok[0..m) with adjacent pair ranks rk[0..m-1). The arrays are
 * short (<= MERGE_LINEAR_MAX): GCC would turn their shifts into memmove calls that cost more
 * than the moves. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
static size_t merge_linear(const struct k3_tok *t, struct k3_bpe_cache *c, uint32_t *tok,
                           uint32_t *rk, size_t m, int32_t *out)
{
    while (m > 1) {
        uint32_t best = K3_TOK_NONE;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rk[i] < best) best = rk[i], bi = i;
        if (best == K3_TOK_NONE) break;
        tok[bi] = best;
        for (size_t i = bi + 1; i + 1 < m; i++) tok[i] = tok[i + 1], rk[i] = rk[i + 1];
        m--;
        if (bi + 1 < m) rk[bi] = k3_tok_pair_rank_cached(t, c, tok[bi], tok[bi + 1]);
        if (bi > 0) rk[bi - 1] = k3_tok_pair_rank_cached(t, c, tok[bi - 1], tok[bi]);
    }
    for (size_t i = 0; i < m; i++) out[i] = (int32_t)tok[i];
    return m;
}

static size_t bpe_short(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s, size_t n,
                        int32_t *out)
{
    uint32_t tok[BPE_SHORT], rk[BPE_SHORT];
    for (size_t i = 0; i < n; i++) tok[i] = t->byte_rank[s[i]];
    if (n > MERGE_LINEAR_MAX) return merge_heap(t, c, tok, n, out);
    for (size_t i = 0; i + 1 < n; i++) rk[i] = t->byte_pairs[s[i] << 8 | s[i + 1]];
    return merge_linear(t, c, tok, rk, n, out);
}

/* ---- characters first ------------------------------------------------------------------
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
    uint64_t info[BPE_SHORT];
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
    uint32_t pr[BPE_SHORT]; /* pr[j]: rank of the pair of whole characters j - 1, j */
    for (size_t j = 1; j < k; j++) {
        uint32_t a = (uint32_t)(info[j - 1] >> 32), b = (uint32_t)(info[j] >> 32);
        pr[j] = a && b ? k3_tok_pair_rank_cached(t, c, a - 1, b - 1) : K3_TOK_NONE;
        if (pr[j] < R) R = pr[j];
    }
    uint32_t tok[BPE_SHORT], rk[BPE_SHORT];
    size_t m = 0, i = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t whole = (uint32_t)(info[j] >> 32);
        if (whole && (uint32_t)info[j] < R) tok[m++] = whole - 1;
        else
            for (size_t b = 0; b < len[j]; b++) tok[m++] = t->byte_rank[s[i + b]];
        i += len[j];
    }
    if (m > MERGE_LINEAR_MAX) return merge_heap(t, c, tok, m, out);
    if (m == k) /* every character whole: the pairs are the ones looked up above */
        for (size_t j = 0; j + 1 < m; j++) rk[j] = pr[j + 1];
    else
        for (size_t j = 0; j + 1 < m; j++) rk[j] = k3_tok_pair_rank_cached(t, c, tok[j], tok[j + 1]);
    return merge_linear(t, c, tok, rk, m, out);
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
    if (!c || n > K3_PIECE_CACHE_BYTES) return bpe_chars_core(t, c, s, n, k, cps, len, out);
    uint8_t buf[16] = {0};
    memcpy(buf, s, n);
    uint64_t w0, w1;
    memcpy(&w0, buf, 8);
    memcpy(&w1, buf + 8, 8);
    uint64_t h = k3_tok_mix((w0 ^ ((uint64_t)n << 56)) * 0x9E3779B97F4A7C15ull ^ w1);
    if (!c->segs) {
        c->segs = malloc(((size_t)c->mask + 1) * sizeof *c->segs);
        K3_CHECK(c->segs, "out of memory");
    }
    uint32_t slot = (uint32_t)(h >> 20) & c->mask;
    uint64_t *valid = c->valid + ((size_t)c->mask + 1) / 64;
    struct k3_piece_cache_entry *e = &c->segs[slot];
    if (k3_cache_valid(valid, slot) && e->w0 == w0 && e->w1 == w1 && e->len == n) {
        memcpy(out, e->ids, sizeof(int32_t) * e->n_ids);
        return e->n_ids;
    }
    size_t m = bpe_chars_core(t, c, s, n, k, cps, len, out);
    if (m <= K3_PIECE_CACHE_IDS) {
        k3_cache_set_valid(valid, slot);
        e->w0 = w0;
        e->w1 = w1;
        e->len = (uint16_t)n;
        e->n_ids = (uint16_t)m;
        memcpy(e->ids, out, m * sizeof(int32_t));
    }
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
static size_t bpe_chars(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s, size_t n,
                        int32_t *out)
{
    uint32_t cps[BPE_SHORT];
    uint8_t len[BPE_SHORT];
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
        if (l <= 0) return bpe_short(t, c, s, n, out); /* not UTF-8: only tests send that */
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

/* Min-heap of (rank << 32 | position): the lowest rank first, then the leftmost. */
static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= v) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

/* The heap merge over initial parts tok0[0..n) (named by index; the leftmost is the lowest). */
static size_t merge_heap(const struct k3_tok *t, struct k3_bpe_cache *c, const uint32_t *tok0,
                         size_t n, int32_t *out)
{
    /* next/prev link the live parts. Up to BPE_STACK parts (all but pathological pieces)
     * work on the stack. At most 2n - 2 heap entries are live: each merge pops one and pushes
     * at most two. */
    uint32_t tok_stack[BPE_STACK * 3];
    uint64_t heap_stack[BPE_STACK * 2];
    int on_heap = n > BPE_STACK;
    uint32_t *tok = on_heap ? malloc(sizeof(uint32_t) * n * 3) : tok_stack;
    uint64_t *heap = on_heap ? malloc(sizeof(uint64_t) * n * 2) : heap_stack;
    K3_CHECK(tok && heap, "out of memory in BPE of a %zu-part piece", n);
    uint32_t *next = tok + n, *prev = tok + 2 * n;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        tok[i] = tok0[i];
        next[i] = (uint32_t)(i + 1);
        prev[i] = (uint32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = k3_tok_pair_rank_cached(t, c, tok[i], tok[i + 1]);
        if (r != K3_TOK_NONE) heap_push(heap, &nh, (uint64_t)r << 32 | i);
    }
    while (nh) {
        uint64_t top = heap_pop(heap, &nh);
        uint32_t r = (uint32_t)(top >> 32), i = (uint32_t)top;
        uint32_t j = next[i];
        /* Stale entry: i was merged away (tok = NONE), or its pair is no longer rank r. */
        if (tok[i] == K3_TOK_NONE || j >= n || k3_tok_pair_rank_cached(t, c, tok[i], tok[j]) != r)
            continue;
        tok[i] = r;
        tok[j] = K3_TOK_NONE;
        next[i] = next[j];
        if (next[j] < n) prev[next[j]] = i;
        if (next[i] < n) {
            uint32_t r2 = k3_tok_pair_rank_cached(t, c, tok[i], tok[next[i]]);
            if (r2 != K3_TOK_NONE) heap_push(heap, &nh, (uint64_t)r2 << 32 | i);
        }
        if (i > 0) {
            uint32_t p = prev[i];
            uint32_t r2 = k3_tok_pair_rank_cached(t, c, tok[p], tok[i]);
            if (r2 != K3_TOK_NONE) heap_push(heap, &nh, (uint64_t)r2 << 32 | p);
        }
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i = next[i]) out[m++] = (int32_t)tok[i];
    if (on_heap) {
        free(tok);
        free(heap);
    }
    return m;
}

static size_t bpe_long(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s, size_t n,
                       int32_t *out)
{
    uint32_t stack[BPE_STACK] = {0}; /* zeroed only to quiet -Wmaybe-uninitialized */
    uint32_t *tok = n > BPE_STACK ? malloc(sizeof(uint32_t) * n) : stack;
    K3_CHECK(tok, "out of memory in BPE of a %zu-byte piece", n);
    for (size_t i = 0; i < n; i++) tok[i] = t->byte_rank[s[i]];
    size_t m = merge_heap(t, c, tok, n, out);
    if (tok != stack) free(tok);
    return m;
}

void k3_bpe_cache_init(struct k3_bpe_cache *c, size_t text_bytes)
{
    /* About one entry per 8 bytes of text, 256 .. 16384 entries of 32 B (at most 512 KiB,
     * never cleared: see valid). The segment and long-piece caches come on first use. */
    size_t n = 256;
    while (n < 16384 && n * 8 < text_bytes) n *= 2;
    c->e = malloc(n * sizeof *c->e);
    c->pairs = malloc(sizeof(uint64_t) * K3_PAIR_CACHE_ENTRIES);
    c->segs = NULL; /* on first use: text without multi-byte or long pieces needs neither */
    c->longs = NULL;
    c->valid = calloc(2 * n / 64 + K3_LONG_CACHE_ENTRIES / 64, sizeof(uint64_t));
    K3_CHECK(c->e && c->pairs && c->valid, "out of memory");
    memset(c->pairs, 0xFF, sizeof(uint64_t) * K3_PAIR_CACHE_ENTRIES);
    c->mask = (uint32_t)n - 1;
}

void k3_bpe_cache_free(struct k3_bpe_cache *c)
{
    free(c->e);
    free(c->segs);
    free(c->pairs);
    free(c->longs);
    free(c->valid);
    c->valid = NULL;
    c->e = NULL;
    c->segs = NULL;
    c->pairs = NULL;
    c->longs = NULL;
}

/* Whole-token lookup, then the merge. h is the piece hash (valid when n fits a token). */
static size_t bpe_uncached(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s,
                           size_t n, uint64_t w0, uint64_t h, int32_t *out)
{
    if (n <= (size_t)t->max_token_bytes) {
        uint32_t r = k3_tok_piece_rank_h(t, s, n, w0, h);
        if (r != K3_TOK_NONE) {
            out[0] = (int32_t)r;
            return 1;
        }
    }
    if (n > BPE_SHORT) return bpe_long(t, c, s, n, out);
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0x80) return bpe_chars(t, c, s, n, out);
    return bpe_short(t, c, s, n, out);
}

/* Pieces of 3+ bytes that no shortcut in k3_bpe_piece decided (kept out of line, so that
 * the common path saves and restores few registers). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static size_t piece_slow(const struct k3_tok *t, const uint8_t *s, size_t n, size_t avail,
                         struct k3_bpe_cache *cache, int32_t *out)
{
    uint64_t w0 = k3_tok_word(s, n, avail);
    uint64_t h = n <= (size_t)t->max_token_bytes ? k3_piece_hash(w0, s, n, avail) : 0;
    if (!cache || n > K3_LONG_CACHE_BYTES) return bpe_uncached(t, cache, s, n, w0, h, out);
    if (n > K3_PIECE_CACHE_BYTES) {
        if (!cache->longs) {
            cache->longs = malloc(K3_LONG_CACHE_ENTRIES * sizeof *cache->longs);
            K3_CHECK(cache->longs, "out of memory");
        }
        uint32_t slot = (uint32_t)(h >> 20) & (K3_LONG_CACHE_ENTRIES - 1);
        uint64_t *valid = cache->valid + 2 * ((size_t)cache->mask + 1) / 64;
        struct k3_long_cache_entry *e = &cache->longs[slot];
        if (k3_cache_valid(valid, slot) && e->len == n && !memcmp(e->key, s, n)) {
            memcpy(out, e->ids, sizeof(int32_t) * e->n_ids);
            return e->n_ids;
        }
        size_t m = bpe_uncached(t, cache, s, n, w0, h, out);
        if (m <= K3_LONG_CACHE_IDS) {
            k3_cache_set_valid(valid, slot);
            e->len = (uint16_t)n;
            e->n_ids = (uint16_t)m;
            memcpy(e->ids, out, m * sizeof(int32_t));
            memcpy(e->key, s, n);
        }
        return m;
    }
    /* a miss of the piece cache (k3_bpe_piece looked): merge, and fill the entry */
    uint64_t w1 = n > 8 ? k3_tok_word(s + 8, n - 8, avail - 8) : 0;
    uint32_t slot = (uint32_t)(h >> 20) & cache->mask;
    struct k3_piece_cache_entry *e = &cache->e[slot];
    int32_t tmp[K3_PIECE_CACHE_BYTES + 4]; /* the room bpe_uncached may use: n + 4 */
    size_t m = bpe_uncached(t, cache, s, n, w0, h, tmp);
    memcpy(out, tmp, m * sizeof(int32_t));
    if (m <= K3_PIECE_CACHE_IDS) {
        k3_cache_set_valid(cache->valid, slot);
        e->w0 = w0;
        e->w1 = w1;
        e->len = (uint16_t)n;
        e->n_ids = (uint16_t)m;
        memcpy(e->ids, tmp, sizeof e->ids);
    }
    return m;
}

static inline size_t bpe_piece(const struct k3_tok *t, const uint8_t *s, size_t n, size_t avail,
                               struct k3_bpe_cache *cache, int32_t *out)
{
    if (n == 1) {
        out[0] = (int32_t)t->byte_rank[s[0]];
        return 1;
    }
    if (n == 2) { /* the piece is a token, or its only pair is not: two bytes */
        uint32_t r = t->byte_pairs[(uint32_t)s[0] << 8 | s[1]];
        if (r != K3_TOK_NONE) {
            out[0] = (int32_t)r;
            return 1;
        }
        out[0] = (int32_t)t->byte_rank[s[0]];
        out[1] = (int32_t)t->byte_rank[s[1]];
        return 2;
    }
    if (n == 3 && s[0] >= 0xE1 && s[0] <= 0xEF && s[0] != 0xED && (s[1] & 0xC0) == 0x80 &&
        (s[2] & 0xC0) == 0x80) {
        /* One character (E0, ED, F0 leads with their narrower ranges go the long way) whose
         * bytes merge into one token: that token is the piece's bytes, so the whole-piece
         * lookup finds it too. */
        int l;
        uint64_t info = t->char_info[k3_utf8_decode(s, &l)];
        if (info >> 32) {
            out[0] = (int32_t)((info >> 32) - 1);
            return 1;
        }
    }
    if (n <= K3_PIECE_CACHE_BYTES && cache) { /* a hit of the piece cache */
        uint64_t w0 = k3_tok_word(s, n, avail);
        uint64_t w1 = n > 8 ? k3_tok_word(s + 8, n - 8, avail - 8) : 0;
        uint64_t h = k3_piece_hash(w0, s, n, avail);
        uint32_t slot = (uint32_t)(h >> 20) & cache->mask;
        const struct k3_piece_cache_entry *e = &cache->e[slot];
        if (k3_cache_valid(cache->valid, slot) && e->w0 == w0 && e->w1 == w1 && e->len == n) {
            for (int i = 0; i < K3_PIECE_CACHE_IDS; i++) out[i] = e->ids[i]; /* out has n + 4 */
            return e->n_ids;
        }
    }
    return piece_slow(t, s, n, avail, cache, out);
}

size_t k3_bpe_piece(const struct k3_tok *t, const uint8_t *s, size_t n, size_t avail,
                    struct k3_bpe_cache *cache, int32_t *out)
{
    return bpe_piece(t, s, n, avail, cache, out);
}

size_t k3_bpe_pieces(const struct k3_tok *t, const uint8_t *s, size_t p, const size_t *ends,
                     size_t m, const uint8_t *end, struct k3_bpe_cache *cache, int32_t *out)
{
    int32_t *o = out;
    for (size_t i = 0; i < m; i++) {
        o += bpe_piece(t, s + p, ends[i] - p, (size_t)(end - (s + p)), cache, o);
        p = ends[i];
    }
    return (size_t)(o - out);
}

size_t k3_bpe_piece_ref(const struct k3_tok *t, const uint8_t *s, size_t n, int32_t *out)
{
    uint32_t r = n <= (size_t)t->max_token_bytes ? k3_tok_piece_rank(t, s, n) : K3_TOK_NONE;
    if (r != K3_TOK_NONE) {
        out[0] = (int32_t)r;
        return 1;
    }
    /* Parts as byte offsets; the rank of a pair is looked up by its bytes, as tiktoken does. */
    size_t *start = malloc(sizeof(size_t) * (n + 1));
    K3_CHECK(start, "out of memory");
    size_t m = n;
    for (size_t i = 0; i <= n; i++) start[i] = i;
    for (;;) {
        uint32_t best = K3_TOK_NONE;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            size_t len = start[i + 2] - start[i];
            uint32_t pr = len <= (size_t)t->max_token_bytes ? k3_tok_piece_rank(t, s + start[i], len)
                                                           : K3_TOK_NONE;
            if (pr < best) best = pr, bi = i;
        }
        if (best == K3_TOK_NONE) break;
        for (size_t i = bi + 1; i < m; i++) start[i] = start[i + 1];
        m--;
    }
    for (size_t i = 0; i < m; i++)
        out[i] = (int32_t)k3_tok_piece_rank(t, s + start[i], start[i + 1] - start[i]);
    free(start);
    return m;
}
