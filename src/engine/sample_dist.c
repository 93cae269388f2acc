/* sample_dist.c - see sample_dist.h. Log-probabilities use the group's
 * log-sum-exp, combined from each rank's (max, sum of exp(x - max)) in fp64. */
#include "engine/sample_dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#define K3_TOPK_MAX 64

struct part {
    float max;
    int32_t id;      /* global id of this rank's max */
    double sum;      /* sum of exp(x - max) over this rank's ids */
};

static struct part local_part(const float *x, int64_t nv, int64_t v0)
{
    struct part p = {-INFINITY, -1, 0};
    for (int64_t i = 0; i < nv; i++)
        if (x[i] > p.max || p.id < 0) p.max = x[i], p.id = (int32_t)(v0 + i);
    for (int64_t i = 0; i < nv; i++) p.sum += exp((double)x[i] - p.max);
    return p;
}

/* Gathers every rank's part; returns the global log-sum-exp and the argmax. */
static double combine(const struct part *mine, struct k3_comm *comm, struct part *best)
{
    int n = comm ? comm->size : 1;
    struct part stack[16], *all = n <= 16 ? stack : malloc(sizeof *all * (size_t)n);
    K3_CHECK(all, "out of memory");
    if (comm) comm->ops->all_gather(comm, mine, all, sizeof *mine, "sample.greedy");
    else all[0] = *mine;
    *best = (struct part){-INFINITY, -1, 0};
    for (int r = 0; r < n; r++) {
        if (all[r].id < 0) continue; /* a rank without vocabulary rows */
        if (best->id < 0 || all[r].max > best->max || (all[r].max == best->max && all[r].id < best->id))
            *best = all[r];
    }
    double s = 0;
    for (int r = 0; r < n; r++)
        if (all[r].id >= 0) s += all[r].sum * exp((double)all[r].max - best->max);
    if (all != stack) free(all);
    return best->max + log(s);
}

void k3_dist_greedy(const float *x, int64_t nv, int64_t v0, struct k3_comm *comm, int32_t *token,
                    float *logprob)
{
    struct part mine = local_part(x, nv, v0), best;
    double lse = combine(&mine, comm, &best);
    *token = best.id;
    *logprob = (float)(best.max - lse);
}

struct cand {
    float v;
    int32_t id;
};

static int better(const struct cand *a, const struct cand *b)
{
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

/* Keeps the k best of x in c (sorted, best first); returns how many. */
static int local_topk(const float *x, int64_t nv, int64_t v0, int k, struct cand *c)
{
    int n = 0;
    for (int64_t i = 0; i < nv; i++) {
        struct cand x1 = {x[i], (int32_t)(v0 + i)};
        if (n == k && !better(&x1, &c[n - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && better(&x1, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x1;
    }
    return n;
}

void k3_dist_topk(const float *x, int64_t nv, int64_t v0, int k, struct k3_comm *comm, int32_t *ids,
                  float *logprobs)
{
    K3_CHECK(k >= 1 && k <= K3_TOPK_MAX, "top-k of %d (1..%d)", k, K3_TOPK_MAX);
    int n = comm ? comm->size : 1;
    struct cand mine[K3_TOPK_MAX];
    int have = local_topk(x, nv, v0, k, mine);
    for (int j = have; j < k; j++) mine[j] = (struct cand){-INFINITY, -1};
    struct cand *all = malloc(sizeof *all * (size_t)(n * k));
    K3_CHECK(all, "out of memory");
    if (comm) comm->ops->all_gather(comm, mine, all, sizeof(struct cand) * (size_t)k, "sample.topk");
    else memcpy(all, mine, sizeof(struct cand) * (size_t)k);
    struct cand best[K3_TOPK_MAX];
    int nb = 0;
    for (int i = 0; i < n * k; i++) {
        if (all[i].id < 0) continue;
        struct cand c = all[i];
        if (nb == k && !better(&c, &best[nb - 1])) continue;
        int j = nb < k ? nb++ : k - 1;
        while (j > 0 && better(&c, &best[j - 1])) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = c;
    }
    free(all);
    struct part p = local_part(x, nv, v0), top;
    double lse = combine(&p, comm, &top);
    for (int j = 0; j < k; j++) {
        ids[j] = j < nb ? best[j].id : -1;
        logprobs[j] = j < nb ? (float)(best[j].v - lse) : -INFINITY;
    }
}
