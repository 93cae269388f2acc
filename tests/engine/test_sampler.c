/* test_sampler.c - the sampler over vocabulary slices draws exactly what the
 * one-rank reference draws (same token for the same u, through every path:
 * candidate list, bisection for top-k > 64 and wide top-p, distributed draw),
 * the draws follow the exact distribution (chi-square on 8 tokens),
 * penalties match a hand computation, and seeds reproduce. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "k3_test_mpi.h"
#include "model/parallel.h"
#include "mpi/bootstrap.h"
#include "mpi/comm.h"

static uint64_t rng;
static uint32_t next(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}
static float rnd(void) { return (float)(next() % 20000) / 1000.0f - 10.0f; }

static void ban_even(void *ctx, uint64_t seq_id, int64_t v0, int64_t nv, float *x)
{
    (void)ctx, (void)seq_id;
    for (int64_t i = 0; i < nv; i++)
        if ((v0 + i) % 2 == 0) x[i] = -INFINITY;
}

static void check_same_as_ref(struct k3_comm *c)
{
    static const int64_t vocabs[] = {5, 17, 100, 1000};
    static const float temps[] = {0, 0.7f, 1.3f, 4.0f};
    static const int32_t topks[] = {0, 1, 3, 50, 70, 200};
    static const float topps[] = {1, 0.9f, 0.5f, 0.999f};
    static const float minps[] = {0, 0.05f};
    int mismatches = 0, trials = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++) {
        int64_t V = vocabs[vi];
        long long b, e;
        k3_split(V, c->size, c->rank, &b, &e);
        float *x = malloc(sizeof *x * (size_t)V), *xr = malloc(sizeof *xr * (size_t)V);
        double *probs = malloc(sizeof *probs * (size_t)V);
        int32_t hist[40];
        struct k3_sampler s;
        struct k3_err err;
        CHECK(k3_sampler_init(&s, b, e - b, V, c, &err) == 0);
        for (int t = 0; t < 96; t++, trials++) {
            rng = (uint64_t)(V * 1000 + t); /* the same on every rank */
            for (int64_t i = 0; i < V; i++) x[i] = rnd();
            if (t % 5 == 1) /* ties */
                for (int64_t i = 0; i < V; i += 3) x[i] = 4.5f;
            struct k3_sampling p = {
                .temperature = temps[next() % 4], .top_k = topks[next() % 6], .top_p = topps[next() % 4],
                .min_p = minps[next() % 2], .seed = next(), .n_logprobs = (int32_t)(next() % 4)};
            if (t % 3 == 0) p.repetition_penalty = 1.3f, p.frequency_penalty = 0.4f, p.presence_penalty = 0.2f;
            for (int j = 0; j < 40; j++) hist[j] = (int32_t)(next() % (uint32_t)V);
            struct k3_sample_hist h = {hist, 40, 25};
            s.mask = (struct k3_token_mask){t % 7 == 3 ? ban_even : NULL, NULL};
            int64_t pos = (int64_t)(next() % 1000);
            memcpy(xr, x, sizeof *x * (size_t)V);
            struct k3_sample_out o;
            k3_sampler_pick(&s, &p, 7, x + b, &h, pos, &o);
            /* reference: whole row */
            double lse = 0, M = -INFINITY;
            for (int64_t i = 0; i < V; i++) M = xr[i] > M ? xr[i] : M;
            for (int64_t i = 0; i < V; i++) lse += exp((double)xr[i] - M);
            lse = M + log(lse);
            float raw_tok;
            k3_sampler_process_ref(&p, xr, V, &h);
            if (s.mask.apply) s.mask.apply(NULL, 7, 0, V, xr);
            k3_sampler_probs_ref(&p, xr, V, probs);
            int32_t want = k3_sampler_draw_ref(probs, V, k3_sampler_uniform(p.seed, pos));
            if (o.token != want) {
                mismatches++;
                fprintf(stderr, "V %lld trial %d: token %d, reference %d (T %g k %d p %g min_p %g)\n", (long long)V, t,
                            o.token, want, p.temperature, p.top_k, p.top_p, p.min_p);
                continue;
            }
            rng = (uint64_t)(V * 1000 + t);
            for (int64_t i = 0; i < V; i++) xr[i] = rnd();
            if (t % 5 == 1)
                for (int64_t i = 0; i < V; i += 3) xr[i] = 4.5f;
            raw_tok = xr[want];
            CHECK_NEAR(o.logprob, (float)(raw_tok - lse), 1e-5);
            CHECK(o.n_top == (p.n_logprobs < V ? p.n_logprobs : (int)V));
            for (int j = 0; j < o.n_top; j++) CHECK_NEAR(o.top_logprobs[j], (float)(xr[o.top_ids[j]] - lse), 1e-5);
        }
        k3_sampler_free(&s);
        free(x), free(xr), free(probs);
    }
    CHECK_MSG(mismatches == 0, "%d of %d draws differ from the reference", mismatches, trials);
}

