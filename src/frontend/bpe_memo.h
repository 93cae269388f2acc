/* bpe_memo.h - the per-encode memos of piece -> ids (struct k3_memo, tok_internal.h),
 * shared by bpe.c (whole pieces) and bpe_chars.c (segments). */
#ifndef K3_FRONTEND_BPE_MEMO_H
#define K3_FRONTEND_BPE_MEMO_H

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "frontend/tok_internal.h"

#define ID_MASK ((1ull << K3_MEMO_ID_BITS) - 1)

/* The memos' hash of a piece of up to 16 bytes (words w0, w1, length n): multiplicative, its
 * top bits pick the set (memo_set8, memo_set16); one multiply for up to 8 bytes (w1 = 0),
 * and for up to 7 it is memo_hash8 of the piece's m8 key (memo_key8). */
static inline uint64_t memo_hash8(uint64_t key) { return key * 0x9E3779B97F4A7C15ull; }

static inline uint64_t memo_hash(uint64_t w0, uint64_t w1, size_t n)
{
    return memo_hash8(w0 ^ ((uint64_t)n << 56)) ^ w1 * 0xBF58476D1CE4E5B9ull;
}

/* The m8 key of a piece of up to 7 bytes (w0 its zero-padded word): its bytes and length
 * (bits 56..58). An entry's first word is the key with the piece's id count (1 or 2) in bits
 * 62..63, or with M8_IN_M16 set when it has more ids: then its entry is in m16, and the
 * first word matches no key by the fast test of k3_bpe_pieces ((k0 ^ key) << 2 == 0). */
#define M8_IN_M16 (1ull << 59)
#define M8_GET_IN_M16 3 /* memo_get8's answer for such an entry: look in m16 */
/* A seed (memo_seed, bpe.c): an entry the memo was made with, a token of the vocabulary, not
 * a piece of the texts it has seen. Bit 63 of an m8 entry's second word (the unused second id
 * of its one id, which the fast loop of k3_bpe_pieces writes past the piece's ids, where the
 * next ones go), bit 62 of an m16 entry's third. A hit through memo_get8 or memo_get16 clears
 * the bit: from then on it is the text's. Pushing a seed out is no sign that the table is too
 * small, so memo_put does not count it (k3_bpe_cache_grow). */
#define M8_SEED (1ull << 63)
#define M16_SEED (1ull << 62)
static inline uint64_t memo_key8(uint64_t w0, size_t n) { return w0 | (uint64_t)n << 56; }

static inline uint64_t *memo_set8(const struct k3_memo *m, uint64_t h)
{
    return m->m8 + (size_t)(h >> m->shift8) * (2 * K3_MEMO_WAYS);
}

static inline uint64_t *memo_set16(const struct k3_memo *m, uint64_t h)
{
    return m->m16 + (size_t)(h >> m->shift16) * (4 * K3_MEMO_WAYS);
}

/* The second word of a piece s[0..n) of up to 16 bytes (0 up to 8 bytes), avail bytes
 * readable at s: one masked load when 16 are. */
static inline uint64_t memo_word1(const uint8_t *s, size_t n, size_t avail)
{
    if (K3_TOK_LE && avail >= 16) {
        uint64_t w;
        memcpy(&w, s + 8, 8);
        size_t k = n > 8 ? n - 8 : 0; /* bytes of the second word */
        uint64_t keep = k >= 8 ? ~0ull : (1ull << (8 * k)) - 1;
        return w & keep;
    }
    return n > 8 ? k3_tok_word(s + 8, n - 8, avail - 8) : 0;
}

/* The piece of m8 key kk in its m8 set: its id count (1 or 2, out[0..2) written),
 * M8_GET_IN_M16 when its entry is in m16, or 0 when the set does not hold it; a hit in a later
 * way swaps with the way before it, and a seed becomes the text's. */
