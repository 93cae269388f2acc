/* test_pool.c - the CPU thread pool covers every index exactly once, for any
 * thread count and loop length, across many consecutive parallel-fors. */
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

int main(void)
{
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
