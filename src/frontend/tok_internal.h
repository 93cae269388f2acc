/* tok_internal.h - the tokenizer's data, shared by vocab.c, pretok.c, bpe.c, tokenizer.c.
 *
 * The vocabulary is held three ways:
 *   - id -> bytes: one byte arena with offsets (decode, and the specials' names);
 *   - bytes -> rank: an open-addressing hash (the whole-piece lookup tiktoken starts with);
 *   - (rank a, rank b) -> rank of bytes(a)+bytes(b), for each token the one pair that BPE
 *     merges into it (vocab.c, build_pairs, has the argument that the other splits of a token
 *     are never merged and may answer "no token"). BPE merges look pairs up by two integers
 *     instead of hashing byte strings (tiktoken's approach): the parts of a piece during BPE
 *     are always tokens. Pairs of single bytes also have a
 *     direct 256 x 256 table (the first round of every merge, L2-resident). */
#ifndef K3_FRONTEND_TOK_INTERNAL_H
#define K3_FRONTEND_TOK_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "frontend/tokenizer.h"

#define K3_TOK_NONE 0xFFFFFFFFu  /* "no such rank" in the tables */

/* The 64-byte builds of the encoder's byte scans, AVX2 (tok_avx2.c) and AVX-512BW
 * (tok_avx512.c), are compiled on x86-64 by GCC and Clang, and used where the CPU has them
 * (k3_tok_simd); NEON's (tok_neon.c) on aarch64, where every CPU has it. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(K3_TOK_NO_SIMD)
#define K3_TOK_HAVE_X86_SIMD 1
#else
#define K3_TOK_HAVE_X86_SIMD 0
#endif
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(K3_TOK_NO_SIMD)
#define K3_TOK_HAVE_NEON64 1
#else
#define K3_TOK_HAVE_NEON64 0
#endif

/* The builds of the encoder's byte scans, in the order a CPU gains them. */
#if K3_TOK_HAVE_NEON64
enum k3_tok_simd { K3_TOK_SIMD_BASE, K3_TOK_SIMD_NEON };
#else
enum k3_tok_simd { K3_TOK_SIMD_BASE, K3_TOK_SIMD_AVX2, K3_TOK_SIMD_AVX512 };
#endif

/* Whole-token lookup slot: the first 24 bytes inline, so a hit on a token of up to 24 bytes
 * touches one cache line; only longer tokens compare the rest in the byte arena (whose
 * offset and bytes were two more cache misses, one after the other, for every hit on a
 * piece of 9..24 bytes when the slot held 8). */
#define K3_TOK_SLOT_BYTES 24
struct k3_tok_slot {
    uint64_t w[3];     /* the first min(len, 24) bytes, little-endian words, zero-padded */
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
    enum k3_tok_simd simd;       /* the build of the encoder's whole-text passes and windows
                                  * (k3_tok_simd: the best the CPU has, or K3_TOK_SIMD's) */
    struct k3_tok_memos *memos;  /* the memos kept from call to call (tokenizer.c) */
    /* The pieces memos' seeds (bpe.c, k3_memo_seeds_build): every token of 1..7 bytes
     * (seeds8: records of 2 words) and of 8..16 (seeds16: 4 words), its memo hash with its rank
     * in the low 18 bits and the words of its memo entry, in hash order, so that a table of any
     * size takes them set by set; NULL when the ranks do not fit the memos' ids. */
    uint64_t *seeds8, *seeds16;
    uint32_t n_seeds8, n_seeds16;
    struct k3_tok_chunks *chunks; /* the ids of chunks of text seen again (tok_chunks.c) */

    void *tables;                /* the allocation that holds the small tables below (vocab.c) */
    struct k3_tok_slot *pieces;  /* bytes -> rank */
    uint32_t piece_mask;
    uint64_t *piece_filter;      /* 2^20 bits, one per hash value's low 20 bits: a clear bit
                                  * answers "not a token" from L2, without the big table */

