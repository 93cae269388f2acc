/* tok_internal.h - the tokenizer's data, shared by vocab.c, pretok.c, bpe.c, tokenizer.c.
 *
 * The vocabulary is held three ways:
 *   - id -> bytes: one byte arena with offsets (decode, and the specials' names);
 *   - bytes -> rank: an open-addressing hash (the whole-piece lookup tiktoken starts with);
 *   - (rank a, rank b) -> rank of bytes(a)+bytes(b): every pair whose concatenation is a
 *     token, found at load time by splitting every token at every byte. BPE merges look
 *     pairs up by two integers instead of hashing byte strings (tiktoken's approach). It is
 *     exact: the parts of a piece during BPE are always tokens, so the concatenation rank
 *     tiktoken looks up is exactly this pair's entry. Pairs of single bytes also have a
 *     direct 256 x 256 table (the first round of every merge, L2-resident). */
#ifndef K3_FRONTEND_TOK_INTERNAL_H
#define K3_FRONTEND_TOK_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "frontend/tokenizer.h"

#define K3_TOK_NONE 0xFFFFFFFFu  /* "no such rank" in the tables */

/* Whole-token lookup slot: the first 8 bytes inline, so a hit on a token of up to 8 bytes
 * (most pieces) touches one cache line. */
struct k3_tok_slot {
    uint64_t w0;       /* first min(len, 8) bytes, little-endian, zero-padded */
    uint32_t rank1;    /* rank + 1; 0 = empty */
    uint16_t len;
    uint16_t tag;      /* 16 more bits of the hash */
};

struct k3_tok {
    int n_ranks;                 /* BPE ranks; ids n_ranks.. are the specials */
    int n_vocab;
    uint32_t *off;               /* [n_vocab + 1] byte offsets into bytes */
    uint8_t *bytes;
    uint8_t special_flag[K3_TOK_N_SPECIAL];
    int max_token_bytes;

    struct k3_tok_slot *pieces;  /* bytes -> rank */
    uint32_t piece_mask;
    uint64_t *piece_filter;      /* 2^20 bits, one per hash value's low 20 bits: a clear bit
                                  * answers "not a token" from L2, without the big table */

    uint64_t *pairs;             /* a << 40 | b << 20 | rank(a+b); UINT64_MAX = empty */
    uint32_t pair_mask;
    uint32_t *byte_pairs;        /* [65536] rank of the 2-byte string x y, or NONE */

    uint32_t byte_rank[256];

    /* Characters first (bpe.c): for every BMP code point, (token + 1) << 32 | the highest rank
     * merged on the way when BPE runs on its bytes alone, or 0 when they do not merge into
     * one token. And for each byte pair (last byte of a character, first byte of the next),
     * the lowest rank of a token that spans such a boundary without both characters being
     * whole in it (K3_TOK_NONE: no token does). */
    uint64_t *char_info;         /* [65536] */
    uint32_t *split_rank;        /* [65536] */
    /* Blocked Bloom filter of the pairs of adjacent characters (X, Y) inside tokens that are
     * whole characters (bpe.c: a boundary X|Y that no token spans is never merged across). */
    uint64_t *bigram_filter;     /* [K3_BIGRAM_WORDS] */

    /* Specials by name: all start with '<' or '[' and end at the first '>' or ']'
     * (checked at load), so a candidate is found by one hash probe. */
    uint64_t *spec_slots;        /* (hash32 << 32) | (id - n_ranks + 1); 0 = empty */
    uint32_t spec_mask;
    int max_special_bytes;
};

/* 128 KiB: the ~57,000 pairs set about 11% of its bits (false positives ~1%, which only
 * keep a boundary), and it stays in L2 next to the other tables, where 512 KiB did not. */
#define K3_BIGRAM_WORDS (1u << 14)

/* Hash of a short name (specials). */
static inline uint64_t k3_tok_hash(const uint8_t *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001B3ull;
    return h ^ (h >> 32);
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define K3_TOK_LE 1
#else
#define K3_TOK_LE 0
#endif

/* The 8-byte word of s[0..min(n, 8)), zero-padded; avail = bytes readable at s (>= n). */
static inline uint64_t k3_tok_word(const uint8_t *s, size_t n, size_t avail)
{
    uint64_t w = 0;
    if (K3_TOK_LE && avail >= 8) {
        memcpy(&w, s, 8);
        if (n < 8) w &= (1ull << (8 * n)) - 1;
        return w;
    }
    for (size_t i = 0; i < n && i < 8; i++) w |= (uint64_t)s[i] << (8 * i);
    return w;
}

static inline uint64_t k3_tok_mix(uint64_t h)
{
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 32);
}

