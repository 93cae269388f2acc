/* test_pool.c - the CPU thread pool covers every index exactly once, for any
 * thread count and loop length, across many consecutive parallel-fors, and so does
 * k3_pool_pull (items taken from a counter), mixed with them: a call returns only after
 * every worker that took part has returned. */
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "k3_test.h"
#include "kernels/cpu/pool.h"

struct cover { int *hits; int *worker_seen; };

static void mark(void *ctx, int64_t begin, int64_t end, int worker)
{
    struct cover *c = ctx;
    for (int64_t i = begin; i < end; i++) __atomic_add_fetch(&c->hits[i], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->worker_seen[worker], 1, __ATOMIC_RELAXED);
}

struct pull { int64_t n; int64_t next; int *hits; int live; };

/* takes items until none is left; the ones it marks are checked after k3_pool_pull
 * returns, so a worker still running then (not waited for) would show as a missed item */
static void take(void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)begin, (void)end, (void)worker;
    struct pull *q = ctx;
    __atomic_add_fetch(&q->live, 1, __ATOMIC_SEQ_CST);
    for (int64_t i; (i = __atomic_fetch_add(&q->next, 1, __ATOMIC_RELAXED)) < q->n;) {
        if (i % 7 == 0) sched_yield(); /* let other threads in */
        __atomic_add_fetch(&q->hits[i], 1, __ATOMIC_RELAXED);
    }
    __atomic_sub_fetch(&q->live, 1, __ATOMIC_SEQ_CST);
}

static void test_pull(void)
{
    static const int threads[] = {1, 2, 3, 7};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        struct k3_pool pool;
        CHECK(k3_pool_init(&pool, threads[t]) == 0);
        int bad = 0;
        for (int rep = 0; rep < 400; rep++) {
            int64_t n = rep % 5 == 0 ? 0 : 1 + rep % 97;
            struct pull q = {n, 0, calloc((size_t)n + 1, sizeof(int)), 0};
            k3_pool_pull(&pool, take, &q);
            int ok = __atomic_load_n(&q.live, __ATOMIC_SEQ_CST) == 0;
            for (int64_t i = 0; i < n; i++) ok &= q.hits[i] == 1;
            bad += !ok;
            free(q.hits);
            if (rep % 3 == 0) { /* a static round between pull rounds */
                struct cover c = {calloc(65, sizeof(int)), calloc(8, sizeof(int))};
                k3_pool_for(&pool, 64, mark, &c);
                for (int i = 0; i < 64; i++) bad += c.hits[i] != 1;
                free(c.hits);
                free(c.worker_seen);
            }
        }
        CHECK_MSG(bad == 0, "threads %d: %d pull rounds missed, repeated or outlived an item", threads[t], bad);
        k3_pool_free(&pool);
    }
}

int main(void)
{
    test_pull();
    static const int threads[] = {1, 2, 3, 7};
    static const int64_t lengths[] = {0, 1, 2, 5, 64, 1000, 4097};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        struct k3_pool pool;
        CHECK(k3_pool_init(&pool, threads[t]) == 0);
        CHECK(pool.n_threads == threads[t]);
        for (int rep = 0; rep < 50; rep++) {
            for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
                int64_t n = lengths[l];
                struct cover c = {calloc((size_t)n + 1, sizeof(int)), calloc(8, sizeof(int))};
                k3_pool_for(&pool, n, mark, &c);
                int ok = 1;
                for (int64_t i = 0; i < n; i++) ok &= c.hits[i] == 1;
                CHECK_MSG(ok, "threads %d n %lld: an index was missed or repeated", threads[t],
                          (long long)n);
                free(c.hits);
                free(c.worker_seen);
            }
        }
        k3_pool_free(&pool);
    }
    struct k3_pool pool;
    CHECK(k3_pool_init(&pool, 0) == 0 && pool.n_threads >= 1);
    k3_pool_free(&pool);
    return k3_test_summary();
}
