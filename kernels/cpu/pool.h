/* pool.h - the CPU backend's worker threads: a fixed pool and a parallel-for.
 *
 * CPU ops split their outer loop (rows, heads, tokens) into contiguous ranges,
 * one per worker; the caller's thread takes part, so a pool of 1 runs inline.
 * A static split (not work stealing) keeps results bitwise reproducible for a
 * given thread count and is enough for the regular loops of a forward pass.
 * k3_pool_pull serves work that its threads pull from a counter (the tokenizer). */
#ifndef K3_KERNELS_CPU_POOL_H
#define K3_KERNELS_CPU_POOL_H

#include <pthread.h>
#include <stdint.h>

/* fn handles items [begin, end) of the loop; worker is 0..n_threads-1. */
typedef void (*k3_pool_fn)(void *ctx, int64_t begin, int64_t end, int worker);

struct k3_pool {
    int n_threads;            /* including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    uint64_t generation;      /* bumped for every parallel_for */
    int n_busy;
    int stop;
    k3_pool_fn fn;
    void *ctx;
    int64_t n;
    int pull;                 /* this round is a k3_pool_pull */
    int closed;               /* k3_pool_pull: the caller's own call has returned */
};

/* n_threads <= 0: the cores this process may run on. Returns 0 or -1. */
int k3_pool_init(struct k3_pool *p, int n_threads);
void k3_pool_free(struct k3_pool *p);
void k3_pool_for(struct k3_pool *p, int64_t n, k3_pool_fn fn, void *ctx);
/* For work that fn takes from a shared counter until none is left (so the split is not
 * reproducible, and need not be): fn(ctx, 0, 1, worker) runs on the calling thread and on
 * every worker that wakes before the caller's own call has returned; one that wakes later
 * would find nothing left and is not waited for. Returns when every call that started has
 * returned. Small inputs then never wait for a sleeping worker to wake. */
void k3_pool_pull(struct k3_pool *p, k3_pool_fn fn, void *ctx);

#endif
