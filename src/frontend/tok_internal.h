/* tok_internal.h - the tokenizer's data, shared by vocab.c, pretok.c, bpe.c, tokenizer.c.
 *
 * The vocabulary is held three ways:
 *   - id -> bytes: one byte arena with offsets (decode, and the specials' names);
 *   - bytes -> rank: an open-addressing hash (the whole-piece lookup tiktoken starts with);
 *   - (rank a, rank b) -> rank of bytes(a)+bytes(b): every pair whose concatenation is a
 *     token, found at load time by splitting every token at every byte. BPE merges look
 *     pairs up by two integers instead of hashing byte strings (tiktoken's approach). It is
 *     exact: the parts of a piece during BPE are always tokens, so the concatenation rank
 *     tiktoken looks up is exactly this pair's entry. */
#ifndef K3_FRONTEND_TOK_INTERNAL_H
#define K3_FRONTEND_TOK_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "frontend/tokenizer.h"

#define K3_TOK_NONE 0xFFFFFFFFu  /* "no such rank" in the tables */

struct k3_tok {
    int n_ranks;                 /* BPE ranks; ids n_ranks.. are the specials */
    int n_vocab;
    uint32_t *off;               /* [n_vocab + 1] byte offsets into bytes */
    uint8_t *bytes;
    uint8_t special_flag[K3_TOK_N_SPECIAL];
    int max_token_bytes;

    uint64_t *piece_slots;       /* (hash32 << 32) | (rank + 1); 0 = empty */
    uint32_t piece_mask;

    uint64_t *pair_keys;         /* (a << 32) | b; UINT64_MAX = empty */
    uint32_t *pair_vals;
    uint32_t pair_mask;

    uint32_t byte_rank[256];

    /* Specials by name: all start with '<' or '[' and end at the first '>' or ']'
     * (checked at load), so a candidate is found by one hash probe. */
    uint64_t *spec_slots;        /* same layout as piece_slots, id - n_ranks + 1 */
    uint32_t spec_mask;
    int max_special_bytes;
};

static inline uint64_t k3_tok_hash(const uint8_t *s, size_t n)
{
    const uint64_t m = 0x9E3779B97F4A7C15ull;
    uint64_t h = (uint64_t)n * m;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * m;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        if (n >= 4) {
            uint32_t a, b;
            memcpy(&a, s, 4);
            memcpy(&b, s + n - 4, 4);
            w = ((uint64_t)b << 32) | a;
        } else {
            w = (uint64_t)s[0] | ((uint64_t)s[n / 2] << 8) | ((uint64_t)s[n - 1] << 16);
        }
        h = (h ^ w) * m;
    }
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

/* Rank of the byte string s[0..n) or K3_TOK_NONE. */
static inline uint32_t k3_tok_piece_rank(const struct k3_tok *t, const uint8_t *s, size_t n)
{
    uint64_t h = k3_tok_hash(s, n);
    uint32_t tag = (uint32_t)h, i = (uint32_t)(h >> 32) & t->piece_mask;
    for (;;) {
        uint64_t e = t->piece_slots[i];
        if (!e) return K3_TOK_NONE;
        if ((uint32_t)(e >> 32) == tag) {
            uint32_t r = (uint32_t)e - 1;
            if (t->off[r + 1] - t->off[r] == n && !memcmp(t->bytes + t->off[r], s, n)) return r;
        }
        i = (i + 1) & t->piece_mask;
    }
}

static inline uint32_t k3_tok_pair_rank(const struct k3_tok *t, uint32_t a, uint32_t b)
{
    uint64_t key = ((uint64_t)a << 32) | b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t i = (uint32_t)(h >> 40) & t->pair_mask;
    for (;;) {
        uint64_t k = t->pair_keys[i];
        if (k == key) return t->pair_vals[i];
        if (k == UINT64_MAX) return K3_TOK_NONE;
        i = (i + 1) & t->pair_mask;
    }
}

/* pretok.c: end of the pre-tokenizer piece that starts at s[p], in the text s[0..n). */
size_t k3_pretok_next(const uint8_t *s, size_t p, size_t n);

/* bpe.c: appends the ids of one piece; out must have room for n ids. Returns the count. */
size_t k3_bpe_piece(const struct k3_tok *t, const uint8_t *s, size_t n, int32_t *out);
/* The plain O(n^2) merge, kept as the reference the fast paths are tested against. */
size_t k3_bpe_piece_ref(const struct k3_tok *t, const uint8_t *s, size_t n, int32_t *out);

#endif
