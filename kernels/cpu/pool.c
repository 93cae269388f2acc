/* pool.c - see pool.h. */
#include "kernels/cpu/pool.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct worker_arg {
    struct k3_pool *pool;
    int id;
};

static void run_range(struct k3_pool *p, int id)
{
    int64_t per = p->n / p->n_threads, extra = p->n % p->n_threads;
    int64_t begin = id * per + (id < extra ? id : extra);
    int64_t end = begin + per + (id < extra ? 1 : 0);
    if (begin < end) p->fn(p->ctx, begin, end, id);
}

static void *worker_main(void *argp)
{
    struct worker_arg arg = *(struct worker_arg *)argp;
    free(argp);
    struct k3_pool *p = arg.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        if (p->pull) { /* count in only while the caller's own call runs */
            if (p->closed) continue;
            p->n_busy++;
            pthread_mutex_unlock(&p->mu);
            p->fn(p->ctx, 0, 1, arg.id);
            pthread_mutex_lock(&p->mu);
            if (--p->n_busy == 0 && p->closed) pthread_cond_signal(&p->done_cv);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        run_range(p, arg.id);
        pthread_mutex_lock(&p->mu);
        if (--p->n_busy == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int available_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int k3_pool_init(struct k3_pool *p, int n_threads)
{
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads > 0 ? n_threads : available_cores();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (p->n_threads == 1) return 0;
    p->threads = calloc((size_t)p->n_threads - 1, sizeof *p->threads);
    if (!p->threads) goto fail;
    for (int i = 1; i < p->n_threads; i++) {
        struct worker_arg *arg = malloc(sizeof *arg);
        if (!arg) goto fail_threads;
        arg->pool = p;
        arg->id = i;
        if (pthread_create(&p->threads[i - 1], NULL, worker_main, arg) != 0) {
            free(arg);
            p->n_threads = i; /* workers 1..i-1 exist; k3_pool_free joins them */
            goto fail_threads;
        }
    }
    return 0;
fail_threads:
    k3_pool_free(p);
    return -1;
fail:
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    return -1;
}

void k3_pool_free(struct k3_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads && p->threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    memset(p, 0, sizeof *p);
}

void k3_pool_for(struct k3_pool *p, int64_t n, k3_pool_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (p->n_threads == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->pull = 0;
    p->n_busy = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    run_range(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->n_busy > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void k3_pool_pull(struct k3_pool *p, k3_pool_fn fn, void *ctx)
{
    if (p->n_threads == 1) {
        fn(ctx, 0, 1, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->pull = 1;
    p->closed = 0;
    p->n_busy = 0; /* the workers that have started */
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, 1, 0);
    pthread_mutex_lock(&p->mu);
    p->closed = 1;
    while (p->n_busy > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