    uint64_t *pairs;             /* a << 40 | b << 20 | rank(a+b); UINT64_MAX = empty; 2 MiB */
    uint32_t pair_mask;
    uint64_t *pair_filter;       /* [K3_PAIR_FILTER_WORDS]: blocked Bloom filter of the pairs
                                  * (k3_tok_pair_rank): most pairs looked up are not tokens, and
                                  * this answers them from L2 instead of the megabytes of pairs */
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
    /* Of those pairs, the ones a whole-character token of a low rank holds adjacent: the
     * lowest rank of such a token, kept only when it is at most the larger C(X) of the two
     * (bpe_chars.c: otherwise it cannot keep either from starting whole). About 300 pairs,
     * x << 41 | y << 20 | rank, open addressing, UINT64_MAX = empty. */
    uint64_t *bigram_rank;
    uint32_t bigram_rank_mask;
    uint64_t *bigram_chars;      /* [1024]: a bit per BMP code point in a bigram_rank pair; the
                                  * pairs of other characters are not looked up */
    /* ASCII pieces (bpe.c, k3_bpe_ascii): for each pair of ASCII bytes x y, the lowest rank
     * of a token that holds them adjacent (K3_TOK_NONE: none does). [128 * 128], x << 7 | y. */
    uint32_t *ascii_span;

    /* Specials by name: all start with '<' or '[' and end at the first '>' or ']'
     * (checked at load), so a candidate is found by one hash probe. */
    uint64_t *spec_slots;        /* (hash32 << 32) | (id - n_ranks + 1); 0 = empty */
    uint32_t spec_mask;
    int max_special_bytes;
};

/* 128 KiB: the ~57,000 pairs set about 11% of its bits (false positives ~1%, which only
 * keep a boundary), and it stays in L2 next to the other tables, where 512 KiB did not. */
#define K3_BIGRAM_LOG2 14
#define K3_BIGRAM_WORDS (1u << K3_BIGRAM_LOG2)

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

/* The vocabulary filter's bit for a piece of hash h (k3_piece_hash): its low 20 bits. */
static inline uint32_t k3_tok_piece_filter_bit(uint64_t h) { return (uint32_t)h & 0xFFFFF; }

/* Slot e holds the piece s[0..n) (avail bytes readable at s), whose first word, length and
 * tag it matches. */
static inline int k3_tok_slot_rest(const struct k3_tok *t, const struct k3_tok_slot *e,
                                   const uint8_t *s, size_t n, size_t avail)
{
    for (size_t k = 8; k < n && k < K3_TOK_SLOT_BYTES; k += 8)
        if (e->w[k / 8] != k3_tok_word(s + k, n - k, avail - k)) return 0;
    return n <= K3_TOK_SLOT_BYTES ||
           !memcmp(t->bytes + t->off[e->rank1 - 1] + K3_TOK_SLOT_BYTES, s + K3_TOK_SLOT_BYTES,
                   n - K3_TOK_SLOT_BYTES);
}

/* The hash the lookups of the piece s[0..n) use (first word w0, avail bytes readable at s):
 * k3_piece_hash, or 0 for a piece longer than any token (no whole-token lookup; the
 * long-piece table's set 0). */
static inline uint64_t k3_tok_piece_hash(const struct k3_tok *t, uint64_t w0, const uint8_t *s, size_t n,
                                         size_t avail)
{
    return n <= (size_t)t->max_token_bytes ? k3_piece_hash(w0, s, n, avail) : 0;
}

/* Rank of the piece s[0..n) (avail >= n bytes readable at s; first word w0, hash h) or
 * K3_TOK_NONE. */
static inline uint32_t k3_tok_piece_rank_h(const struct k3_tok *t, const uint8_t *s, size_t n,
                                           size_t avail, uint64_t w0, uint64_t h)
{
    uint32_t bit = k3_tok_piece_filter_bit(h);
    if (!(t->piece_filter[bit >> 6] >> (bit & 63) & 1)) return K3_TOK_NONE;
    uint32_t i = (uint32_t)(h >> 32) & t->piece_mask;
    uint16_t tag = (uint16_t)h;
    for (;;) {
        const struct k3_tok_slot *e = &t->pieces[i];
        if (!e->rank1) return K3_TOK_NONE;
        if (e->w[0] == w0 && e->len == n && e->tag == tag && (n <= 8 || k3_tok_slot_rest(t, e, s, n, avail)))
            return e->rank1 - 1;
        i = (i + 1) & t->piece_mask;
    }
}

