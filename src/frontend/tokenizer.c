/* tokenizer.c - the encode pipeline, decoding and the streaming detokenizer.
 *
 * Encode = what tokenization_kimi.py's encode() does, in its order:
 *   1. invalid UTF-8 becomes U+FFFD (Python's errors="replace"; the reference takes str);
 *   2. the wrapper's cuts: 400,000-code-point slices, and inside each, runs of more than
 *      25,000 consecutive str.isspace() or non-isspace code points cut every 25,000
 *      (_split_whitespaces_or_nonwhitespaces); each substring is encoded on its own;
 *   3. K3_TOK_SPECIAL: special-token text inside a substring becomes its id, the text between
 *      is encoded on its own (tiktoken encode(allowed_special="all")); K3_TOK_PLAIN: none is
 *      recognized (disallowed_special=());
 *   4. each ordinary segment: pre-tokenizer pieces (pretok.c), BPE per piece (bpe.c).
 *
 * Multi-threaded path: the same segments, long ones cut further where the pre-tokenizer
 * provably cuts, so every chunk encodes exactly as it would inside the whole:
 *   - after '\n' when the next byte is ASCII non-whitespace: a piece can hold '\n' only as
 *     its tail ([\r\n]* after punctuation, \s*[\r\n]+) or before more whitespace, never
 *     before a non-space;
 *   - before ' ' when the byte before is an ASCII letter or digit: letter and digit pieces
 *     never take a space after them (the prefix P? comes first in a piece, and a
 *     contraction starts with an apostrophe).
 * The pre-tokenizer has no lookbehind, and each chunk still ends where its segment ends or
 * at such a boundary, so the (?!\S) at its end sees what it sees in the whole text.
 * Chunks are encoded by the pool's threads (k3_pool_pull: the caller does not wait for a
 * worker that wakes after the chunks are all taken), pulling the next chunk from a counter, and
 * concatenated in order. */
#include "frontend/tok_internal.h"
#include "frontend/tok_runs.h"
#include "frontend/unicode.h"
#include "frontend/unicode_simd.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu/pool.h"

/* ---- UTF-8 ------------------------------------------------------------------------- */

int k3_utf8_check(const uint8_t *s, size_t n)
{
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    int need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else
        return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0;
        if (s[k] < lo || s[k] > hi) return -k;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

/* 16 bytes at a time (unicode_simd.h): a block is valid when it has no never-valid byte,
 * every lead's narrower second-byte range holds, and its continuation bytes are exactly
 * those its leads (and the block before's) call for. The first failing block, and the tail,
 * go byte by byte from the character start before them. */
size_t k3_utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    uint32_t carry = 0; /* continuation bytes the blocks before still need, from bit 0 */
    while (i + 17 <= n) {
        struct k3_utf8_blk b = k3_utf8_blk16(s + i);
        if (!(b.hi | carry)) {
            i += 16;
            continue;
        }
        uint32_t need = carry | (b.l2 | b.l3 | b.l4) << 1 | (b.l3 | b.l4) << 2 | b.l4 << 3;
        if (b.bad || (need & 0xFFFF) != b.cont) break;
        carry = need >> 16;
        i += 16;
    }
    if (carry) /* i is inside a character whose lead (before i, all valid) is the last non-continuation byte */
        do i--;
        while ((s[i] & 0xC0) == 0x80);
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int k = k3_utf8_check(s + i, n - i);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return n;
}

/* A copy of s with every maximal invalid subpart (and an incomplete tail) as U+FFFD. */
static uint8_t *utf8_sanitize(const uint8_t *s, size_t n, size_t valid, size_t *out_len)
{
    uint8_t *o = malloc(n * 3 + 1);
    K3_CHECK(o, "out of memory");
    memcpy(o, s, valid);
    size_t w = valid;
    for (size_t i = valid; i < n;) {
        int k = k3_utf8_check(s + i, n - i);
        if (k > 0) {
            memcpy(o + w, s + i, (size_t)k);
            w += (size_t)k;
            i += (size_t)k;
            continue;
        }
        i += k < 0 ? (size_t)-k : n - i;
        memcpy(o + w, "\xEF\xBF\xBD", 3);
        w += 3;
    }
    *out_len = w;
    return o;
}

/* ---- id vectors -------------------------------------------------------------------- */

