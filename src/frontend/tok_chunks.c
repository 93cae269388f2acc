/* tok_chunks.c - the ids of long stretches of text the tokenizer has encoded before (text sent
 * again: a conversation re-sent each turn with its history, a shared document or system
 * prompt), kept from call to call so that a call finds them instead of encoding them again.
 *
 * A chunk is a stretch of an ordinary segment between two points where the pre-tokenizer
 * provably cuts (tokenizer.c chooses them from the text alone, so a text and a longer one that
 * starts with it have the same chunks up to near where they differ); its ids are those of the
 * chunk encoded alone, so a chunk found here gives exactly the ids encoding would.
 *
 * A chunk is kept on its second sighting: the first leaves a ghost (its hash and length, 64
 * bytes), and only a chunk that comes again costs a copy of its bytes and ids. So text seen
 * once, as in a stream of new prompts, costs a hash of a few sampled lines per chunk. A found
 * chunk is compared byte for byte: the hash only picks the candidates. The least recently used
 * chunks go when the bytes kept pass the budget. One mutex guards it all: a lookup or insertion
 * is per chunk (256 bytes to tens of kilobytes).
 *
 * Against crafted text (a server's clients): the hash is seeded at random per tokenizer, so
 * nobody can aim chunks at one bucket; and chunks that share a hash and a length (which differ
 * only in bytes the hash does not sample, easy to make) are kept SAME_HASH_KEPT at most, so a
 * lookup compares at most that many. */
#include "frontend/tok_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

#include "core/log.h"

struct chunk {
    struct chunk *next_hash;     /* the bucket's chain */
    struct chunk *newer, *older; /* the recency list */
    uint64_t h;
    size_t n;                    /* bytes */
    size_t n_ids;
    int32_t *ids;                /* NULL: a ghost (seen once; no bytes, no ids) */
    uint8_t *bytes;
};

#define SAME_HASH_KEPT 4

struct k3_tok_chunks {
    pthread_mutex_t lock;
    uint64_t seed;               /* of the hash (k3_tok_chunk_hash) */
    struct chunk **buckets;
    size_t mask;                 /* buckets - 1 */
    size_t count;
    struct chunk *newest, *oldest;
    size_t kept, budget;         /* bytes held (entries, bytes, ids), the most allowed; the
                                  * bucket array (8 bytes an entry, at most twice) is apart */
    size_t hits, misses;         /* chunks found, not found (k3_tok_chunks_stats) */
};

static size_t chunk_cost(const struct chunk *c)
{
    return sizeof *c + (c->ids ? c->n + c->n_ids * sizeof(int32_t) : 0);
}

struct k3_tok_chunks *k3_tok_chunks_new(size_t budget)
{
    struct k3_tok_chunks *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->mask = 255;
    c->buckets = calloc(c->mask + 1, sizeof *c->buckets);
    if (!c->buckets || pthread_mutex_init(&c->lock, NULL)) {
        free(c->buckets);
        free(c);
        return NULL;
    }
    c->budget = budget;
    uint64_t seed = 0;
#if defined(__linux__)
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) seed = 0;
#endif
    if (!seed) { /* no getrandom: the clock and the address space's layout */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)(uintptr_t)c;
    }
    c->seed = k3_tok_mix(seed | 1);
    return c;
}

static void chunk_free(struct chunk *e)
{
    free(e->ids);
    free(e);
}

static void clear_locked(struct k3_tok_chunks *c)
{
    for (struct chunk *e = c->newest, *next; e; e = next) {
        next = e->older;
        chunk_free(e);
    }
    memset(c->buckets, 0, (c->mask + 1) * sizeof *c->buckets);
    c->newest = c->oldest = NULL;
    c->count = c->kept = 0;
}

void k3_tok_chunks_free(struct k3_tok_chunks *c)
{
    if (!c) return;
    clear_locked(c);
    pthread_mutex_destroy(&c->lock);
    free(c->buckets);
    free(c);
}

void k3_tok_chunks_clear(struct k3_tok_chunks *c)
{
    pthread_mutex_lock(&c->lock);
    clear_locked(c); /* the counts stay: they are counters since load */
    pthread_mutex_unlock(&c->lock);
}

void k3_tok_chunks_stats(struct k3_tok_chunks *c, size_t *hits, size_t *misses, size_t *kept)
{
    pthread_mutex_lock(&c->lock);
    *hits = c->hits;
    *misses = c->misses;
    *kept = c->kept;
    pthread_mutex_unlock(&c->lock);
}

/* A hash of the chunk's length and of sampled 64-byte lines (its first and last, and one every
 * 4 KiB): it picks the candidates, which are compared whole, so it need not read every byte. */
uint64_t k3_tok_chunk_hash(const struct k3_tok_chunks *c, const uint8_t *s, size_t n)
{
    uint64_t h = (c->seed ^ n) * 0x9E3779B97F4A7C15ull;
    for (size_t at = 0;; at += 4096) {
        size_t a = at < n ? at : (n > 64 ? n - 64 : 0), m = n - a < 64 ? n - a : 64;
        for (size_t i = 0; i < m; i += 8) {
            h ^= k3_tok_word(s + a + i, m - i < 8 ? m - i : 8, m - i);
            h *= 0xBF58476D1CE4E5B9ull;
            h ^= h >> 31;
        }
        if (at >= n) break;
    }
    return k3_tok_mix(h);
}