/* Rank of the byte string s[0..n) or K3_TOK_NONE. */
static inline uint32_t k3_tok_piece_rank(const struct k3_tok *t, const uint8_t *s, size_t n)
{
    if (n > (size_t)t->max_token_bytes) return K3_TOK_NONE;
    uint64_t w0 = k3_tok_word(s, n, n);
    return k3_tok_piece_rank_h(t, s, n, n, w0, k3_piece_hash(w0, s, n, n));
}

/* Hash of the characters x y for the bigram filter: one multiply, whose top bits pick the
 * filter's word (the top K3_BIGRAM_LOG2) and its two bits (the 12 bits below). */
static inline uint64_t k3_tok_bigram_hash(uint32_t x, uint32_t y)
{
    return ((uint64_t)x << 21 | y) * 0x9E3779B97F4A7C15ull;
}

static inline uint32_t k3_tok_bigram_word(uint64_t h) { return (uint32_t)(h >> (64 - K3_BIGRAM_LOG2)); }
static inline uint64_t k3_tok_bigram_bits(uint64_t h)
{
    return 1ull << (h >> (58 - K3_BIGRAM_LOG2) & 63) | 1ull << (h >> (52 - K3_BIGRAM_LOG2) & 63);
}

/* 0: no token has the characters x y adjacent and whole; 1: some token may. */
static inline int k3_tok_bigram_maybe(const struct k3_tok *t, uint32_t x, uint32_t y)
{
    uint64_t h = k3_tok_bigram_hash(x, y), bits = k3_tok_bigram_bits(h);
    return (t->bigram_filter[k3_tok_bigram_word(h)] & bits) == bits;
}

/* 128 KiB: the 163,328 pairs set 3 bits each in one word, 37% of the bits (false positives
 * about 5%; they only cost the table probe). */
#define K3_PAIR_FILTER_LOG2 14
#define K3_PAIR_FILTER_WORDS (1u << K3_PAIR_FILTER_LOG2)

/* Hash of the pair of ranks (a, b): one multiply (the merges' lookups are a chain of
 * dependent steps). Only its high bits are used, which depend on all of a and b: the top
 * bits pick the filter word, bits 26..43 the filter's three bits, bits 32.. the table slot. */
static inline uint64_t k3_tok_pair_hash(uint32_t a, uint32_t b)
{
    return ((uint64_t)a << 20 | b) * 0x9E3779B97F4A7C15ull;
}

static inline uint64_t k3_tok_pair_filter_bits(uint64_t hm)
{
    return 1ull << (hm >> 26 & 63) | 1ull << (hm >> 32 & 63) | 1ull << (hm >> 38 & 63);
}

static inline uint32_t k3_tok_pair_word(uint64_t hm) { return (uint32_t)(hm >> (64 - K3_PAIR_FILTER_LOG2)); }
static inline uint32_t k3_tok_pair_slot(const struct k3_tok *t, uint64_t hm) { return (uint32_t)(hm >> 32) & t->pair_mask; }

/* The bigram_rank entry of the characters x y, or K3_TOK_NONE. */
/* The rank stored with key in an open-addressing table of key << 20 | rank entries (UINT64_MAX
 * empty; pairs, bigram_rank), probing from slot i, or K3_TOK_NONE. */
static inline uint32_t k3_tok_probe(const uint64_t *tab, uint32_t mask, uint32_t i, uint64_t key)
{
    for (;;) {
        uint64_t e = tab[i];
        if (e >> 20 == key) return (uint32_t)e & 0xFFFFF;
        if (e == UINT64_MAX) return K3_TOK_NONE;
        i = (i + 1) & mask;
    }
}

static inline int k3_tok_bigram_char(const struct k3_tok *t, uint32_t x)
{
    return x >= 65536 || (t->bigram_chars[x >> 6] >> (x & 63) & 1);
}