void k3_tok_ids_reserve(struct k3_tok_ids *v, size_t more)
{
    if (v->cap - v->n >= more) return;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap - v->n < more) cap *= 2;
    int32_t *ids = realloc(v->ids, cap * sizeof *ids);
    K3_CHECK(ids, "out of memory for %zu token ids", cap);
    v->ids = ids;
    v->cap = cap;
}

void k3_tok_ids_free(struct k3_tok_ids *v)
{
    free(v->ids);
    memset(v, 0, sizeof *v);
}

/* ---- ordinary text ------------------------------------------------------------------ */

/* s[0..n) is one ordinary segment; end is the end of the readable buffer (>= s + n).
 * The scanner hands over pieces in batches (one call per batch, not per piece); it decides
 * 64-byte windows at once and a batch's end cuts a window short, so batches are long. */
#define PIECE_BATCH 256
static void encode_ordinary(const struct k3_tok *t, const uint8_t *s, size_t n, const uint8_t *end,
                            struct k3_bpe_cache *cache, struct k3_tok_ids *out)
{
    size_t p = 0, ends[PIECE_BATCH];
    while (p < n) {
        size_t m = k3_pretok_batch(t, s, p, n, ends, PIECE_BATCH);
        k3_tok_ids_reserve(out, ends[m - 1] - p + 4); /* a piece has at most one id per byte */
        out->n += k3_bpe_pieces(t, s, p, ends, m, end, cache, out->ids + out->n);
        p = ends[m - 1];
    }
}

/* ---- segments: the wrapper's cuts and the special tokens ----------------------------- */

struct seg_sink {
    void (*text)(struct seg_sink *k, size_t a, size_t b);
    void (*special)(struct seg_sink *k, int32_t id);
};

/* Special token starting at s[p] (which is '<' or '['), within s[0..n): its id or -1. */
static int32_t special_at(const struct k3_tok *t, const uint8_t *s, size_t p, size_t n)
{
    uint8_t close = s[p] == '<' ? '>' : ']';
    size_t lim = n - p < (size_t)t->max_special_bytes ? n - p : (size_t)t->max_special_bytes;
    const uint8_t *e = memchr(s + p + 1, close, lim - 1);
    if (!e) return -1;
    size_t len = (size_t)(e - (s + p)) + 1;
    uint64_t h = k3_tok_hash(s + p, len);
    uint32_t tag = (uint32_t)h, i = (uint32_t)(h >> 32) & t->spec_mask;
    for (;; i = (i + 1) & t->spec_mask) {
        uint64_t v = t->spec_slots[i];
        if (!v) return -1;
        uint32_t id = (uint32_t)v - 1 + (uint32_t)t->n_ranks;
        if ((uint32_t)(v >> 32) == tag && t->off[id + 1] - t->off[id] == len &&
            !memcmp(t->bytes + t->off[id], s + p, len))
            return (int32_t)id;
    }
}

/* One substring of the wrapper: split at special tokens when the mode allows them. */
static void substring(const struct k3_tok *t, const uint8_t *s, size_t a, size_t b,
                      enum k3_tok_mode mode, struct seg_sink *k)
{
    if (mode == K3_TOK_SPECIAL) {
        size_t start = a;
        for (size_t p = a; p < b; p++) {
            if (s[p] != '<' && s[p] != '[') continue;
            if (b - p < 3) break;
            int32_t id = special_at(t, s, p, b);
            if (id < 0) continue;
            if (p > start) k->text(k, start, p);
            k->special(k, id);
            p += t->off[id + 1] - t->off[id] - 1;
            start = p + 1;
        }
        if (start < b) k->text(k, start, b);
        return;
    }
    if (b > a) k->text(k, a, b);
}

/* isspace() of the code point at s[i] (valid UTF-8) and its length. */
static inline int py_isspace(const uint8_t *s, size_t i, int *len)
{
    static const uint8_t ascii_space[128] = {
        ['\t'] = 1, ['\n'] = 1, ['\v'] = 1, ['\f'] = 1, ['\r'] = 1, [0x1C] = 1, [0x1D] = 1,
        [0x1E] = 1, [0x1F] = 1, [' '] = 1};
    if (s[i] < 0x80) {
        *len = 1;
        return ascii_space[s[i]];
    }
    return (k3_uc_flags(k3_utf8_decode(s + i, len)) & K3_UC_PYSPACE) != 0;
}

