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
#include "frontend/bpe_memo.h"
#include "frontend/unicode.h"

#include <stdlib.h>

#include "core/log.h"

#define BPE_STACK 512 /* longest piece whose heap merge works in stack arrays */

/* The merge loop over parts tok[0..m) with adjacent pair ranks rk[0..m-1). The arrays are
 * short (<= K3_MERGE_LINEAR_MAX): GCC would turn their shifts into memmove calls that cost more
 * than the moves. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
size_t k3_bpe_merge_linear(const struct k3_tok *t, uint32_t *tok, uint32_t *rk, size_t m, int32_t *out)
{
    /* The pairs that merging any pair there now would look up next (the merge's token is the
     * pair's rank), touched together: the loop below finds them one merge after another, each
     * lookup waiting on the one before (host, run 92: prose -3%, code -4%, long_1m -1%). */
    for (size_t i = 0; i + 1 < m; i++) {
        if (rk[i] == K3_TOK_NONE) continue;
        if (i > 0) k3_tok_pair_prefetch(t, tok[i - 1], rk[i]);
        if (i + 2 < m) k3_tok_pair_prefetch(t, rk[i], tok[i + 2]);
    }
    while (m > 1) {
        /* the lowest (rank, position), without a branch per pair (ranks are unpredictable) */
        uint64_t best = UINT64_MAX;
        for (size_t i = 0; i + 1 < m; i++) {
            uint64_t key = (uint64_t)rk[i] << 8 | i;
            best = key < best ? key : best;
        }
        uint32_t r = (uint32_t)(best >> 8);
        if (r == K3_TOK_NONE) break;
        size_t bi = (size_t)(best & 0xFF);
        tok[bi] = r;
        for (size_t i = bi + 1; i + 1 < m; i++) tok[i] = tok[i + 1], rk[i] = rk[i + 1];
        m--;
        if (bi + 1 < m) rk[bi] = k3_tok_pair_rank(t, tok[bi], tok[bi + 1]);
        if (bi > 0) rk[bi - 1] = k3_tok_pair_rank(t, tok[bi - 1], tok[bi]);
    }
    for (size_t i = 0; i < m; i++) out[i] = (int32_t)tok[i];
    return m;
}

/* A piece longer than K3_BPE_SHORT from its single bytes: the heap merge. */
static size_t bpe_long(const struct k3_tok *t, const uint8_t *s, size_t n, int32_t *out)
{
    uint32_t stack[BPE_STACK] = {0}; /* zeroed only to quiet -Wmaybe-uninitialized */
    uint32_t *tok = n > BPE_STACK ? malloc(sizeof(uint32_t) * n) : stack;
    K3_CHECK(tok, "out of memory in BPE of a %zu-byte piece", n);
    for (size_t i = 0; i < n; i++) tok[i] = t->byte_rank[s[i]];
    size_t m = k3_bpe_merge_heap(t, tok, n, out);
    if (tok != stack) free(tok);
    return m;
}

size_t k3_bpe_bytes(const struct k3_tok *t, const uint8_t *s, size_t n, int32_t *out)
{
    if (n > K3_BPE_SHORT) return bpe_long(t, s, n, out);
    uint32_t tok[K3_BPE_SHORT], rk[K3_BPE_SHORT];
    for (size_t i = 0; i < n; i++) tok[i] = t->byte_rank[s[i]];
    if (n > K3_MERGE_LINEAR_MAX) return k3_bpe_merge_heap(t, tok, n, out);
    for (size_t i = 0; i + 1 < n; i++) rk[i] = t->byte_pairs[s[i] << 8 | s[i + 1]];
    return k3_bpe_merge_linear(t, tok, rk, n, out);
}