static void unlink_recency(struct k3_tok_chunks *c, struct chunk *e)
{
    if (e->newer) e->newer->older = e->older;
    else c->newest = e->older;
    if (e->older) e->older->newer = e->newer;
    else c->oldest = e->newer;
}

static void push_newest(struct k3_tok_chunks *c, struct chunk *e)
{
    e->newer = NULL;
    e->older = c->newest;
    if (c->newest) c->newest->newer = e;
    c->newest = e;
    if (!c->oldest) c->oldest = e;
}

static void remove_chunk(struct k3_tok_chunks *c, struct chunk *e)
{
    struct chunk **p = &c->buckets[e->h & c->mask];
    while (*p != e) p = &(*p)->next_hash;
    *p = e->next_hash;
    unlink_recency(c, e);
    c->kept -= chunk_cost(e);
    c->count--;
    chunk_free(e);
}

static void evict_over_budget(struct k3_tok_chunks *c)
{
    while (c->kept > c->budget && c->oldest) remove_chunk(c, c->oldest);
}

void k3_tok_chunks_budget(struct k3_tok_chunks *c, size_t budget)
{
    pthread_mutex_lock(&c->lock);
    c->budget = budget;
    evict_over_budget(c);
    pthread_mutex_unlock(&c->lock);
}

static void grow_buckets(struct k3_tok_chunks *c)
{
    size_t mask = c->mask * 2 + 1;
    struct chunk **b = calloc(mask + 1, sizeof *b);
    if (!b) return; /* longer chains, still right */
    for (size_t i = 0; i <= c->mask; i++)
        for (struct chunk *e = c->buckets[i], *next; e; e = next) {
            next = e->next_hash;
            e->next_hash = b[e->h & mask];
            b[e->h & mask] = e;
        }
    free(c->buckets);
    c->buckets = b;
    c->mask = mask;
}

/* The chunk s[0..n) of hash h: a kept one (bytes equal), else its ghost, else NULL. */
static struct chunk *find(struct k3_tok_chunks *c, const uint8_t *s, size_t n, uint64_t h)
{
    struct chunk *ghost = NULL;
    for (struct chunk *e = c->buckets[h & c->mask]; e; e = e->next_hash) {
        if (e->h != h || e->n != n) continue;
        if (!e->ids) ghost = e;
        else if (!memcmp(e->bytes, s, n)) return e;
    }
    return ghost;
}

int k3_tok_chunks_get(struct k3_tok_chunks *c, const uint8_t *s, size_t n, uint64_t h,
                      struct k3_tok_ids *out)
{
    pthread_mutex_lock(&c->lock);
    struct chunk *e = find(c, s, n, h);
    int found = e && e->ids;
    if (found) {
        unlink_recency(c, e);
        push_newest(c, e);
        k3_tok_ids_reserve(out, e->n_ids);
        memcpy(out->ids + out->n, e->ids, e->n_ids * sizeof(int32_t));
        out->n += e->n_ids;
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return found;
}

void k3_tok_chunks_put(struct k3_tok_chunks *c, const uint8_t *s, size_t n, uint64_t h,
                       const int32_t *ids, size_t n_ids)
{
    pthread_mutex_lock(&c->lock);
    struct chunk *e = find(c, s, n, h);
    if (e && e->ids) { /* another call kept it meanwhile */
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (e) { /* seen before: its bytes and ids are kept (the ghost becomes the chunk), unless
              * SAME_HASH_KEPT chunks of its hash and length are (crafted, most likely: it stays
              * a ghost) */
        size_t same = 0;
        for (struct chunk *x = c->buckets[h & c->mask]; x; x = x->next_hash) same += x->ids && x->h == h && x->n == n;
        int32_t *kept = same < SAME_HASH_KEPT ? malloc(n_ids * sizeof(int32_t) + n) : NULL;
        if (kept) {
            c->kept -= chunk_cost(e);
            memcpy(kept, ids, n_ids * sizeof(int32_t));
            e->bytes = (uint8_t *)(kept + n_ids);
            memcpy(e->bytes, s, n);
            e->ids = kept;
            e->n_ids = n_ids;
            c->kept += chunk_cost(e);
        }
        unlink_recency(c, e);
        push_newest(c, e);
    } else if ((e = calloc(1, sizeof *e))) { /* first sighting: a ghost */
        e->h = h;
        e->n = n;
        e->next_hash = c->buckets[h & c->mask];
        c->buckets[h & c->mask] = e;
        push_newest(c, e);
        c->kept += chunk_cost(e);
        if (++c->count > c->mask + 1) grow_buckets(c);
    }
    evict_over_budget(c);
    pthread_mutex_unlock(&c->lock);
}