static inline uint32_t k3_tok_bigram_rank(const struct k3_tok *t, uint32_t x, uint32_t y)
{
    if (!k3_tok_bigram_char(t, x) || !k3_tok_bigram_char(t, y)) return K3_TOK_NONE;
    uint64_t key = (uint64_t)x << 21 | y;
    uint32_t i = (uint32_t)k3_tok_mix(key * 0x9E3779B97F4A7C15ull) & t->bigram_rank_mask;
    return k3_tok_probe(t->bigram_rank, t->bigram_rank_mask, i, key);
}

static inline uint32_t k3_tok_pair_rank(const struct k3_tok *t, uint32_t a, uint32_t b)
{
    uint64_t hm = k3_tok_pair_hash(a, b), bits = k3_tok_pair_filter_bits(hm);
    if ((t->pair_filter[k3_tok_pair_word(hm)] & bits) != bits) return K3_TOK_NONE;
    return k3_tok_probe(t->pairs, t->pair_mask, k3_tok_pair_slot(t, hm), (uint64_t)a << 20 | b);
}

/* Memos of piece -> ids (bpe.c): nearly every piece of ordinary text repeats (words), and a
 * hit costs one or two cache lines of a table sized for the text, where the vocabulary hash
 * and the pair table are megabytes. Each encode call (each worker) holds one for itself:
 * one the tokenizer keeps between calls (struct k3_tok_memos below), or its own.
 *
 * Two set-associative tables, 4 ways per set, keyed by the piece's zero-padded words and
 * its length (which determine a piece of up to 16 bytes exactly):
 *   m8:  pieces of 1..7 bytes with 1 or 2 ids, 16-byte entries {k0, k1}, a set is one
 *        64-byte line; k0 = w0 | len << 56 | n_ids << 62, k1 = id0 | id1 << 32, so that a
 *        hit is one compare and one 8-byte store of the ids (bpe_memo.h, k3_bpe_pieces). A
 *        piece of up to 7 bytes with more ids has an entry flagged M8_IN_M16 here and its
 *        ids in m16;
 *   m16: pieces of 8..16 bytes (and those), 32-byte entries {w0, w1, v0, v1}, a set is two
 *        lines (half as many sets as m8: see memo_init);
 *        v0 = len | n_ids << 5 | id0 << 8 | id1 << 26 | id2 << 44, v1 = id3 | id4 << 18 |
 *        id5 << 36 (up to 6 ids).
 * Ids are 18 bits (k3_bpe_cache_init turns the memos off for a larger vocabulary). An entry
 * of zeros is empty (length 0 matches no piece). A new entry goes to way 0 and shifts the
 * set; a hit in a later way swaps with the way before it, so hot pieces stay. The pieces
 * memo starts with seeds (bit 63 of k1, bit 62 of v0: bpe_memo.h, M8_SEED), the segments memo
 * empty. */
#define K3_MEMO_WAYS 4
#define K3_MEMO_ID_BITS 18
#define K3_MEMO_BYTES 16 /* longest piece a memo holds */
/* The pieces memo is made with the tokens of the lowest ranks (bpe.c, memo_seed): this many
 * ranks per way of its m8 table; on the host 1, 2 and 4 were within 1.5% of each other, 4 the
 * quickest (README, run 126; a build may set another, to measure it). */
#ifndef K3_MEMO_SEED_FACTOR
#define K3_MEMO_SEED_FACTOR 4
#endif
/* The seeded pieces memo has 2^K3_MEMO_SEEDED_MORE8 times the m8 sets and 2^..._MORE16 times
 * the m16 sets of a text's own memo (bpe_memo.h, memo_init): on the host 4x and 2x took a
 * further 2% off long_1m and 10% off prose (README, run 127). */
#ifndef K3_MEMO_SEEDED_MORE8
#define K3_MEMO_SEEDED_MORE8 2
#endif
#ifndef K3_MEMO_SEEDED_MORE16
#define K3_MEMO_SEEDED_MORE16 1
#endif
/* The m8 table of a memo for text_bytes has 1 << k3_memo_sets_log2(text_bytes) sets: about one
 * entry per 64 bytes of text, 16 .. 16,384 sets (bpe_memo.h, memo_init). */