static inline size_t memo_get8(uint64_t *set, uint64_t kk, int32_t *out)
{
    for (int k = 0; k < K3_MEMO_WAYS; k++) {
        uint64_t k0 = set[2 * k];
        if (((k0 ^ kk) & ~M8_IN_M16) << 2) continue;
        uint64_t k1 = set[2 * k + 1] & ~M8_SEED;
        if (k) { /* move up one way */
            set[2 * k] = set[2 * k - 2];
            set[2 * k + 1] = set[2 * k - 1];
            set[2 * k - 2] = k0;
            set[2 * k - 1] = k1;
        } else if (set[1] != k1) {
            set[1] = k1;
        }
        if (k0 & M8_IN_M16) return M8_GET_IN_M16;
        out[0] = (int32_t)(uint32_t)k1;
        out[1] = (int32_t)(k1 >> 32);
        return (size_t)(k0 >> 62);
    }
    return 0;
}

/* The ids of a piece (w0, w1, n) in its m16 set, or 0 when the set does not hold it; out has
 * room for 6 ids. A hit in a later way swaps with the way before it, and a seed becomes the
 * text's. */
static inline size_t memo_get16(uint64_t *set, uint64_t w0, uint64_t w1, size_t n, int32_t *out)
{
    for (int k = 0; k < K3_MEMO_WAYS; k++) {
        uint64_t *e = set + 4 * k, v0 = e[2];
        if (e[0] != w0 || e[1] != w1 || (v0 & 31) != n) continue;
        if (v0 & M16_SEED) e[2] = v0 &= ~M16_SEED;
        uint64_t v1 = e[3];
        out[0] = (int32_t)(v0 >> 8 & ID_MASK);
        out[1] = (int32_t)(v0 >> 26 & ID_MASK);
        out[2] = (int32_t)(v0 >> 44 & ID_MASK);
        out[3] = (int32_t)(v1 & ID_MASK);
        out[4] = (int32_t)(v1 >> 18 & ID_MASK);
        out[5] = (int32_t)(v1 >> 36 & ID_MASK);
        for (int q = 0; k && q < 4; q++) { /* move up one way */
            uint64_t *up = set + 4 * (k - 1), x = up[q];
            up[q] = up[q + 4];
            up[q + 4] = x;
        }
        return (size_t)(v0 >> 5 & 7);
    }
    return 0;
}

/* The ids of the piece (w0, w1, n) of hash h, or 0 when the memo does not hold it. out has
 * room for 6 ids. */
static inline size_t memo_get(struct k3_memo *m, uint64_t w0, uint64_t w1, size_t n, uint64_t h,
                              int32_t *out)
{
    if (n <= 7) {
        size_t c = memo_get8(memo_set8(m, h), memo_key8(w0, n), out);
        if (c != M8_GET_IN_M16) return c;
    }
    return memo_get16(memo_set16(m, h), w0, w1, n, out);
}

/* Remembers ids[0..k) for the piece (w0, w1, n) of hash h, when they fit: in m8 up to 7 bytes
 * and 2 ids, else in m16 up to 6 ids (with an M8_IN_M16 entry in m8 for a piece of up to 7). */
static inline void memo_put(struct k3_memo *m, uint64_t w0, uint64_t w1, size_t n, uint64_t h,
                            const int32_t *ids, size_t k)
{
    if (k > 6 || k == 0) return;
    if (n <= 7) {
        uint64_t *set = memo_set8(m, h), *last = set + 2 * (K3_MEMO_WAYS - 1);
        m->evicted8 += last[0] != 0 && !(last[1] & M8_SEED); /* the last way held a piece */
        memmove(set + 2, set, sizeof(uint64_t) * 2 * (K3_MEMO_WAYS - 1));
        set[0] = memo_key8(w0, n) | (k <= 2 ? (uint64_t)k << 62 : M8_IN_M16);
        set[1] = k <= 2 ? (uint32_t)ids[0] | (k == 2 ? (uint64_t)(uint32_t)ids[1] << 32 : 0) : 0;
        if (k <= 2) return;
    }
    uint64_t id[6] = {0};
    for (size_t i = 0; i < k; i++) id[i] = (uint64_t)ids[i];
    uint64_t *set = memo_set16(m, h), last = set[4 * (K3_MEMO_WAYS - 1) + 2];
    m->evicted16 += last != 0 && !(last & M16_SEED); /* the last way held a piece */
    memmove(set + 4, set, sizeof(uint64_t) * 4 * (K3_MEMO_WAYS - 1));
    set[0] = w0;
    set[1] = w1;
    set[2] = n | k << 5 | id[0] << 8 | id[1] << 26 | id[2] << 44;
    set[3] = id[3] | id[4] << 18 | id[5] << 36;
}