/* 64 bytes for runs_bounded (tok_runs.h) as four 16-byte blocks. */
K3_SIMD_INLINE struct k3_cut64 cut_classify(const uint8_t *s)
{
    struct k3_cut64 r = {0, 0, 0};
    for (int k = 0; k < 4; k++) {
        struct k3_cut_blk b = k3_cut_blk16(s + 16 * k);
        r.sp |= b.sp != 0;
        r.ns |= b.ns != 0;
        r.cont |= (uint64_t)b.cont << 16 * k;
    }
    return r;
}

/* runs_bounded by the build the tokenizer chose at load. */
static int runs_bounded_by(const struct k3_tok *t, const uint8_t *s, size_t n, size_t *cuts,
                           size_t *n_cuts)
{
#if K3_TOK_HAVE_X86_SIMD
    if (t->simd == K3_TOK_SIMD_AVX512) return k3_runs_bounded_avx512(s, n, cuts, n_cuts);
    if (t->simd == K3_TOK_SIMD_AVX2) return k3_runs_bounded_avx2(s, n, cuts, n_cuts);
#elif K3_TOK_HAVE_NEON64
    if (t->simd == K3_TOK_SIMD_NEON) return k3_runs_bounded_neon(s, n, cuts, n_cuts);
#endif
    return runs_bounded(s, n, cuts, n_cuts);
}

/* The length of s's valid UTF-8 prefix, by the build the tokenizer chose at load. */
static size_t utf8_valid_prefix(const struct k3_tok *t, const uint8_t *s, size_t n)
{
#if K3_TOK_HAVE_X86_SIMD
    if (t->simd == K3_TOK_SIMD_AVX512) return k3_utf8_valid_prefix_avx512(s, n);
    if (t->simd == K3_TOK_SIMD_AVX2) return k3_utf8_valid_prefix_avx2(s, n);
#elif K3_TOK_HAVE_NEON64
    if (t->simd == K3_TOK_SIMD_NEON) return k3_utf8_valid_prefix_neon(s, n);
#endif
    return k3_utf8_valid_prefix(s, n);
}

/* tokenization_kimi.py encode(): slices of 400,000 code points, each cut so that no run of
 * isspace / non-isspace code points is longer than 25,000. When runs_bounded, only the
 * slices cut (runs inside a slice are parts of the text's runs). Otherwise, blocks of 16
 * bytes go at once (unicode_simd.h) when no cut can fall inside them: the block's
 * characters are those of its bytes that are not continuation bytes (a character begun in
 * the block before was counted there), and the run at its end is its trailing characters
 * of the last one's class. */
static void segments(const struct k3_tok *t, const uint8_t *s, size_t n, enum k3_tok_mode mode,
                     struct seg_sink *k)
{
    size_t *cuts = NULL, n_cuts = 0;
    if (n > K3_TOK_MAX_SLICE_CHARS) { /* n bytes hold at most n code points */
        cuts = malloc(sizeof(size_t) * (n / K3_TOK_MAX_SLICE_CHARS + 1));
        K3_CHECK(cuts, "out of memory");
    }
    int bounded = runs_bounded_by(t, s, n, cuts, &n_cuts);
    if (bounded) {
        size_t a = 0;
        for (size_t c = 0; c < n_cuts; c++) {
            substring(t, s, a, cuts[c], mode, k);
            a = cuts[c];
        }
        if (a < n) substring(t, s, a, n, mode, k);
    }
    free(cuts);
    if (bounded) return;
    size_t i = 0;
    while (i < n) {
        size_t sub_start = i, n_chars = 0, run = 0;
        int run_space = -1;
        while (i < n && n_chars < K3_TOK_MAX_SLICE_CHARS) {
            if (i + 18 <= n && n_chars + 16 <= K3_TOK_MAX_SLICE_CHARS && run + 16 <= K3_TOK_MAX_RUN_CHARS) {
                struct k3_blk b = k3_blk16(s + i);
                uint32_t starts = ~b.cont & 0xFFFF, sp = b.space & starts;
                size_t chars = (size_t)k3_popcount32(starts); /* >= 4: a character has <= 4 bytes */
                int last = (int)(sp >> (31 - __builtin_clz(starts)) & 1);
                uint32_t other = last ? starts & ~sp : sp; /* characters of the other class */
                if (!other) run = last == run_space ? run + chars : chars;
                else run = (size_t)k3_popcount32(starts >> (32 - __builtin_clz(other)));
                run_space = last;
                n_chars += chars;
                i += 16;
                continue;
            }
            /* one character at a time (near a cut or the end); i may be inside a character
             * whose lead byte a block counted */
            if ((s[i] & 0xC0) == 0x80) {
                i++;
                continue;
            }
            int len;
            int sp = py_isspace(s, i, &len);
            if (sp != run_space) {
                run = 1;
                run_space = sp;
            } else if (++run > K3_TOK_MAX_RUN_CHARS) {
                substring(t, s, sub_start, i, mode, k);
                sub_start = i;
                run = 1;
            }
            i += (size_t)len;
            n_chars++;
        }
        /* the slice ends after its last character's bytes */
        while (i < n && (s[i] & 0xC0) == 0x80) i++;
        substring(t, s, sub_start, i, mode, k);
    }
}