#define K3_MEMO_SETS_LOG2_MIN 4
#define K3_MEMO_SETS_LOG2_MAX 14
static inline int k3_memo_sets_log2(size_t text_bytes)
{
    int l = K3_MEMO_SETS_LOG2_MIN;
    while (l < K3_MEMO_SETS_LOG2_MAX && ((size_t)1 << l) * K3_MEMO_WAYS * 64 < text_bytes) l++;
    return l;
}
/* The most text a memo of 1 << l sets is made for (k3_memo_sets_log2 of it is l). */
static inline size_t k3_memo_text_bytes(int l) { return ((size_t)1 << l) * K3_MEMO_WAYS * 64; }

struct k3_memo {
    uint64_t *m8;      /* [sets8 * 4 * 2] */
    uint64_t *m16;     /* [sets16 * 4 * 4], sets16 = sets8 / 2 (at least 16), or more once grown */
    int shift8, shift16; /* a hash's set: its top log2(sets) bits */
    int shift8_made, shift16_made; /* shift8, shift16 as memo_init made them */
    uint32_t evicted8, evicted16; /* entries pushed out of a full set since the last growth check */
};

/* Longer pieces (17..48 bytes: CJK phrases, long words) in a third table that keeps the
 * bytes for an exact compare: 2 ways of 128 bytes (the key in the first line), and a tag
 * per way in a small array of its own (24 hash bits and the length; 0 = empty): a lookup
 * reads an entry only when its tag matches, so a first occurrence costs no entry line. */
#define K3_LONG_CACHE_BYTES 48
#define K3_LONG_CACHE_IDS 14
/* A piece's set of two ways in the long-piece table of mask + 1 sets (h: its k3_tok_piece_hash) */
static inline size_t k3_long_set(uint64_t h, uint32_t mask) { return (size_t)((uint32_t)(h >> 20) & mask) * 2; }
struct k3_long_cache_entry {
    uint8_t key[K3_LONG_CACHE_BYTES]; /* its length is in the way's tag */
    uint32_t n_ids;
    int32_t ids[K3_LONG_CACHE_IDS];
    uint8_t pad[128 - K3_LONG_CACHE_BYTES - 4 - 4 * K3_LONG_CACHE_IDS];
};

struct k3_bpe_cache {
    struct k3_memo pieces;  /* whole pieces (after the whole-token lookup) */
    struct k3_memo segs;    /* segments' merges (bpe_chars), never the whole-token shortcut */
    int on;                 /* 0: the vocabulary's ids do not fit the memos */
    struct k3_long_cache_entry *longs; /* [(long_mask + 1) * 2] */
    uint32_t *long_tags;    /* [(long_mask + 1) * 2] */
    uint32_t long_mask;
    uint32_t long_mask_made; /* long_mask as made (k3_bpe_cache_clear returns to it) */
    uint32_t long_evicted;  /* long-piece entries replaced since the last growth check */
    uint8_t over8, over16, over_long; /* the last call overflowed m8, m16, the long-piece table */
};

/* The memos the tokenizer keeps from call to call (tokenizer.c, memo_take):
 * K3_TOK_MEMOS_PER_SIZE of each size, the smallest first. */
#define K3_TOK_MEMO_SIZES (K3_MEMO_SETS_LOG2_MAX - K3_MEMO_SETS_LOG2_MIN + 1) /* one per memo_init size */
#define K3_TOK_MEMOS_PER_SIZE 32
#define K3_TOK_MEMOS (K3_TOK_MEMO_SIZES * K3_TOK_MEMOS_PER_SIZE)
struct k3_tok_memos {
    atomic_int busy[K3_TOK_MEMOS]; /* 1 while a call or a worker holds it */
    int made[K3_TOK_MEMOS];        /* its tables are allocated (written by its holder) */
    int used[K3_TOK_MEMOS];        /* taken since it was made or last emptied: k3_tok_forget
                                    * empties only these (written by its holder) */
    struct k3_bpe_cache cache[K3_TOK_MEMOS];
    atomic_size_t grown;           /* bytes the kept memos' tables have grown by, all together */
    size_t grow_budget;            /* the most they may grow by (K3_TOK_MEMO_GROW_BUDGET) */
};
#define K3_TOK_MEMO_GROW_BUDGET ((size_t)256 << 20)