/* Sets of 64 and 128 bytes. m8: about one entry per 64 bytes of text (the text's distinct
 * pieces are far fewer), 16 .. 16384 sets, at most 1 MiB; m16 has half as many sets, 16 ..
 * 8192, at most 1 MiB: longer pieces are the fewer (long_1m: 16.6k of its 41k distinct
 * pieces of 3..16 bytes have 9..16). At half the sets its misses grew by 0.6% (+97 on
 * long_1m) and its footprint in L2 halved: long_1m ~4% faster (a quarter: +880 misses, no
 * faster). Then 2^more8 times as many m8 sets and 2^more16 times as many m16 sets: the
 * seeded pieces memo's (bpe.c, memo_seed) hold more of the vocabulary, and a text touches
 * only the lines of its pieces. Both from k3_tok_table_alloc: a set fills whole cache lines
 * (calloc's blocks start 16 bytes into a line, so a set spanned two lines, or three), and the
 * tables of 1 MiB or more lie on 2 MiB pages (dev VM, long_1m -7%, cjk -3%; they were on 4
 * KiB pages). */
static inline void memo_init(struct k3_memo *m, size_t text_bytes, int more8, int more16)
{
    size_t own = (size_t)1 << k3_memo_sets_log2(text_bytes);
    size_t sets = own << more8, sets16 = (own > 16 ? own / 2 : 16) << more16;
    m->m8 = k3_tok_table_alloc(sets * 2 * K3_MEMO_WAYS * sizeof(uint64_t), 0);
    m->m16 = k3_tok_table_alloc(sets16 * 4 * K3_MEMO_WAYS * sizeof(uint64_t), 0);
    K3_CHECK(m->m8 && m->m16, "out of memory");
    m->shift8 = m->shift8_made = 64 - __builtin_ctzll(sets);
    m->shift16 = m->shift16_made = 64 - __builtin_ctzll(sets16);
    m->evicted8 = m->evicted16 = 0;
}

/* A memo table's entry e of `words` words (m8: 2, m16: 4): its hash (m8: of its key, the first
 * word less the id count and M8_IN_M16; m16: of its words and length), and whether the way is
 * empty (m8: no key; m16: no length). */
static inline uint64_t memo_entry_hash(const uint64_t *e, size_t words)
{
    return words == 2 ? memo_hash8(e[0] & (M8_IN_M16 - 1)) : memo_hash(e[0], e[1], e[2] & 31);
}

static inline int memo_entry_empty(const uint64_t *e, size_t words) { return !e[words == 2 ? 0 : 2]; }

/* The table *tab (entries of `words` words, sets of K3_MEMO_WAYS, set = hash >> *shift) with
 * twice the sets, holding what it held: a set's entries go to the two sets its index becomes
 * with one more hash bit, in the order they were (so none is pushed out and the most recent
 * stays in way 0). Unchanged when the memory is not there. */
static inline void memo_table_double(uint64_t **tab, int *shift, size_t words)
{
    size_t sets = (size_t)1 << (64 - *shift), set_words = words * K3_MEMO_WAYS;
    uint64_t *old = *tab, *grown = k3_tok_table_alloc(sets * 2 * set_words * sizeof(uint64_t), 0);
    if (!grown) return;
    *tab = grown;
    (*shift)--;
    for (size_t i = 0; i < sets; i++)
        for (int k = K3_MEMO_WAYS - 1; k >= 0; k--) {
            const uint64_t *e = old + i * set_words + (size_t)k * words;
            if (memo_entry_empty(e, words)) continue;
            uint64_t *set = grown + (size_t)(memo_entry_hash(e, words) >> *shift) * set_words;
            memmove(set + words, set, sizeof(uint64_t) * words * (K3_MEMO_WAYS - 1));
            memcpy(set, e, words * sizeof(uint64_t));
        }
    free(old);
}

static inline void memo_free(struct k3_memo *m)
{
    free(m->m8);
    free(m->m16);
    memset(m, 0, sizeof *m);
}

#endif