/* ---- memos kept from call to call -------------------------------------------------- */

/* Each encode call, and each worker of a multi-threaded one, looks pieces up in a memo
 * (bpe.c). The tokenizer keeps memos from call to call: a call takes a free one and gives it
 * back, and a text sent again (a conversation re-sent with each turn, a shared system
 * prompt) finds its pieces there. A call that finds none free (more than
 * K3_TOK_MEMOS_PER_SIZE calls or workers at once) makes one of its own for the call. The
 * memos are exact, so the ids never depend on what earlier calls left; only the time does
 * (k3_tok_forget empties them of every text, back to their seeds: bpe.c, memo_seed). Each is
 * made on first use, so only as many exist as calls ever ran at once, in one of
 * K3_TOK_MEMO_SIZES sizes: a text (or a worker's share) takes one of the size its own memo
 * would have (bpe_memo.h's sizes double with the text, from 16 sets of the m8 table up to
 * 16,384 for 4 MB; the seeded pieces memo has 2^K3_MEMO_SEEDED_MORE8 times the m8 sets). A
 * memo larger than its text cost cache misses when memos started empty: one sized for 4 MB
 * made a 35 KB text's first call 25% slower on the dev VM and a 1.9 MB CJK text's 5-7%, one
 * sized for any text a 1M-token text's 4%; seeded, the larger pieces memo pays (README, run
 * 128). */
/* Except for small texts: a kept memo for a text whose own would have fewer than 1 <<
 * MEMO_SMALL_LOG2 sets (1,024: a 64 KiB m8 table, texts up to 256 KB) has four times as
 * many, up to that: still in L2, and with room for the pieces of the texts sent again (dev
 * VM, a 35 KB text: 0.045 ms again instead of 0.079 with its own size, and its first call
 * not slower: -7% and -2% against 46cb0d6 in two runs). */
#define MEMO_SMALL_LOG2 10
/* The kept memos' tables of 17..48-byte pieces hold four times what a call's own would:
 * calls on new text were not slower with it, and a 1M-token text sent again took 13-14 ms
 * instead of 16-18 on the dev VM (its first call: 24; it has about 13,500 distinct pieces
 * of that length). */
#define MEMO_LONG_FACTOR 4
/* And a kept memo's piece tables grow after two calls in a row whose pieces did not fit
 * (k3_bpe_cache_grow, at memo_give): larger from the start they made new text slower (m16 at
 * twice its sets: a 1M-token text's first call +4% on the dev VM); grown after one such call,
 * every call after k3_tok_forget paid the rehash (+2-3% on the host); grown after two, a text
 * sent again is faster (host: long_200k -24%, cjk -13%, long_1m -9%, code -8%, mixed -7%,
 * prose -5%) and a text after another of its size not slower (within 1-3%, either way).
 * k3_tok_forget makes them their first size again. All kept memos together grow by at most
 * K3_TOK_MEMO_GROW_BUDGET. */

struct k3_tok_memos *k3_tok_memos_new(void)
{
    struct k3_tok_memos *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    for (int i = 0; i < K3_TOK_MEMOS; i++) atomic_init(&m->busy[i], 0);
    atomic_init(&m->grown, 0);
    m->grow_budget = K3_TOK_MEMO_GROW_BUDGET;
    return m;
}

void k3_tok_memos_free(struct k3_tok_memos *m)
{
    if (!m) return;
    for (int i = 0; i < K3_TOK_MEMOS; i++)
        if (m->made[i]) k3_bpe_cache_free(&m->cache[i]);
    free(m);
}