/* tok_chunks.c: the ids of chunks of text that came again, kept from call to call, within
 * budget bytes (least recently used out first). get appends a kept chunk's ids to out and
 * returns 1, or returns 0; put records a chunk's ids after encoding it (kept only when it was
 * seen before: the first time leaves its hash). h: k3_tok_chunk_hash of the chunk. */
#define K3_TOK_CHUNK_BUDGET ((size_t)256 << 20)
struct k3_tok_chunks;
struct k3_tok_chunks *k3_tok_chunks_new(size_t budget);
void k3_tok_chunks_free(struct k3_tok_chunks *c);
void k3_tok_chunks_clear(struct k3_tok_chunks *c);
void k3_tok_chunks_budget(struct k3_tok_chunks *c, size_t budget);
void k3_tok_chunks_stats(struct k3_tok_chunks *c, size_t *hits, size_t *misses, size_t *kept);
uint64_t k3_tok_chunk_hash(const struct k3_tok_chunks *c, const uint8_t *s, size_t n);
int k3_tok_chunks_get(struct k3_tok_chunks *c, const uint8_t *s, size_t n, uint64_t h,
                      struct k3_tok_ids *out);
void k3_tok_chunks_put(struct k3_tok_chunks *c, const uint8_t *s, size_t n, uint64_t h,
                       const int32_t *ids, size_t n_ids);
/* vocab.c: a table probed at random, bytes of it set to fill (fill < 0: left as they come):
 * on 2 MiB pages from 1 MiB, else starting a 128-byte line pair; free() releases it. NULL
 * when out of memory. */
void *k3_tok_table_alloc(size_t bytes, int fill);
/* tokenizer.c: room for more ids after out->n. */
void k3_tok_ids_reserve(struct k3_tok_ids *out, size_t more);

/* Prefetch hints (an asm prefetch on x86-64 and aarch64, the GCC/Clang builtin on other
 * targets, a no-op elsewhere): BPE of a piece looks up many independent pairs, each a likely
 * cache miss in the big tables; touching them all first lets the misses overlap instead of
 * running one after another. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
/* An asm statement, not __builtin_prefetch: GCC 12 deletes a loop whose only effect is that
 * builtin (every prefetch loop of bpe.c was missing from the binary). */
#define K3_PREFETCH(p) __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)(p)))
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
#define K3_PREFETCH(p) __asm__ volatile("prfm pldl1keep, %0" : : "Q"(*(const char *)(p)))
#elif defined(__GNUC__) || defined(__clang__)
#define K3_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define K3_PREFETCH(p) ((void)(p))
#endif

/* Pair lookups of the merges go straight to the pair filter and table (k3_tok_pair_rank): the
 * filter, in L2, answers most of them, those that find no token. (A per-call copy of the pairs
 * looked up, up to 1 MiB, cost more in cache misses than it saved.) This touches both early. */
static inline void k3_tok_pair_prefetch(const struct k3_tok *t, uint32_t a, uint32_t b)
{
    uint64_t hm = k3_tok_pair_hash(a, b);
    K3_PREFETCH(&t->pair_filter[k3_tok_pair_word(hm)]);
    K3_PREFETCH(&t->pairs[k3_tok_pair_slot(t, hm)]);
}

/* The whole-token lookup of a piece of hash h (k3_tok_piece_rank_h): its filter word and first
 * slot, touched early. */
static inline void k3_tok_piece_prefetch(const struct k3_tok *t, uint64_t h)
{
    uint32_t bit = k3_tok_piece_filter_bit(h);
    K3_PREFETCH(&t->piece_filter[bit >> 6]);
    K3_PREFETCH(&t->pieces[(uint32_t)(h >> 32) & t->piece_mask]);
}