/* An ASCII piece, byte pairs first: bpe_chars.c's argument with the pair of bytes X = x y for
 * a character. Its one merge has rank r = C(X); a merge joining x or y to a byte outside X
 * makes a token that holds two adjacent bytes across X's boundary, rank >= the boundary's
 * ascii_span. So when r is below ascii_span at both of X's outer boundaries (NONE at the
 * piece's ends), the byte merge makes X before anything touches its bytes, and starting
 * with X whole gives the same merges. Two such pairs never overlap (x y z: each rank would
 * have to be below the other). Long_1m's ASCII pieces that are no token: 2.3 of their 4.9
 * merges. */
size_t k3_bpe_ascii(const struct k3_tok *t, const uint8_t *s, size_t n, const struct k3_piece_key *whole,
                    int32_t *out)
{
    if (n > 64) return k3_bpe_whole_token(t, s, n, whole, out) ? 1 : k3_bpe_bytes(t, s, n, out);
    /* pr[i]: rank of the pair s[i] s[i+1]; sp[i]: ascii_span at the boundary before s[i] */
    uint32_t pr[65], sp[66], tok[64], rk[64];
    sp[0] = sp[n] = sp[n + 1] = K3_TOK_NONE;
    pr[n - 1] = K3_TOK_NONE;
    for (size_t i = 0; i + 1 < n; i++) {
        pr[i] = t->byte_pairs[(uint32_t)s[i] << 8 | s[i + 1]];
        sp[i + 1] = t->ascii_span[(uint32_t)s[i] << 7 | s[i + 1]];
    }
    /* the parts; bit k of big: part k is a pair */
    uint64_t big = 0;
    size_t m = 0;
    for (size_t i = 0; i < n; m++) {
        uint32_t r = pr[i];
        uint64_t pair = (uint64_t)(r < sp[i]) & (r < sp[i + 2]);
        tok[m] = pair ? r : t->byte_rank[s[i]];
        rk[m] = pr[i + pair]; /* right for two single bytes */
        big |= pair << m;
        i += 1 + pair;
    }
    /* ranks next to a pair come from the pair table */
    uint64_t near = (big | big >> 1) & ((1ull << (m - 1)) - 1);
    for (uint64_t b = near; b; b &= b - 1) {
        size_t k = (size_t)__builtin_ctzll(b);
        k3_tok_pair_prefetch(t, tok[k], tok[k + 1]);
    }
    /* the whole-token lookup (its lines touched in bpe_uncached) after the pair fetches, so
     * that its miss and theirs overlap */
    if (k3_bpe_whole_token(t, s, n, whole, out)) return 1;
    if (m > K3_MERGE_LINEAR_MAX) return k3_bpe_merge_heap(t, tok, m, out);
    for (uint64_t b = near; b; b &= b - 1) {
        size_t k = (size_t)__builtin_ctzll(b);
        rk[k] = k3_tok_pair_rank(t, tok[k], tok[k + 1]);
    }
    return k3_bpe_merge_linear(t, tok, rk, m, out);
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

size_t k3_bpe_merge_heap(const struct k3_tok *t, const uint32_t *tok0, size_t n, int32_t *out)
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
        uint32_t r = k3_tok_pair_rank(t, tok[i], tok[i + 1]);
        if (r != K3_TOK_NONE) heap_push(heap, &nh, (uint64_t)r << 32 | i);
    }
    while (nh) {
        uint64_t top = heap_pop(heap, &nh);
        uint32_t r = (uint32_t)(top >> 32), i = (uint32_t)top;
        uint32_t j = next[i];
        /* Stale entry: i was merged away (tok = NONE), or its pair is no longer rank r. */
        if (tok[i] == K3_TOK_NONE || j >= n || k3_tok_pair_rank(t, tok[i], tok[j]) != r)
            continue;
        tok[i] = r;
        tok[j] = K3_TOK_NONE;
        next[i] = next[j];
        if (next[j] < n) prev[next[j]] = i;
        if (next[i] < n) {
            uint32_t r2 = k3_tok_pair_rank(t, tok[i], tok[next[i]]);
            if (r2 != K3_TOK_NONE) heap_push(heap, &nh, (uint64_t)r2 << 32 | i);
        }
        if (i > 0) {
            uint32_t p = prev[i];
            uint32_t r2 = k3_tok_pair_rank(t, tok[p], tok[i]);
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

/* The words of token r (of n = 1..16 bytes), zero-padded. */
static void token_words(const struct k3_tok *t, uint32_t r, size_t n, uint64_t w[2])
{
    const uint8_t *b = t->bytes + t->off[r];
    w[0] = w[1] = 0;
    for (size_t i = 0; i < n; i++) w[i / 8] |= (uint64_t)b[i] << (8 * (i % 8));
}

static int cmp_seed(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Token r's seed record rec (its memo hash with r in the low bits, then the words of its m8 or
 * m16 entry): its length in words, 2 (an m8 record) or 4 (m16), or 0 when the token is longer
 * than a memo holds. */
static size_t seed_record(const struct k3_tok *t, uint32_t r, uint64_t rec[4])
{
    size_t n = t->off[r + 1] - t->off[r];
    if (n == 0 || n > K3_MEMO_BYTES) return 0;
    uint64_t w[2];
    token_words(t, r, n, w);
    rec[0] = (memo_hash(w[0], w[1], n) & ~ID_MASK) | r;
    if (n <= 7) {
        rec[1] = memo_key8(w[0], n) | 1ull << 62;
        return 2;
    }
    rec[1] = w[0];
    rec[2] = w[1];
    rec[3] = n | 1u << 5 | (uint64_t)r << 8 | M16_SEED;
    return 4;
}

int k3_memo_seeds_build(struct k3_tok *t)
{
    if (t->n_ranks > (1 << K3_MEMO_ID_BITS)) return 0; /* no memos (k3_bpe_cache_init) */
    t->seeds8 = malloc(sizeof(uint64_t) * 2 * (size_t)t->n_ranks);
    t->seeds16 = malloc(sizeof(uint64_t) * 4 * (size_t)t->n_ranks);
    if (!t->seeds8 || !t->seeds16) return -1;
    t->n_seeds8 = t->n_seeds16 = 0;
    for (uint32_t r = 0; r < (uint32_t)t->n_ranks; r++) {
        uint64_t rec[4];
        size_t words = seed_record(t, r, rec);
        if (words == 2) memcpy(t->seeds8 + 2 * t->n_seeds8++, rec, sizeof(uint64_t) * 2);
        if (words == 4) memcpy(t->seeds16 + 4 * t->n_seeds16++, rec, sizeof(uint64_t) * 4);
    }
    qsort(t->seeds8, t->n_seeds8, sizeof(uint64_t) * 2, cmp_seed);
    qsort(t->seeds16, t->n_seeds16, sizeof(uint64_t) * 4, cmp_seed);
    return 0;
}

/* A seed's entry of `words` words (m8 2, m16 4) from its seeds8 / seeds16 record s. */
static void seed_entry(const uint64_t *s, uint64_t *e, size_t words)
{
    if (words == 2) {
        e[0] = s[1];
        e[1] = (s[0] & ID_MASK) | M8_SEED;
    } else {
        e[0] = s[1];
        e[1] = s[2];
        e[2] = s[3];
        e[3] = 0;
    }
}

/* One table of a pieces memo (entries of `words` words: m8 2, m16 4; a set is hash >> shift),
 * empty, seeded from the records seeds[0..n) (t->seeds8 or t->seeds16, of `words` words, in
 * hash order, so set by set): in each set the tokens of the lowest ranks below `below`, the
 * lowest in way 0. */
static void seed_table(const uint64_t *seeds, size_t n, uint64_t *tab, int shift, size_t words,
                       uint32_t below)
{
    size_t set_words = K3_MEMO_WAYS * words;
    for (size_t i = 0; i < n;) {
        uint64_t set = seeds[i * words] >> shift;
        const uint64_t *best[K3_MEMO_WAYS];
        uint32_t r[K3_MEMO_WAYS];
        int k = 0;
        for (; i < n && seeds[i * words] >> shift == set; i++) {
            uint32_t x = (uint32_t)(seeds[i * words] & ID_MASK);
            if (x >= below || (k == K3_MEMO_WAYS && x >= r[K3_MEMO_WAYS - 1])) continue;
            int j = k < K3_MEMO_WAYS ? k++ : K3_MEMO_WAYS - 1;
            for (; j > 0 && r[j - 1] > x; j--) r[j] = r[j - 1], best[j] = best[j - 1];
            r[j] = x;
            best[j] = seeds + i * words;
        }
        for (int j = 0; j < k; j++) seed_entry(best[j], tab + set * set_words + (size_t)j * words, words);
    }
}

/* The pieces memo m, empty, made ready with seeds (bpe_memo.h, M8_SEED): the tokens of the
 * lowest ranks of up to 16 bytes (of the first K3_MEMO_SEED_FACTOR times as many ranks as m8
 * has ways: all of them for long_1m's memo, 1,024 for the smallest), each as the piece of its
 * own bytes, whose ids are that one token (tiktoken's whole-piece lookup), so exact for any
 * text; in each set the lowest ranks that fall in it, the lowest in way 0. A first occurrence
 * of such a piece is then a hit rather than a merge: long_1m makes 26.1k merges of up to 16
 * bytes instead of 41.3k, prose 6.3k instead of 11.3k, and on the GPU machine's host a call on
 * new text is 7-16% faster (README, runs 125-128, with the larger memo of
 * K3_MEMO_SEEDED_MORE8). The tables are written in order, from the tokens sorted by hash at
 * load (k3_memo_seeds_build): on the dev VM k3_tok_forget after long_1m (emptying and seeding
 * its 6 MiB) takes 3 ms, where a token at a time, each into a random line, took 26-32 ms (and
 * the tokenizer's load takes 15-25 ms more, for the sort). */
static void memo_seed(const struct k3_tok *t, struct k3_memo *m)
{
    size_t below = ((size_t)1 << (64 - m->shift8)) * K3_MEMO_WAYS * K3_MEMO_SEED_FACTOR;
    if (below > (size_t)t->n_ranks) below = (size_t)t->n_ranks;
    if (below * 8 >= (size_t)t->n_seeds8 + t->n_seeds16) {
        seed_table(t->seeds8, t->n_seeds8, m->m8, m->shift8, 2, (uint32_t)below);
        seed_table(t->seeds16, t->n_seeds16, m->m16, m->shift16, 4, (uint32_t)below);
        return;
    }
    /* a small memo (long_10k's: 4,096 ranks of 163k): its ranks alone, lowest first, each into
     * its set's first empty way (a set's later ranks are higher), not a pass over every record */
    for (uint32_t r = 0; r < (uint32_t)below; r++) {
        uint64_t rec[4];
        size_t words = seed_record(t, r, rec);
        if (!words) continue;
        uint64_t *set = words == 2 ? m->m8 + (rec[0] >> m->shift8) * 2 * K3_MEMO_WAYS
                                   : m->m16 + (rec[0] >> m->shift16) * 4 * K3_MEMO_WAYS;
        for (int k = 0; k < K3_MEMO_WAYS; k++, set += words)
            if (!set[words == 2 ? 0 : 2]) { /* an m8 way is empty by its key, an m16 way by its length */
                seed_entry(rec, set, words);
                break;
            }
    }
}

void k3_bpe_cache_init(const struct k3_tok *t, struct k3_bpe_cache *c, size_t text_bytes)
{
    memset(c, 0, sizeof *c);
    c->on = t->n_ranks <= (1 << K3_MEMO_ID_BITS);
    if (c->on) {
        memo_init(&c->pieces, text_bytes, K3_MEMO_SEEDED_MORE8, K3_MEMO_SEEDED_MORE16);
        memo_seed(t, &c->pieces);
        memo_init(&c->segs, text_bytes / 4, 0, 0); /* segments: CJK words, a few thousand */
    }
    size_t sets = 16; /* the long-piece table comes on first use */
    while (sets < 4096 && sets * 2048 < text_bytes) sets *= 2;
    c->long_mask = c->long_mask_made = (uint32_t)sets - 1;
}

/* A memo table of entries of `words` words, emptied and back to its first size (shift_made). */
static void memo_table_reset(uint64_t **tab, int *shift, int shift_made, size_t words)
{
    size_t n = ((size_t)1 << (64 - shift_made)) * K3_MEMO_WAYS * words;
    if (*shift == shift_made) {
        memset(*tab, 0, n * sizeof(uint64_t));
        return;
    }
    uint64_t *first = k3_tok_table_alloc(n * sizeof(uint64_t), 0); /* grown */
    K3_CHECK(first, "out of memory");
    free(*tab);
    *tab = first;
    *shift = shift_made;
}

void k3_bpe_cache_clear(const struct k3_tok *t, struct k3_bpe_cache *c)
{
    if (c->on) {
        struct k3_memo *m[2] = {&c->pieces, &c->segs};
        for (int k = 0; k < 2; k++) {
            memo_table_reset(&m[k]->m8, &m[k]->shift8, m[k]->shift8_made, 2);
            memo_table_reset(&m[k]->m16, &m[k]->shift16, m[k]->shift16_made, 4);
            m[k]->evicted8 = m[k]->evicted16 = 0;
        }
        if (t) memo_seed(t, &c->pieces);
    }
    if (c->long_mask != c->long_mask_made) { /* grown: made again on first use */
        free(c->longs);
        free(c->long_tags);
        c->longs = NULL;
        c->long_tags = NULL;
        c->long_mask = c->long_mask_made;
    }
    if (c->long_tags) memset(c->long_tags, 0, ((size_t)c->long_mask + 1) * 2 * sizeof *c->long_tags);
    c->long_evicted = 0;
    c->over8 = c->over16 = c->over_long = 0;
}

/* The long-piece table's entries (left as they come: a way is empty by its tag) and tags
 * (empty) for `ways` ways: 1, or 0 with neither when the memory is not there. */
static int long_alloc(size_t ways, struct k3_long_cache_entry **longs, uint32_t **tags)
{
    *longs = k3_tok_table_alloc(ways * sizeof **longs, -1);
    *tags = k3_tok_table_alloc(ways * sizeof **tags, 0);
    if (*longs && *tags) return 1;
    free(*longs);
    free(*tags);
    *longs = NULL;
    *tags = NULL;
    return 0;
}

/* The long-piece table with twice the sets, holding what it held (a set's two ways go to the
 * two sets its index becomes with one more hash bit); unchanged when the memory is not there. */
static void long_double(const struct k3_tok *t, struct k3_bpe_cache *c)
{
    size_t ways = ((size_t)c->long_mask + 1) * 2;
    struct k3_long_cache_entry *longs;
    uint32_t *tags;
    if (!long_alloc(2 * ways, &longs, &tags)) return;
    uint32_t mask = c->long_mask * 2 + 1;
    for (size_t i = 0; i < ways; i++) {
        if (!c->long_tags[i]) continue;
        const struct k3_long_cache_entry *e = &c->longs[i];
        size_t n = c->long_tags[i] & 0xFF; /* the tag: hash bits << 8 | length */
        uint64_t w0 = k3_tok_word(e->key, n, n);
        size_t set = k3_long_set(k3_tok_piece_hash(t, w0, e->key, n, n), mask), k = tags[set] ? 1 : 0;
        tags[set + k] = c->long_tags[i];
        longs[set + k] = *e;
    }
    free(c->longs);
    free(c->long_tags);
    c->longs = longs;
    c->long_tags = tags;
    c->long_mask = mask;
}

/* The bytes of a memo table (entries of `words` words, set = hash >> shift) and of the
 * long-piece table; a doubling adds as much again. */
static size_t table_bytes(int shift, size_t words)
{
    return ((size_t)1 << (64 - shift)) * K3_MEMO_WAYS * words * sizeof(uint64_t);
}

static size_t long_bytes(uint32_t mask)
{
    return ((size_t)mask + 1) * 2 * (sizeof(struct k3_long_cache_entry) + sizeof(uint32_t));
}

size_t k3_bpe_cache_grown_bytes(const struct k3_bpe_cache *c)
{
    size_t b = 0;
    if (c->on) {
        const struct k3_memo *m = &c->pieces;
        b += table_bytes(m->shift8, 2) - table_bytes(m->shift8_made, 2);
        b += table_bytes(m->shift16, 4) - table_bytes(m->shift16_made, 4);
    }
    if (c->longs) b += long_bytes(c->long_mask) - long_bytes(c->long_mask_made);
    return b;
}

/* Whether a table that this call overflowed (over: it pushed out more than one entry for every
 * so many it holds, and may still double) doubles now: when the call before overflowed it too
 * and *room has its bytes (taken from it). *was_over becomes whether this call overflowed it
 * without its growing. */
static int grow_now(int over, uint8_t *was_over, size_t bytes, size_t *room)
{
    int now = over && *was_over && bytes <= *room;
    if (now) *room -= bytes;
    *was_over = (uint8_t)(over && !*was_over);
    return now;
}

/* A memo table (entries of `words` words) that pushed out more than one entry for every `per`
 * it holds, up to K3_MEMO_GROW_MAX doublings (grow_now). */
static void memo_table_grow(uint64_t **tab, int *shift, int shift_made, size_t words,
                            uint32_t evicted, size_t per, uint8_t *was_over, size_t *room)
{
    size_t held = ((size_t)1 << (64 - *shift)) * K3_MEMO_WAYS;
    int over = (size_t)evicted * per > held && shift_made - *shift < K3_MEMO_GROW_MAX;
    if (grow_now(over, was_over, table_bytes(*shift, words), room)) memo_table_double(tab, shift, words);
}

size_t k3_bpe_cache_grow(const struct k3_tok *t, struct k3_bpe_cache *c, size_t room)
{
    size_t before = k3_bpe_cache_grown_bytes(c);
    if (c->on) {
        struct k3_memo *m = &c->pieces;
        memo_table_grow(&m->m8, &m->shift8, m->shift8_made, 2, m->evicted8, 32, &c->over8, &room);
        memo_table_grow(&m->m16, &m->shift16, m->shift16_made, 4, m->evicted16, 8, &c->over16, &room);
        m->evicted8 = m->evicted16 = c->segs.evicted8 = c->segs.evicted16 = 0;
    }
    size_t ways = ((size_t)c->long_mask + 1) * 2;
    int over = c->longs && (size_t)c->long_evicted * 8 > ways &&
               c->long_mask < ((c->long_mask_made + 1) << K3_MEMO_GROW_MAX) - 1;
    if (grow_now(over, &c->over_long, long_bytes(c->long_mask), &room)) long_double(t, c);
    c->long_evicted = 0;
    return k3_bpe_cache_grown_bytes(c) - before;
}

void k3_bpe_cache_free(struct k3_bpe_cache *c)
{
    if (c->on) {
        memo_free(&c->pieces);
        memo_free(&c->segs);
    }
    free(c->longs);
    free(c->long_tags);
    memset(c, 0, sizeof *c);
}

/* Whole-token lookup, then the merge. h is the piece hash (valid when n fits a token).
 * One and two bytes come from the byte tables: the piece is a token, or its only pair is
 * not and it is two bytes. The whole-token lookup's lines are touched first; short pieces
 * look at them only after their merge's first pair fetches (k3_bpe_ascii, k3_bpe_chars). */
static size_t bpe_uncached(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s,
                           size_t n, size_t avail, uint64_t w0, uint64_t h, int valid, int32_t *out)
{
    if (n <= 2) {
        uint32_t r = n == 1 ? t->byte_rank[s[0]] : t->byte_pairs[(uint32_t)s[0] << 8 | s[1]];
        if (r != K3_TOK_NONE) {
            out[0] = (int32_t)r;
            return 1;
        }
        out[0] = (int32_t)t->byte_rank[s[0]];
        out[1] = (int32_t)t->byte_rank[s[1]];
        return 2;
    }
    int fits = n <= (size_t)t->max_token_bytes;
    struct k3_piece_key key = {w0, h, avail};
    if (fits) k3_tok_piece_prefetch(t, h);
    if (n <= K3_BPE_SHORT) { /* multi-byte text looks the piece up itself, and only when needed */
        for (size_t i = 0; i < n; i++)
            if (s[i] >= 0x80) return k3_bpe_chars(t, c, s, n, valid, fits ? &key : NULL, out);
        return k3_bpe_ascii(t, s, n, fits ? &key : NULL, out);
    }
    return k3_bpe_whole_token(t, s, n, fits ? &key : NULL, out) ? 1 : k3_bpe_bytes(t, s, n, out);
}

/* Pieces the memo did not answer: first occurrences, pieces over 16 bytes, and every piece
 * when there is no memo (kept out of line, so that the common path saves and restores few
 * registers). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static size_t piece_slow(const struct k3_tok *t, const uint8_t *s, size_t n, size_t avail,
                         struct k3_bpe_cache *cache, int valid, int32_t *out)
{
    uint64_t w0 = k3_tok_word(s, n, avail);
    uint64_t h = k3_tok_piece_hash(t, w0, s, n, avail);
    if (!cache || !cache->on || n > K3_LONG_CACHE_BYTES) return bpe_uncached(t, cache, s, n, avail, w0, h, valid, out);
    if (n > K3_MEMO_BYTES) { /* two ways; a new entry replaces an empty way, else one by hash */
        if (!cache->longs) {
            size_t ways = ((size_t)cache->long_mask + 1) * 2;
            K3_CHECK(long_alloc(ways, &cache->longs, &cache->long_tags), "out of memory");
        }
        size_t set = k3_long_set(h, cache->long_mask);
        uint32_t tag = (uint32_t)(h >> 40) << 8 | (uint32_t)n, *tags = cache->long_tags + set;
        struct k3_long_cache_entry *e = cache->longs + set;
        for (int k = 0; k < 2; k++)
            if (tags[k] == tag && !memcmp(e[k].key, s, n)) { /* equal tags: equal lengths */
                memcpy(out, e[k].ids, sizeof(int32_t) * e[k].n_ids);
                return e[k].n_ids;
            }
        size_t m = bpe_uncached(t, cache, s, n, avail, w0, h, valid, out);
        if (m <= K3_LONG_CACHE_IDS) {
            int k = !tags[0] ? 0 : !tags[1] ? 1 : (cache->long_evicted++, (int)(h >> 39 & 1));
            tags[k] = tag;
            e[k].n_ids = (uint32_t)m;
            memcpy(e[k].ids, out, m * sizeof(int32_t));
            memcpy(e[k].key, s, n);
        }
        return m;
    }
    /* a miss of the memo (k3_bpe_pieces or bpe_piece looked; k3_bpe_pieces does not for the
     * pieces within 16 bytes of the buffer's end, a few a text: if one is there, a second
     * entry of the same ids only takes a way): merge, and remember */
    uint64_t w1 = memo_word1(s, n, avail);
    size_t m = bpe_uncached(t, cache, s, n, avail, w0, h, valid, out);
    memo_put(&cache->pieces, w0, w1, n, memo_hash(w0, w1, n), out, m);
    return m;
}