/* A kept memo, or own made for text_bytes when all are taken; *slot says which (-1: own). */
static struct k3_bpe_cache *memo_take(const struct k3_tok *t, size_t text_bytes,
                                      struct k3_bpe_cache *own, int *slot)
{
    struct k3_tok_memos *m = t->memos;
    int own_log2 = k3_memo_sets_log2(text_bytes), size = own_log2 - K3_MEMO_SETS_LOG2_MIN;
    for (int i = size * K3_TOK_MEMOS_PER_SIZE; i < (size + 1) * K3_TOK_MEMOS_PER_SIZE; i++) {
        if (atomic_load_explicit(&m->busy[i], memory_order_relaxed) ||
            atomic_exchange_explicit(&m->busy[i], 1, memory_order_acquire))
            continue;
        if (!m->made[i]) {
            struct k3_bpe_cache *c = &m->cache[i];
            int kept = own_log2; /* small texts: four times their own, up to MEMO_SMALL_LOG2 */
            if (own_log2 < MEMO_SMALL_LOG2) kept = own_log2 + 2 < MEMO_SMALL_LOG2 ? own_log2 + 2 : MEMO_SMALL_LOG2;
            k3_bpe_cache_init(t, c, k3_memo_text_bytes(kept));
            c->long_mask = c->long_mask_made = (c->long_mask + 1) * MEMO_LONG_FACTOR - 1; /* made on first use */
            m->made[i] = 1;
        }
        m->used[i] = 1;
        *slot = i;
        return &m->cache[i];
    }
    *slot = -1;
    k3_bpe_cache_init(t, own, text_bytes);
    return own;
}

static void memo_give(const struct k3_tok *t, struct k3_bpe_cache *c, int slot)
{
    if (slot < 0) {
        k3_bpe_cache_free(c);
    } else { /* grow within what the budget has left (two calls at once may both take the
              * same room: the budget is a bound, give or take one table) */
        struct k3_tok_memos *m = t->memos;
        size_t used = atomic_load_explicit(&m->grown, memory_order_relaxed);
        size_t added = k3_bpe_cache_grow(t, c, used < m->grow_budget ? m->grow_budget - used : 0);
        if (added) atomic_fetch_add_explicit(&m->grown, added, memory_order_relaxed);
        atomic_store_explicit(&m->busy[slot], 0, memory_order_release);
    }
}

void k3_tok_forget(const struct k3_tok *t)
{
    struct k3_tok_memos *m = t->memos;
    for (int i = 0; i < K3_TOK_MEMOS; i++) {
        while (atomic_exchange_explicit(&m->busy[i], 1, memory_order_acquire)) sched_yield();
        if (m->used[i]) {
            atomic_fetch_sub_explicit(&m->grown, k3_bpe_cache_grown_bytes(&m->cache[i]), memory_order_relaxed);
            k3_bpe_cache_clear(t, &m->cache[i]);
            m->used[i] = 0;
        }
        atomic_store_explicit(&m->busy[i], 0, memory_order_release);
    }
    k3_tok_chunks_clear(t->chunks);
}

/* ---- chunks kept from call to call ------------------------------------------------- */