/* pretok.c: end of the pre-tokenizer piece that starts at s[p], in the text s[0..n). */
size_t k3_pretok_next(const uint8_t *s, size_t p, size_t n);
/* The ends of up to max pieces from s[p] (fewer only at n); returns their count. Builds of
 * one scanner (pretok_fast.h), the same ends: 16-byte SIMD blocks (SSE2, NEON) or the
 * portable loops, and 64-byte windows with AVX2 (tok_avx2.c), AVX-512BW (tok_avx512.c) or
 * NEON (tok_neon.c), each only where k3_tok_simd allows it. */
size_t k3_pretok_batch_base(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max);
size_t k3_pretok_batch_avx2(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max);
size_t k3_pretok_batch_avx512(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max);
size_t k3_pretok_batch_neon(const uint8_t *s, size_t p, size_t n, size_t *ends, size_t max);
/* tok_avx2.c, tok_avx512.c, tok_neon.c: k3_utf8_valid_prefix, and the wrapper's run bound
 * (tok_runs.h), 64 bytes at a time. */
size_t k3_utf8_valid_prefix_avx2(const uint8_t *s, size_t n);
size_t k3_utf8_valid_prefix_avx512(const uint8_t *s, size_t n);
size_t k3_utf8_valid_prefix_neon(const uint8_t *s, size_t n);
int k3_runs_bounded_avx2(const uint8_t *s, size_t n, size_t *cuts, size_t *n_cuts);
int k3_runs_bounded_avx512(const uint8_t *s, size_t n, size_t *cuts, size_t *n_cuts);
int k3_runs_bounded_neon(const uint8_t *s, size_t n, size_t *cuts, size_t *n_cuts);
/* vocab.c: the best build this CPU runs, or a lower one that the environment's K3_TOK_SIMD
 * names ("base": the 16-byte build; "avx2"), for comparisons and tests. */
enum k3_tok_simd k3_tok_simd(void);
static inline size_t k3_pretok_batch(const struct k3_tok *t, const uint8_t *s, size_t p, size_t n,
                                     size_t *ends, size_t max)
{
#if K3_TOK_HAVE_X86_SIMD
    if (t->simd == K3_TOK_SIMD_AVX512) return k3_pretok_batch_avx512(s, p, n, ends, max);
    if (t->simd == K3_TOK_SIMD_AVX2) return k3_pretok_batch_avx2(s, p, n, ends, max);
#elif K3_TOK_HAVE_NEON64
    if (t->simd == K3_TOK_SIMD_NEON) return k3_pretok_batch_neon(s, p, n, ends, max);
#endif
    return k3_pretok_batch_base(s, p, n, ends, max);
}

/* bpe.c: appends the ids of one piece; out must have room for n + 4 ids. Returns the count.
 * avail: bytes readable at s (>= n; lets short loads read past the piece). cache may be NULL. */
size_t k3_bpe_piece(const struct k3_tok *t, const uint8_t *s, size_t n, size_t avail,
                    struct k3_bpe_cache *cache, int32_t *out);
/* The ids of the consecutive pieces s[p..ends[0]), s[ends[0]..ends[1]), ... (m of them), end
 * the end of the readable buffer; out has room for ends[m - 1] - p + 4 ids. Returns the count. */
size_t k3_bpe_pieces(const struct k3_tok *t, const uint8_t *s, size_t p, const size_t *ends,
                     size_t m, const uint8_t *end, struct k3_bpe_cache *cache, int32_t *out);
/* The memos' seeds of t (t->seeds8, t->seeds16), at load; none when the ranks do not fit the
 * memos' ids (they are off then). 0, or -1 when memory runs out. */
int k3_memo_seeds_build(struct k3_tok *t);
/* A cache for a text of text_bytes, its pieces memo seeded (bpe.c, memo_seed). */
void k3_bpe_cache_init(const struct k3_tok *t, struct k3_bpe_cache *c, size_t text_bytes);
void k3_bpe_cache_free(struct k3_bpe_cache *c);
/* Empties a cache's memos and long-piece table, back to the sizes they were made with, and
 * seeds the pieces memo again (t NULL: left empty, as tok_first times first occurrences). */