static inline size_t bpe_piece(const struct k3_tok *t, const uint8_t *s, size_t n, size_t avail,
                               struct k3_bpe_cache *cache, int valid, int32_t *out)
{
    /* Every piece of up to 16 bytes asks the memo first, single bytes, byte pairs and single
     * characters too: their own shortcuts (byte_rank, byte_pairs, char_info) are cheaper than
     * a memo probe, but choosing among them by length was four unpredictable branches per
     * piece, and one memo path is faster in all (long_1m -9%, prose -11%, code -7%, cjk
     * even). A first occurrence of one or two bytes gets the byte tables in bpe_uncached,
     * a single character the whole-token lookup. */
    if (n <= K3_MEMO_BYTES && cache && cache->on) {
        uint64_t w0 = k3_tok_word(s, n, avail);
        uint64_t w1 = memo_word1(s, n, avail);
        size_t m = memo_get(&cache->pieces, w0, w1, n, memo_hash(w0, w1, n), out);
        if (m) return m;
    }
    return piece_slow(t, s, n, avail, cache, valid, out);
}

size_t k3_bpe_piece(const struct k3_tok *t, const uint8_t *s, size_t n, size_t avail,
                    struct k3_bpe_cache *cache, int32_t *out)
{
    return bpe_piece(t, s, n, avail, cache, 0, out);
}