static inline int ascii_alnum(uint8_t c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

static inline int ascii_nonspace(uint8_t c)
{
    return c < 0x80 && c > ' ' && !(c >= 0x1C && c <= 0x1F);
}

/* A position in (a, b) where the pre-tokenizer provably cuts, at or after from; b if none. */
static size_t safe_cut(const uint8_t *s, size_t from, size_t b)
{
    for (size_t i = from; i < b; i++) {
        if (s[i - 1] == '\n' && ascii_nonspace(s[i])) return i;
        if (s[i] == ' ' && ascii_alnum(s[i - 1])) return i;
    }
    return b;
}

/* An ordinary segment goes through the kept chunks (tok_chunks.c): one call encodes chunks of
 * about CHUNK_BYTES, cut at safe_cut points found from the chunk's start, so a text and a
 * longer one that begins with it cut the same way until near where they differ; the
 * multi-threaded path's chunks are a power of two for the same reason. A chunk's ids are those
 * of its bytes alone, which a provable cut makes the same as in the segment. Chunks under
 * CHUNK_MIN bytes are encoded without looking: a chat prompt of 60 messages of 300..3000 bytes
 * (K3 framing) sent again took 0.07 ms with 256, 0.09 with 1 KiB, 0.38 with 4 KiB and 0.45
 * with nothing kept, and 1.02 ms as new text with each (dev VM). */
#define CHUNK_BYTES (16 * 1024)
#define CHUNK_MIN 256

static void encode_chunk(const struct k3_tok *t, const uint8_t *s, size_t n, const uint8_t *end,
                         struct k3_bpe_cache *cache, struct k3_tok_ids *out)
{
    if (n < CHUNK_MIN) {
        encode_ordinary(t, s, n, end, cache, out);
        return;
    }
    uint64_t h = k3_tok_chunk_hash(t->chunks, s, n);
    if (k3_tok_chunks_get(t->chunks, s, n, h, out)) return;
    size_t before = out->n;
    encode_ordinary(t, s, n, end, cache, out);
    k3_tok_chunks_put(t->chunks, s, n, h, out->ids + before, out->n - before);
}

void k3_tok_chunk_budget(struct k3_tok *t, size_t bytes) { k3_tok_chunks_budget(t->chunks, bytes); }

void k3_tok_chunk_stats(const struct k3_tok *t, struct k3_tok_chunk_stats *out)
{
    size_t found, encoded, bytes;
    k3_tok_chunks_stats(t->chunks, &found, &encoded, &bytes);
    *out = (struct k3_tok_chunk_stats){found, encoded, bytes};
}

/* ---- single-threaded ---------------------------------------------------------------- */

struct st_sink {
    struct seg_sink k;
    const struct k3_tok *t;
    const uint8_t *s, *end;
    struct k3_bpe_cache *cache;
    struct k3_tok_ids *out;
};

static void st_text(struct seg_sink *k, size_t a, size_t b)
{
    struct st_sink *c = (struct st_sink *)k;
    while (b - a > CHUNK_BYTES + CHUNK_BYTES / 2) {
        size_t cut = safe_cut(c->s, a + CHUNK_BYTES, b);
        if (cut >= b) break;
        encode_chunk(c->t, c->s + a, cut - a, c->end, c->cache, c->out);
        a = cut;
    }
    encode_chunk(c->t, c->s + a, b - a, c->end, c->cache, c->out);
}

static void st_special(struct seg_sink *k, int32_t id)
{
    struct st_sink *c = (struct st_sink *)k;
    k3_tok_ids_reserve(c->out, 1);
    c->out->ids[c->out->n++] = id;
}

/* ---- multi-threaded ----------------------------------------------------------------- */

struct mt_item {
    size_t a, b;        /* text chunk, or */
    int32_t special;    /* >= 0: a special token */
    int done;           /* its ids came from the kept chunks */
    struct k3_tok_ids ids;
};

struct mt_sink {
    struct seg_sink k;
    const struct k3_tok *t;
    const uint8_t *s, *end;
    size_t chunk;       /* target chunk bytes */
    int n_threads;
    struct mt_item *items;
    size_t n_items, cap;
    atomic_size_t next; /* next item to encode */
};

static struct mt_item *mt_add(struct mt_sink *c)
{
    if (c->n_items == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->items = realloc(c->items, c->cap * sizeof *c->items);
        K3_CHECK(c->items, "out of memory");
    }
    struct mt_item *it = &c->items[c->n_items++];
    memset(it, 0, sizeof *it);
    it->special = -1;
    return it;
}

static void mt_text(struct seg_sink *k, size_t a, size_t b)
{
    struct mt_sink *c = (struct mt_sink *)k;
    while (b - a > c->chunk + c->chunk / 2) {
        size_t cut = safe_cut(c->s, a + c->chunk, b);
        if (cut >= b) break;
        struct mt_item *it = mt_add(c);
        it->a = a;
        it->b = cut;
        a = cut;
    }
    struct mt_item *it = mt_add(c);
    it->a = a;
    it->b = b;
}

static void mt_special(struct seg_sink *k, int32_t id)
{
    mt_add((struct mt_sink *)k)->special = id;
}

static void mt_worker(void *ctx, int64_t begin, int64_t end, int worker)
{
    struct mt_sink *c = ctx;
    struct k3_bpe_cache own, *cache = NULL;
    int slot = -1;
    for (;;) {
        size_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->n_items) break;
        struct mt_item *it = &c->items[i];
        if (it->special >= 0 || it->done) continue;
        if (!cache) /* taken at the first chunk: a worker that gets none holds none */
            cache = memo_take(c->t, (size_t)(c->end - c->s) / (size_t)c->n_threads, &own, &slot);
        encode_chunk(c->t, c->s + it->a, it->b - it->a, c->end, cache, &it->ids);
    }
    if (cache) memo_give(c->t, cache, slot);
}