void k3_bpe_cache_clear(const struct k3_tok *t, struct k3_bpe_cache *c);
/* After a call on a kept cache (tokenizer.c, memo_give): each of its piece tables (the
 * pieces memo's m8 and m16, the long-piece table) that the call overflowed, as the call before
 * did, doubles, keeping what it holds, up to K3_MEMO_GROW_MAX doublings; the eviction counts
 * start again. Overflowed: the call pushed out more than one entry for every 8 the table
 * holds (m8: every 32; its short pieces repeat most, and a full set pushes out ones that
 * come again). Two calls in a row: one large text alone does not make the memo larger for
 * the texts after it. */
#define K3_MEMO_GROW_MAX 2
/* room: the most bytes the tables may grow by; returns the bytes they grew by. */
size_t k3_bpe_cache_grow(const struct k3_tok *t, struct k3_bpe_cache *c, size_t room);
/* The bytes a cache's tables hold beyond the sizes they were made with. */
size_t k3_bpe_cache_grown_bytes(const struct k3_bpe_cache *c);
/* tokenizer.c: the tokenizer's kept memos, made at load and freed with it. */
struct k3_tok_memos *k3_tok_memos_new(void);
void k3_tok_memos_free(struct k3_tok_memos *m);
/* (token + 1) << 32 | highest merged rank of one character's bytes alone (see char_info). */
uint64_t k3_bpe_char_info(const struct k3_tok *t, const uint8_t *s, size_t n);
/* The merges inside bpe.c and bpe_chars.c: parts tok[0..m) (m <= K3_MERGE_LINEAR_MAX, the
 * arrays have room for K3_BPE_SHORT) with adjacent pair ranks rk[0..m-1) by linear scans;
 * any number of parts by a heap; a piece from its single bytes; a multi-byte piece
 * characters first (bpe_chars.c; valid: the piece is valid UTF-8, as the encoder's text is). */
#define K3_BPE_SHORT 128        /* longest piece merged in stack arrays; bpe_long above */
#define K3_MERGE_LINEAR_MAX 40  /* most parts for the linear-scan merge; the heap above */
size_t k3_bpe_merge_linear(const struct k3_tok *t, uint32_t *tok, uint32_t *rk, size_t m, int32_t *out);
size_t k3_bpe_merge_heap(const struct k3_tok *t, const uint32_t *tok0, size_t n, int32_t *out);
size_t k3_bpe_bytes(const struct k3_tok *t, const uint8_t *s, size_t n, int32_t *out); /* any n; out: room for n */
/* A piece's whole-token lookup, made later (k3_bpe_ascii, k3_bpe_chars): its first word, its
 * hash (k3_piece_hash) and the bytes readable at it. */
struct k3_piece_key {
    uint64_t w0, h;
    size_t avail;
};
/* The whole-token lookup of the piece s[0..n) (whole: its key, or NULL when it is longer than
 * any token): 1 with the token in out[0], or 0. */
static inline size_t k3_bpe_whole_token(const struct k3_tok *t, const uint8_t *s, size_t n,
                                        const struct k3_piece_key *whole, int32_t *out)
{
    uint32_t r = whole ? k3_tok_piece_rank_h(t, s, n, whole->avail, whole->w0, whole->h) : K3_TOK_NONE;
    if (r == K3_TOK_NONE) return 0;
    out[0] = (int32_t)r;
    return 1;
}
/* s all ASCII, n >= 1; whole: its key, or NULL when it is longer than any token */
size_t k3_bpe_ascii(const struct k3_tok *t, const uint8_t *s, size_t n, const struct k3_piece_key *whole,
                    int32_t *out);
size_t k3_bpe_chars(const struct k3_tok *t, struct k3_bpe_cache *c, const uint8_t *s, size_t n,
                    int valid, const struct k3_piece_key *whole, int32_t *out);
/* The plain O(n^2) merge, kept as the reference the fast paths are tested against. */
size_t k3_bpe_piece_ref(const struct k3_tok *t, const uint8_t *s, size_t n, int32_t *out);

#endif