/* Chi-square of N draws against the exact distribution (one rank). */
static void check_statistics(void)
{
    enum { V = 8, N = 40000 };
    static const float base[V] = {2.0f, 1.5f, 1.4f, 0.3f, 0.0f, -0.5f, -1.0f, 1.5f};
    struct k3_sampling ps[] = {
        {.temperature = 0.8f, .top_p = 1, .seed = 11},
        {.temperature = 1.0f, .top_k = 3, .top_p = 1, .seed = 12},
        {.temperature = 1.2f, .top_p = 0.7f, .seed = 13},
        {.temperature = 1.0f, .top_p = 1, .min_p = 0.2f, .seed = 14},
        {.temperature = 2.0f, .top_k = 5, .top_p = 0.8f, .min_p = 0.1f, .seed = 15},
    };
    struct k3_sampler s;
    struct k3_err err;
    CHECK(k3_sampler_init(&s, 0, V, V, NULL, &err) == 0);
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
        double probs[V], chi2 = 0;
        long hits[V] = {0};
        k3_sampler_probs_ref(&ps[k], base, V, probs);
        for (int n = 0; n < N; n++) {
            float x[V];
            memcpy(x, base, sizeof x);
            struct k3_sample_out o;
            k3_sampler_pick(&s, &ps[k], 1, x, NULL, n, &o);
            hits[o.token]++;
        }
        int df = -1, zero_hit = 0;
        for (int i = 0; i < V; i++) {
            if (probs[i] == 0) {
                zero_hit |= hits[i] != 0;
                continue;
            }
            double e = probs[i] * N;
            chi2 += (hits[i] - e) * (hits[i] - e) / e;
            df++;
        }
        /* 99.99th percentile of chi-square with <= 7 degrees of freedom: 29.9 */
        printf("params %zu: chi2 %.2f with %d degrees of freedom (limit 29.9)\n", k, chi2, df);
        CHECK_MSG(chi2 < 29.9, "params %zu: chi2 %.2f", k, chi2);
        CHECK_MSG(!zero_hit, "params %zu drew a token outside the kept set", k);
    }
    /* top-k 3 keeps {0, 1, 7} (1.5 tied at 1 and 7, both kept) */
    double probs[V];
    k3_sampler_probs_ref(&ps[1], base, V, probs);
    CHECK(probs[0] > 0 && probs[1] > 0 && probs[7] > 0 && probs[2] == 0);
    /* seeds: the same (seed, position) draws the same token */
    int differ = 0;
    for (int n = 0; n < 200; n++) {
        float x1[V], x2[V];
        memcpy(x1, base, sizeof x1), memcpy(x2, base, sizeof x2);
        struct k3_sample_out o1, o2;
        struct k3_sampling p2 = ps[0];
        k3_sampler_pick(&s, &ps[0], 1, x1, NULL, n, &o1);
        k3_sampler_pick(&s, &ps[0], 2, x2, NULL, n, &o2);
        CHECK(o1.token == o2.token);
        p2.seed++;
        memcpy(x2, base, sizeof x2);
        k3_sampler_pick(&s, &p2, 1, x2, NULL, n, &o2);
        differ += o1.token != o2.token;
    }
    CHECK(differ > 20);
    k3_sampler_free(&s);
}

static void check_penalties(void)
{
    float x[4] = {1, 2, -1, 0.5f};
    int32_t hist[] = {0, 1, 1, 2};
    struct k3_sample_hist h = {hist, 4, 1};
    struct k3_sampling p = {.repetition_penalty = 2, .frequency_penalty = 0.5f, .presence_penalty = 0.25f};
    k3_sampler_process_ref(&p, x, 4, &h);
    CHECK_NEAR(x[0], 0.5f, 1e-6);  /* prompt only: repetition */
    CHECK_NEAR(x[1], -0.25f, 1e-6); /* 2 / 2 - 0.5 * 2 - 0.25 */
    CHECK_NEAR(x[2], -2.75f, 1e-6); /* -1 * 2 - 0.5 - 0.25 */
    CHECK_NEAR(x[3], 0.5f, 1e-6);
}

int main(int argc, char **argv)
{
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    struct k3_comm c;
    k3_comm_init_mpi(&c, job.world_comm, 60);
    check_same_as_ref(&c);
    if (c.rank == 0) {
        check_statistics();
        check_penalties();
    }
    k3_comm_free(&c);
    int rc = k3_test_summary_all(job.world_comm);
    k3_job_free(&job);
    return rc;
}