/* ---- encode ------------------------------------------------------------------------- */

/* Below MT_MIN_BYTES one thread is faster than waking the pool (on the 2-core dev VM a 35 KB
 * text takes 0.12 ms on one thread, 0.10-0.11 on two since k3_pool_pull, 0.16-0.17 before,
 * when the caller waited for every worker to wake). Chunks are a quarter of a thread's share,
 * a power of two from MT_MIN_CHUNK to CHUNK_BYTES, so that the kept chunks (tok_chunks.c)
 * serve threads too, and a text large enough has the one-thread path's chunks. On the 16-core
 * host a 35 KB text (10K tokens) took 0.42 ms on one thread, 0.14 ms in 1 KiB chunks on 16 and
 * 0.19 in 4 KiB chunks. */
#define MT_MIN_BYTES (16 * 1024)
#define MT_MIN_CHUNK 1024
#define MT_VALID_MIN_BYTES ((size_t)1 << 20)

struct mt_valid {
    const struct k3_tok *t;
    const uint8_t *s;
    size_t n;
    int n_parts;
    atomic_int next; /* the next part to check */
    atomic_int bad;
};

static void mt_valid_worker(void *ctx, int64_t begin, int64_t end, int worker)
{
    struct mt_valid *v = ctx;
    for (int k; (k = atomic_fetch_add(&v->next, 1)) < v->n_parts;) {
        /* part k: [a, b), both moved forward onto a character start */
        size_t a = v->n * (size_t)k / (size_t)v->n_parts, b = v->n * (size_t)(k + 1) / (size_t)v->n_parts;
        for (int i = 0; i < 3 && a < v->n && a && (v->s[a] & 0xC0) == 0x80; i++) a++;
        for (int i = 0; i < 3 && b < v->n && (v->s[b] & 0xC0) == 0x80; i++) b++;
        if (a < b && utf8_valid_prefix(v->t, v->s + a, b - a) != b - a) atomic_store(&v->bad, 1);
    }
}

/* All of s valid UTF-8? Checked in parts on the pool; a part that starts inside a sequence
 * (more than 3 continuation bytes in a row) fails, so any doubt goes the serial way. */
static int utf8_valid_parallel(const struct k3_tok *t, const uint8_t *s, size_t n,
                               struct k3_pool *pool)
{
    struct mt_valid v = {t, s, n, pool->n_threads, 0, 0};
    atomic_init(&v.next, 0);
    atomic_init(&v.bad, 0);
    k3_pool_pull(pool, mt_valid_worker, &v);
    return !atomic_load(&v.bad);
}

void k3_tok_encode(const struct k3_tok *t, const char *text, size_t len, enum k3_tok_mode mode,
                   struct k3_pool *pool, struct k3_tok_ids *out)
{
    const uint8_t *s = (const uint8_t *)text;
    uint8_t *clean = NULL;
    int mt = pool && pool->n_threads > 1 && len >= MT_MIN_BYTES;
    /* the UTF-8 check on the pool only for long texts: it is 20 GB/s on one thread, and waking
     * the pool for it cost a text sent again (its chunks kept) 0.04 ms on the 16-core host */
    size_t valid = mt && len >= MT_VALID_MIN_BYTES && utf8_valid_parallel(t, s, len, pool) ? len
                                                                                        : utf8_valid_prefix(t, s, len);
    if (valid < len) {
        clean = utf8_sanitize(s, len, valid, &len);
        s = clean;
    }
    if (!mt || len < MT_MIN_BYTES) {
        struct st_sink c = {.k = {st_text, st_special}, .t = t, .s = s, .end = s + len, .out = out};
        k3_tok_ids_reserve(out, len / 3 + 16); /* most text has more than 3 bytes per token */
        struct k3_bpe_cache own;
        int slot;
        c.cache = memo_take(t, len, &own, &slot);
        segments(t, s, len, mode, &c.k);
        memo_give(t, c.cache, slot);
        free(clean);
        return;
    }
    struct mt_sink c = {{mt_text, mt_special}, t, s, s + len, 0, pool->n_threads, NULL, 0, 0, 0};
    c.chunk = MT_MIN_CHUNK;
    while (c.chunk < CHUNK_BYTES && c.chunk * 2 <= len / ((size_t)pool->n_threads * 4)) c.chunk *= 2;
    atomic_init(&c.next, 0);
    segments(t, s, len, mode, &c.k);
    /* The chunks kept from earlier calls are looked up here, in order, until the first that
     * is not kept: a text sent again wakes no thread. What is left goes to the pool, or stays
     * on this thread when it is less than MT_MIN_BYTES. */
    size_t left = 0;
    for (size_t i = 0, trying = 1; i < c.n_items; i++) {
        struct mt_item *it = &c.items[i];
        if (it->special >= 0) continue;
        size_t n = it->b - it->a;
        if (trying && n >= CHUNK_MIN) {
            if (k3_tok_chunks_get(t->chunks, s + it->a, n, k3_tok_chunk_hash(t->chunks, s + it->a, n), &it->ids)) {
                it->done = 1;
                continue;
            }
            trying = 0;
        }
        left += n;
    }
    if (left >= MT_MIN_BYTES) k3_pool_pull(pool, mt_worker, &c);
    else if (left) mt_worker(&c, 0, 0, 0);
    size_t total = 0;
    for (size_t i = 0; i < c.n_items; i++) total += c.items[i].special >= 0 ? 1 : c.items[i].ids.n;
    k3_tok_ids_reserve(out, total);
    for (size_t i = 0; i < c.n_items; i++) {
        struct mt_item *it = &c.items[i];
        if (it->special >= 0) {
            out->ids[out->n++] = it->special;
            continue;
        }
        memcpy(out->ids + out->n, it->ids.ids, it->ids.n * sizeof(int32_t));
        out->n += it->ids.n;
        k3_tok_ids_free(&it->ids);
    }
    free(c.items);
    free(clean);
}