/* Hash of a piece whose first word is w0. */
static inline uint64_t k3_piece_hash(uint64_t w0, const uint8_t *s, size_t n, size_t avail)
{
    uint64_t h = (w0 ^ ((uint64_t)n << 56)) * 0x9E3779B97F4A7C15ull;
    for (size_t i = 8; i < n; i += 8) {
        h ^= k3_tok_word(s + i, n - i, avail - i);
        h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull;
    }
    return k3_tok_mix(h);
}

static inline uint32_t k3_tok_piece_rank_h(const struct k3_tok *t, const uint8_t *s, size_t n,
                                           uint64_t w0, uint64_t h)
{
    uint32_t bit = (uint32_t)h & 0xFFFFF;
    if (!(t->piece_filter[bit >> 6] >> (bit & 63) & 1)) return K3_TOK_NONE;
    uint32_t i = (uint32_t)(h >> 32) & t->piece_mask;
    uint16_t tag = (uint16_t)h;
    for (;;) {
        const struct k3_tok_slot *e = &t->pieces[i];
        if (!e->rank1) return K3_TOK_NONE;
        if (e->w0 == w0 && e->len == n && e->tag == tag &&
            (n <= 8 || !memcmp(t->bytes + t->off[e->rank1 - 1] + 8, s + 8, n - 8)))
            return e->rank1 - 1;
        i = (i + 1) & t->piece_mask;
    }
}

/* Rank of the byte string s[0..n) or K3_TOK_NONE. */
static inline uint32_t k3_tok_piece_rank(const struct k3_tok *t, const uint8_t *s, size_t n)
{
    if (n > (size_t)t->max_token_bytes) return K3_TOK_NONE;
    uint64_t w0 = k3_tok_word(s, n, n);
    return k3_tok_piece_rank_h(t, s, n, w0, k3_piece_hash(w0, s, n, n));
}

static inline uint64_t k3_tok_bigram_hash(uint32_t x, uint32_t y)
{
    return k3_tok_mix(((uint64_t)x << 21 | y) * 0x9E3779B97F4A7C15ull);
}

/* 0: no token has the characters x y adjacent and whole; 1: some token may. */
static inline int k3_tok_bigram_maybe(const struct k3_tok *t, uint32_t x, uint32_t y)
{
    uint64_t h = k3_tok_bigram_hash(x, y);
    uint64_t bits = 1ull << (h >> 32 & 63) | 1ull << (h >> 40 & 63);
    return (t->bigram_filter[h & (K3_BIGRAM_WORDS - 1)] & bits) == bits;
}

static inline uint32_t k3_tok_pair_rank(const struct k3_tok *t, uint32_t a, uint32_t b)
{
    uint64_t key = (uint64_t)a << 20 | b;
    uint32_t i = (uint32_t)(k3_tok_mix(key * 0x9E3779B97F4A7C15ull)) & t->pair_mask;
    for (;;) {
        uint64_t e = t->pairs[i];
        if (e >> 20 == key) return (uint32_t)e & 0xFFFFF;
        if (e == UINT64_MAX) return K3_TOK_NONE;
        i = (i + 1) & t->pair_mask;
    }
}

/* A per-encode cache of piece -> ids for pieces of 3..16 bytes with at most 3 ids (nearly
 * every piece of ordinary text: words repeat). It holds whole-token hits too, because a
 * hit here touches one line of a table sized to stay in L2, where the vocabulary hash and
 * the pair table do not fit. Direct-mapped, keyed by the piece's two zero-padded words and
 * its length, which determine a piece of up to 16 bytes exactly. Each encode call (each
 * worker) has its own, so a request's latency never depends on earlier requests. */
#define K3_PIECE_CACHE_BYTES 16
#define K3_PIECE_CACHE_IDS 3
struct k3_piece_cache_entry {
    uint64_t w0, w1;
    uint16_t len;      /* 0 = empty */
    uint16_t n_ids;
    int32_t ids[K3_PIECE_CACHE_IDS];
};

/* Pair lookups of the merges go through a small direct-mapped copy of the pair table's hot
 * part (a << 40 | b << 20 | rank, rank 0xFFFFF = no token; UINT64_MAX = empty): the full
 * table is megabytes, but the pairs that text keeps merging (the bytes of common CJK
 * characters, say) are few. */
#ifndef K3_PAIR_CACHE_ENTRIES
#define K3_PAIR_CACHE_ENTRIES 8192
#endif
/* Longer pieces (17..48 bytes: CJK phrases, long words) in a second, smaller table that
 * keeps the bytes for an exact compare. */