size_t k3_bpe_pieces(const struct k3_tok *t, const uint8_t *s, size_t p, const size_t *ends,
                     size_t m, const uint8_t *end, struct k3_bpe_cache *cache, int32_t *out)
{
    int32_t *o = out;
    size_t readable = (size_t)(end - s);
    if (!cache || !cache->on || !K3_TOK_LE || readable < 16) {
        for (size_t i = 0; i < m; i++) {
            o += bpe_piece(t, s + p, ends[i] - p, readable - p, cache, 1, o);
            p = ends[i];
        }
        return (size_t)(o - out);
    }
    /* The memo probe of every piece of up to 16 bytes, here, its words loaded once (16 bytes
     * readable at p). First the run of pieces of up to 7 bytes in way 0 of their m8 sets
     * (most pieces of ordinary text): one load of the bytes, one multiply, one compare, one
     * 8-byte store of the ids; a loop of its own, which keeps few values live (the memo's
     * fields in locals: the stores to out could alias the struct). */
    static const uint64_t low_bytes[8] = {0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFF,
                                          0xFFFFFFFFFFFF, 0xFFFFFFFFFFFFFF};
    const uint64_t *m8 = cache->pieces.m8;
    int shift8 = cache->pieces.shift8;
    size_t last = readable - 16; /* the last p with 16 bytes readable */
    for (size_t i = 0; i < m; i++) {
        for (; i < m; i++) {
            size_t e = ends[i], n = e - p;
            if (n > 7 || p > last) break;
            uint64_t w;
            memcpy(&w, s + p, 8);
            uint64_t kk = memo_key8(w & low_bytes[n], n);
            const uint64_t *set = m8 + (size_t)(memo_hash8(kk) >> shift8) * (2 * K3_MEMO_WAYS);
            if (((set[0] ^ kk) << 2) != 0) break;
            memcpy(o, set + 1, 8);
            o += set[0] >> 62;
            p = e;
        }
        if (i == m) break;
        /* piece i: the other ways of its m8 set, m16, or the merge (its key and hash are
         * computed again here rather than carried out of the loop above, whose values then
         * all fit in registers: fewer instructions in all, 38dc55a) */
        size_t e = ends[i], n = e - p, k = 0;
        if (n <= 16 && p <= last) {
            struct k3_memo *mm = &cache->pieces;
            uint64_t w0, w1 = 0, h;
            memcpy(&w0, s + p, 8);
            if (n <= 7) {
                w0 &= low_bytes[n];
                uint64_t kk = memo_key8(w0, n);
                h = memo_hash8(kk);
                k = memo_get8(memo_set8(mm, h), kk, o);
            } else {
                if (n > 8) {
                    memcpy(&w1, s + p + 8, 8);
                    w1 &= ~0ull >> (128 - 8 * n);
                }
                h = memo_hash(w0, w1, n);
            }
            if (n > 7 || k == M8_GET_IN_M16) k = memo_get16(memo_set16(mm, h), w0, w1, n, o);
        }
        o += k ? k : piece_slow(t, s + p, n, readable - p, cache, 1, o);
        p = e;
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