/* ---- decode ------------------------------------------------------------------------- */

int k3_tok_decode(const struct k3_tok *t, const int32_t *ids, size_t n, char **out, size_t *out_len,
                  struct k3_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return k3_err_set(err, "token id %d at position %zu is out of range (0..%d)", ids[i], i,
                              t->n_vocab - 1);
        total += t->off[ids[i] + 1] - t->off[ids[i]];
    }
    char *o = malloc(total + 1);
    if (!o) return k3_err_set(err, "out of memory decoding %zu ids", n);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = t->off[ids[i] + 1] - t->off[ids[i]];
        memcpy(o + w, t->bytes + t->off[ids[i]], l);
        w += l;
    }
    o[w] = 0;
    *out = o;
    *out_len = w;
    return 0;
}

void k3_detok_init(struct k3_detok *d, const struct k3_tok *t)
{
    memset(d, 0, sizeof *d);
    d->tok = t;
}

/* Emits what buf[0..n) completes; keeps a valid incomplete tail in d->pend. */
static int detok_feed(struct k3_detok *d, const uint8_t *buf, size_t n, char *out)
{
    size_t w = 0, i = 0;
    while (i < n) {
        if (buf[i] < 0x80) {
            out[w++] = (char)buf[i++];
            continue;
        }
        int k = k3_utf8_check(buf + i, n - i);
        if (k > 0) {
            memcpy(out + w, buf + i, (size_t)k);
            w += (size_t)k;
            i += (size_t)k;
        } else if (k < 0) {
            memcpy(out + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i += (size_t)-k;
        } else {
            d->n_pend = (int)(n - i);
            memcpy(d->pend, buf + i, n - i);
            break;
        }
    }
    out[w] = 0;
    return (int)w;
}

int k3_detok_push(struct k3_detok *d, int32_t id, char *out)
{
    if (id < 0 || id >= d->tok->n_vocab) return -1;
    const uint8_t *b = d->tok->bytes + d->tok->off[id];
    size_t n = d->tok->off[id + 1] - d->tok->off[id];
    uint8_t buf[4 + 256 + 64];
    K3_CHECK(n <= sizeof buf - 4, "token %d has %zu bytes", id, n);
    size_t m = (size_t)d->n_pend;
    memcpy(buf, d->pend, m);
    memcpy(buf + m, b, n);
    d->n_pend = 0;
    return detok_feed(d, buf, m + n, out);
}

int k3_detok_flush(struct k3_detok *d, char *out)
{
    int w = 0;
    if (d->n_pend) { /* an incomplete sequence is one maximal subpart */
        memcpy(out, "\xEF\xBF\xBD", 3);
        w = 3;
    }
    out[w] = 0;
    d->n_pend = 0;
    return w;
}