#define K3_LONG_CACHE_BYTES 48
#define K3_LONG_CACHE_IDS 14
#define K3_LONG_CACHE_ENTRIES 2048
struct k3_long_cache_entry {
    uint16_t len;      /* 0 = empty */
    uint16_t n_ids;
    int32_t ids[K3_LONG_CACHE_IDS];
    uint8_t key[K3_LONG_CACHE_BYTES];
};

struct k3_bpe_cache {
    struct k3_piece_cache_entry *e;
    struct k3_piece_cache_entry *segs; /* the same, for segments' merges (bpe_chars) */
    uint32_t mask;
    struct k3_long_cache_entry *longs; /* [K3_LONG_CACHE_ENTRIES] */
    uint64_t *pairs;   /* [K3_PAIR_CACHE_ENTRIES] */
    /* Which entries hold something: bits for e, then segs, then longs. The tables themselves
     * are never cleared (a call would otherwise write them all, hundreds of KiB through the
     * caches, before its first piece); an entry is read only when its bit is set. */
    uint64_t *valid;
};

static inline int k3_cache_valid(const uint64_t *v, uint32_t i) { return (int)(v[i >> 6] >> (i & 63) & 1); }
static inline void k3_cache_set_valid(uint64_t *v, uint32_t i) { v[i >> 6] |= 1ull << (i & 63); }

static inline uint32_t k3_tok_pair_rank_cached(const struct k3_tok *t, struct k3_bpe_cache *c,
                                               uint32_t a, uint32_t b)
{
    if (!c) return k3_tok_pair_rank(t, a, b);
    uint64_t key = (uint64_t)a << 20 | b;
    uint64_t *e = &c->pairs[(uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 51) & (K3_PAIR_CACHE_ENTRIES - 1)];
    if (*e >> 20 == key) {
        uint32_t r = (uint32_t)*e & 0xFFFFF;
        return r == 0xFFFFF ? K3_TOK_NONE : r;
    }
    uint32_t r = k3_tok_pair_rank(t, a, b);
    *e = key << 20 | (r == K3_TOK_NONE ? 0xFFFFF : r);
    return r;
}

/* Prefetch hints (a GCC/Clang builtin on every target; a no-op elsewhere): BPE of a piece
 * looks up many independent pairs, each a likely cache miss in the big tables; touching
 * them all first lets the misses overlap instead of running one after another. */
#if defined(__GNUC__) || defined(__clang__)
#define K3_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define K3_PREFETCH(p) ((void)(p))
#endif

static inline void k3_tok_pair_prefetch(const struct k3_tok *t, const struct k3_bpe_cache *c,
                                        uint32_t a, uint32_t b)
{
    uint64_t key = (uint64_t)a << 20 | b;
    K3_PREFETCH(&t->pairs[(uint32_t)(k3_tok_mix(key * 0x9E3779B97F4A7C15ull)) & t->pair_mask]);
    if (c)
        K3_PREFETCH(&c->pairs[(uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 51) &
                              (K3_PAIR_CACHE_ENTRIES - 1)]);
}

/* pretok.c: end of the pre-tokenizer piece that starts at s[p], in the text s[0..n). */
size_t k3_pretok_next(const uint8_t *s, size_t p, size_t n);
/* The ends of up to max pieces from s[p] (fewer only at n); returns their count. */
size_t k3_pretok_batch(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max);

/* bpe.c: appends the ids of one piece; out must have room for n + 4 ids. Returns the count.
 * avail: bytes readable at s (>= n; lets short loads read past the piece). cache may be NULL. */
size_t k3_bpe_piece(const struct k3_tok *t, const uint8_t *s, size_t n, size_t avail,
                    struct k3_bpe_cache *cache, int32_t *out);
/* The ids of the consecutive pieces s[p..ends[0]), s[ends[0]..ends[1]), ... (m of them), end
 * the end of the readable buffer; out has room for ends[m - 1] - p + 4 ids. Returns the count. */
size_t k3_bpe_pieces(const struct k3_tok *t, const uint8_t *s, size_t p, const size_t *ends,
                     size_t m, const uint8_t *end, struct k3_bpe_cache *cache, int32_t *out);
void k3_bpe_cache_init(struct k3_bpe_cache *c, size_t text_bytes);
void k3_bpe_cache_free(struct k3_bpe_cache *c);
/* (token + 1) << 32 | highest merged rank of one character's bytes alone (see char_info). */
uint64_t k3_bpe_char_info(const struct k3_tok *t, const uint8_t *s, size_t n);
/* The plain O(n^2) merge, kept as the reference the fast paths are tested against. */
size_t k3_bpe_piece_ref(const struct k3_tok *t, const uint8_t *s, size_t n, int32_t *out);

#endif
