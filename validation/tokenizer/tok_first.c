/* tok_first.c - what a first occurrence costs, by class: the distinct pieces of a file (the
 * pre-tokenizer's, k3_pretok_next), each handed to k3_bpe_pieces alone with a memo emptied
 * before each round, so that every piece is a miss, its merge and its insert, as a call on new
 * text meets it; ASCII and multi-byte pieces of 3..16 bytes (the memo's) and of 17..48 (the
 * long-piece table's) apart. A low-noise measure of the merge paths, where a whole call mixes
 * them with the memo hits and the scanner (README "Session 25").
 *
 *   tok_first MODEL CONFIG FILE [ROUNDS (default 20)] [CLASS 0..3 or -1 (default all)] [ORDER]
 *
 * ORDER: the order the pieces of a class are merged in: text (the default: their first
 * occurrences' order), vocab (by the vocabulary slot their whole-token lookup reads, so that
 * those reads walk the slot table from one end to the other), memo (by their set of the memo
 * or, over 16 bytes, of the long-piece table) or random. If a first occurrence waited on its slot's cache miss, vocab would be the fastest
 * (README "Run 117").
 *
 * Prints each class's distinct pieces, their ids and the best round's time a piece. */
#include <string.h>

#include "core/clock.h"
#include "frontend/bpe_memo.h"
#include "frontend/tok_internal.h"
#include "tok_tool.h"

#define PAD 64 /* readable bytes past each piece, as in a text */

struct piece {
    size_t off, n;
};

struct klass {
    const char *name;
    struct piece *p;
    size_t n, cap;
    uint8_t *bytes;
    size_t len, bytes_cap;
};

/* A piece's place in the order, for sorting. */
struct keyed {
    uint64_t key;
    size_t i;
};

static int keyed_cmp(const void *a, const void *b)
{
    uint64_t x = ((const struct keyed *)a)->key, y = ((const struct keyed *)b)->key;
    return x < y ? -1 : x > y;
}

/* The orders (see the header), by their index. */
static const char *const orders[] = {"text", "vocab", "memo", "random"};

/* k's pieces in order `by` (an index of orders; c: the cache they are merged with, whose
 * long-piece table's sets the memo order uses); 0, or -1 without the memory. */
static int reorder(const struct k3_tok *t, const struct k3_bpe_cache *c, struct klass *k, int by)
{
    if (by == 0) return 0;
    struct keyed *kx = malloc((k->n + 1) * sizeof *kx);
    struct piece *np = malloc((k->n + 1) * sizeof *np);
    if (!kx || !np) {
        free(kx);
        free(np);
        return -1;
    }
    uint64_t x = 0x9E3779B97F4A7C15ull; /* splitmix64's state, for random */
    for (size_t i = 0; i < k->n; i++) {
        const uint8_t *q = k->bytes + k->p[i].off;
        size_t n = k->p[i].n, avail = n + PAD;
        uint64_t w0 = k3_tok_word(q, n, avail), key;
        if (by == 1) {
            key = k3_tok_piece_hash(t, w0, q, n, avail) >> 32 & t->piece_mask;
        } else if (by == 2) {
            key = n <= K3_MEMO_BYTES ? memo_hash(w0, memo_word1(q, n, avail), n)
                                     : k3_long_set(k3_tok_piece_hash(t, w0, q, n, avail), c->long_mask);
        } else {
            uint64_t z = (x += 0x9E3779B97F4A7C15ull);
            z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ z >> 27) * 0x94D049BB133111EBull;
            key = z ^ z >> 31;
        }
        kx[i] = (struct keyed){key, i};
    }
    qsort(kx, k->n, sizeof *kx, keyed_cmp);
    for (size_t i = 0; i < k->n; i++) np[i] = k->p[kx[i].i];
    free(kx);
    free(k->p);
    k->p = np;
    return 0;
}

/* 0: ASCII 3..16 bytes, 1: ASCII 17..48, 2: multi-byte 3..16, 3: multi-byte 17..48; -1 others */
static int class_of(const uint8_t *s, size_t n)
{
    if (n < 3 || n > K3_LONG_CACHE_BYTES) return -1;
    int mb = 0;
    for (size_t i = 0; i < n; i++) mb |= s[i] >= 0x80;
    return (mb ? 2 : 0) + (n > K3_MEMO_BYTES);
}

/* Adds s[0..n) to k unless seen (seen: tok_tool_piece_hash's, open addressing, mask + 1
 * slots, more than the text has pieces). 1 when added, 0 when seen, -1 out of memory. */
static int add_distinct(struct klass *k, uint64_t *seen, size_t mask, const uint8_t *s, size_t n)
{
    uint64_t h = tok_tool_piece_hash(s, n);
    size_t j = h & mask;
    while (seen[j] && seen[j] != h) j = (j + 1) & mask;
    if (seen[j]) return 0;
    seen[j] = h;
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 1024;
        k->p = realloc(k->p, k->cap * sizeof *k->p);
    }
    while (k->len + n + PAD > k->bytes_cap) {
        k->bytes_cap = k->bytes_cap ? 2 * k->bytes_cap : 1 << 16;
        k->bytes = realloc(k->bytes, k->bytes_cap);
    }
    if (!k->p || !k->bytes) return -1;
    memcpy(k->bytes + k->len, s, n);
    memset(k->bytes + k->len + n, 0, PAD);
    k->p[k->n++] = (struct piece){k->len, n};
    k->len += n + PAD;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: tok_first MODEL CONFIG FILE [ROUNDS] [CLASS] [text|vocab|memo|random]\n");
        return 2;
    }
    struct k3_tok *t;
    size_t len;
    char *text = tok_tool_open("tok_first", argv, &t, &len);
    if (!text) return 1;
    int rounds = argc > 4 ? atoi(argv[4]) : 20, only = argc > 5 ? atoi(argv[5]) : -1;
    struct klass k[4] = {{.name = "ASCII 3..16"}, {.name = "ASCII 17..48"}, {.name = "multi-byte 3..16"},
                         {.name = "multi-byte 17..48"}};
    size_t mask = 1;
    while (mask < len) mask = mask * 2 + 1; /* at least as many slots as bytes: pieces fit */
    uint64_t *seen = calloc(mask + 1, sizeof *seen);
    const uint8_t *s = (const uint8_t *)text;
    for (size_t p = 0; seen && p < len;) {
        size_t e = k3_pretok_next(s, p, len);
        int c = class_of(s + p, e - p);
        if (c >= 0 && add_distinct(&k[c], seen, mask, s + p, e - p) < 0) {
            free(seen);
            seen = NULL;
        }
        p = e;
    }
    if (!seen) {
        fprintf(stderr, "tok_first: out of memory\n");
        return 1;
    }
    struct k3_bpe_cache cache;
    k3_bpe_cache_init(t, &cache, len);
    int by = 0;
    while (argc > 6 && by < 4 && strcmp(argv[6], orders[by])) by++;
    if (by == 4) {
        fprintf(stderr, "tok_first: order %s: not text, vocab, memo or random\n", argv[6]);
        return 2;
    }
    for (int c = 0; c < 4; c++)
        if (reorder(t, &cache, &k[c], by)) {
            fprintf(stderr, "tok_first: out of memory\n");
            return 1;
        }
    int32_t out[K3_LONG_CACHE_BYTES + 8];
    for (int c = 0; c < 4; c++) {
        if ((only >= 0 && c != only) || !k[c].n) continue;
        double best = 1e30;
        size_t ids = 0;
        for (int r = 0; r < rounds; r++) {
            k3_bpe_cache_clear(NULL, &cache); /* empty: no seeds, every piece a first occurrence */
            ids = 0;
            double t0 = k3_now_s();
            for (size_t i = 0; i < k[c].n; i++) {
                const uint8_t *q = k[c].bytes + k[c].p[i].off;
                size_t end = k[c].p[i].n;
                ids += k3_bpe_pieces(t, q, 0, &end, 1, q + end + PAD, &cache, out);
            }
            double dt = k3_now_s() - t0;
            best = dt < best ? dt : best;
        }
        printf("%-18s %7zu distinct %7zu ids: %7.1f ns a piece (best of %d rounds)\n", k[c].name, k[c].n, ids,
               best / (double)k[c].n * 1e9, rounds);
    }
    k3_bpe_cache_free(&cache);
    for (int c = 0; c < 4; c++) {
        free(k[c].p);
        free(k[c].bytes);
    }
    free(seen);
    free(text);
    k3_tok_free(t);
    return 0;
}
