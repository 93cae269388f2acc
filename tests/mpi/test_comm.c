/* test_comm.c - groups, the MPI communicator and MoE dispatch/combine, on
 * however many ranks mpirun starts (the CTest script runs 1, 2, 3 and 4).
 *
 *   test_comm            all checks; prints "N passed, N failed" on rank 0
 *   test_comm timeout    rank 1 skips a collective: the others must abort
 *                        the job after the 2 s timeout, naming themselves
 *   test_comm die        rank 1 is killed (SIGKILL) before a collective:
 *                        the job must end, non-zero, without a hang */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "k3_test_mpi.h"
#include "mpi/bootstrap.h"
#include "mpi/comm.h"
#include "mpi/groups.h"
#include "mpi/moe_dispatch.h"
#include "mpi/mpi_check.h"

static struct k3_job job;

static void test_groups(void)
{
    for (int tp = 1; tp <= job.world; tp++) {
        if (job.world % tp) continue;
        struct k3_groups g;
        struct k3_err err;
        CHECK(k3_groups_init(&g, &job, tp, job.world / tp, &err) == 0);
        int r, n;
        MPI_Comm_rank(g.tp_comm, &r);
        MPI_Comm_size(g.tp_comm, &n);
        CHECK(n == tp && r == g.tp_rank);
        CHECK(g.group >= 0 && g.group < g.adp);
        CHECK(g.world_of_group_rank[g.group * tp + g.tp_rank] == job.rank);
        CHECK(g.tp_in_one_node); /* one node here */
        /* every (group, tp_rank) pair is taken by exactly one rank */
        int pair = g.group * tp + g.tp_rank, *all = malloc(sizeof(int) * (size_t)job.world);
        MPI_Allgather(&pair, 1, MPI_INT, all, 1, MPI_INT, job.world_comm);
        int dup = 0;
        for (int i = 0; i < job.world; i++)
            for (int j = 0; j < i; j++) dup |= all[i] == all[j];
        CHECK(!dup);
        free(all);
        k3_groups_free(&g);
    }
    struct k3_groups g;
    struct k3_err err;
    CHECK(k3_groups_init(&g, &job, job.world + 1, 1, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "must equal the");
}

static void test_collectives(struct k3_comm *c)
{
    int W = c->size, R = c->rank;
    enum { N = 37 };
    float f[N * 8];
    for (int i = 0; i < N; i++) f[i] = (float)(R * 100 + i);
    c->ops->all_reduce(c, f, N, K3_DTYPE_F32, "test.all_reduce");
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= f[i] == (float)(100 * W * (W - 1) / 2 + W * i);
    CHECK_MSG(ok, "f32 all_reduce");

    uint16_t h[N];
    for (int i = 0; i < N; i++) h[i] = k3_f32_to_bf16((float)(R + i % 5)); /* exact in bf16 */
    c->ops->all_reduce(c, h, N, K3_DTYPE_BF16, "test.all_reduce.bf16");
    ok = 1;
    for (int i = 0; i < N; i++) ok &= k3_bf16_to_f32(h[i]) == (float)(W * (W - 1) / 2 + W * (i % 5));
    CHECK_MSG(ok, "bf16 all_reduce");

    float *send = malloc(sizeof(float) * N * (size_t)W), recv[N];
    for (int i = 0; i < N * W; i++) send[i] = (float)(R + i);
    c->ops->reduce_scatter(c, send, recv, N, K3_DTYPE_F32, "test.reduce_scatter");
    ok = 1;
    for (int i = 0; i < N; i++) ok &= recv[i] == (float)(W * (W - 1) / 2 + W * (R * N + i));
    CHECK_MSG(ok, "reduce_scatter");
    free(send);

    int mine[3] = {R, R * R, -R}, *all = malloc(sizeof(int) * 3 * (size_t)W);
    c->ops->all_gather(c, mine, all, sizeof mine, "test.all_gather");
    ok = 1;
    for (int r = 0; r < W; r++) ok &= all[3 * r] == r && all[3 * r + 1] == r * r && all[3 * r + 2] == -r;
    CHECK_MSG(ok, "all_gather");
    free(all);

    /* all_to_all_v: rank R sends (R + 1) * (d + 1) bytes of value R*16+d to rank d */
    size_t *v = calloc(4 * (size_t)W, sizeof *v), *sb = v, *so = v + W, *rb = v + 2 * W, *ro = v + 3 * W;
    size_t ns = 0, nr = 0;
    for (int d = 0; d < W; d++) {
        sb[d] = (size_t)(R + 1) * (size_t)(d + 1);
        so[d] = ns;
        ns += sb[d];
        rb[d] = (size_t)(d + 1) * (size_t)(R + 1);
        ro[d] = nr;
        nr += rb[d];
    }
    unsigned char *sbuf = malloc(ns + 1), *rbuf = malloc(nr + 1);
    for (int d = 0; d < W; d++) memset(sbuf + so[d], R * 16 + d, sb[d]);
    c->ops->all_to_all_v(c, sbuf, sb, so, rbuf, rb, ro, "test.all_to_all_v");
    ok = 1;
    for (int s = 0; s < W; s++)
        for (size_t i = 0; i < rb[s]; i++) ok &= rbuf[ro[s] + i] == (unsigned char)(s * 16 + R);
    CHECK_MSG(ok, "all_to_all_v");
    free(sbuf);
    free(rbuf);
    free(v);
    c->ops->barrier(c, "test.barrier");
}

/* Routing that any rank can recompute for any (origin rank, token): top_k
 * distinct experts from a hash, weights 1/(j+1). */
static uint32_t mix(uint32_t x)
{
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

static void route(int origin, int t, int top_k, int n_experts, int32_t *ids, float *w)
{
    for (int j = 0; j < top_k; j++) {
        int e;
        uint32_t salt = 0;
        for (;;) {
            e = (int)(mix((uint32_t)(origin * 7919 + t * 131 + j * 17) + salt++) % (uint32_t)n_experts);
            int dup = 0;
            for (int i = 0; i < j; i++) dup |= ids[i] == e;
            if (!dup) break;
        }
        ids[j] = e;
        w[j] = 1.0f / (float)(j + 1);
    }
}

enum { DIM = 6 };

static float cell(int origin, int t, int d)
{
    return d == 0 ? (float)origin : d == 1 ? (float)t : (float)(origin * 37 + t * 3 + d) * 0.25f;
}

static void test_dispatch(struct k3_comm *c, int n_experts, int top_k, int n_tok_base)
{
    int W = c->size, R = c->rank;
    struct k3_moe_layout l;
    k3_moe_layout_init(&l, n_experts, W, R);
    /* Ranks hold different numbers of tokens; rank 1 is idle (an attention
     * group with nothing to do still takes part in the collectives). */
    int n_tok = R == 1 ? 0 : n_tok_base + 3 * R;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_tok * top_k + 1));
    float *w = malloc(sizeof(float) * (size_t)(n_tok * top_k + 1));
    float *x = malloc(sizeof(float) * (size_t)(n_tok * DIM + 1));
    for (int t = 0; t < n_tok; t++) {
        route(R, t, top_k, n_experts, ids + t * top_k, w + t * top_k);
        for (int d = 0; d < DIM; d++) x[t * DIM + d] = cell(R, t, d);
    }
    for (int step = 0; step < 3; step++) { /* reuse of the layout's buffers */
        k3_moe_plan(&l, c, ids, w, n_tok, top_k, "test.moe.plan");
        float *recv = malloc(sizeof(float) * (l.n_recv * DIM + 1));
        k3_moe_dispatch(&l, c, x, sizeof(float) * DIM, recv, "test.moe.dispatch");
        /* every received row proves its origin; its slots are exactly the
         * origin's choices that this rank owns, in the origin's order */
        int ok_rows = 1, ok_slots = 1;
        long long pairs = 0;
        char *seen = calloc(4096, 1);
        for (int s = 0; s < W; s++) {
            for (size_t i = l.recv_first[s]; i < l.recv_first[s] + l.recv_rows[s]; i++) {
                const float *row = recv + i * DIM;
                int t = (int)row[1];
                ok_rows &= row[0] == (float)s && t >= 0 && t < 4096 / W;
                for (int d = 0; d < DIM; d++) ok_rows &= row[d] == cell(s, t, d);
                ok_rows &= !seen[s * (4096 / W) + t]; /* at most once per receiver */
                seen[s * (4096 / W) + t] = 1;
                int32_t want_ids[64];
                float want_w[64];
                route(s, t, top_k, n_experts, want_ids, want_w);
                int k = 0;
                for (int j = 0; j < top_k; j++) {
                    if (k3_moe_owner(&l, want_ids[j]) != R) continue;
                    const struct k3_moe_slot *sl = &l.recv_slots[i * (size_t)top_k + (size_t)k++];
                    ok_slots &= sl->expert == want_ids[j] && sl->weight == want_w[j];
                    ok_slots &= k3_moe_local(&l, sl->expert) >= 0 &&
                                k3_moe_local(&l, sl->expert) < k3_moe_n_local(&l);
                    pairs++;
                }
                ok_slots &= k > 0;
                for (int j = k; j < top_k; j++) ok_slots &= l.recv_slots[i * (size_t)top_k + (size_t)j].expert == -1;
            }
        }
        free(seen);
        CHECK_MSG(ok_rows, "received rows prove their origin (rank %d)", R);
        CHECK_MSG(ok_slots, "received slots match the origin's routing (rank %d)", R);
        /* every token-expert pair arrives exactly once: totals agree */
        long long sent = (long long)n_tok * top_k, tot[2], mine[2] = {sent, pairs};
        K3_CHECK_MPI(MPI_Allreduce(mine, tot, 2, MPI_LONG_LONG, MPI_SUM, job.world_comm));
        CHECK_MSG(tot[0] == tot[1], "pairs sent %lld, received %lld", tot[0], tot[1]);
        /* each token reaches each destination rank once: rows == distinct ranks */
        size_t want_rows = 0;
        for (int t = 0; t < n_tok; t++)
            for (int r = 0; r < W; r++) {
                int hit = 0;
                for (int j = 0; j < top_k; j++) hit |= k3_moe_owner(&l, ids[t * top_k + j]) == r;
                want_rows += (size_t)hit;
            }
        CHECK(l.n_send == want_rows);
        /* identity experts: each row returns x * (sum of its weights here) */
        float *y = malloc(sizeof(float) * (l.n_recv * DIM + 1));
        for (size_t i = 0; i < l.n_recv; i++) {
            float ws = 0;
            for (int j = 0; j < top_k; j++)
                if (l.recv_slots[i * (size_t)top_k + (size_t)j].expert >= 0)
                    ws += l.recv_slots[i * (size_t)top_k + (size_t)j].weight;
            for (int d = 0; d < DIM; d++) y[i * DIM + d] = recv[i * DIM + d] * ws;
        }
        float *out = malloc(sizeof(float) * (size_t)(n_tok * DIM + 1));
        k3_moe_combine(&l, c, y, DIM, out, "test.moe.combine");
        double worst = 0;
        for (int t = 0; t < n_tok; t++) {
            double ws = 0;
            for (int j = 0; j < top_k; j++) ws += w[t * top_k + j];
            for (int d = 0; d < DIM; d++) {
                double want = (double)x[t * DIM + d] * ws;
                double err = fabs(out[t * DIM + d] - want) / (fabs(want) + 1e-30);
                if (err > worst) worst = err;
            }
        }
        /* fp32 sums of up to top_k partials: a few ulps */
        CHECK_MSG(worst < 1e-6, "combine of identity experts: worst relative error %g", worst);
        free(y);
        free(out);
        free(recv);
    }
    free(ids);
    free(w);
    free(x);
    k3_moe_layout_free(&l);
}

int main(int argc, char **argv)
{
    k3_job_init(&job, &argc, &argv);
    struct k3_comm c;
    if (argc > 1 && !strcmp(argv[1], "timeout")) {
        k3_comm_init_mpi(&c, job.world_comm, 2);
        float v = 1;
        if (job.rank == 1) sleep(30); /* never joins in time */
        c.ops->all_reduce(&c, &v, 1, K3_DTYPE_F32, "test.stuck");
        k3_comm_free(&c);
        k3_job_free(&job);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "die")) {
        k3_comm_init_mpi(&c, job.world_comm, 10);
        float v = 1;
        if (job.rank == 1) raise(SIGKILL);
        c.ops->all_reduce(&c, &v, 1, K3_DTYPE_F32, "test.dead_peer");
        k3_comm_free(&c);
        k3_job_free(&job);
        return 0;
    }
    k3_comm_init_mpi(&c, job.world_comm, 60);
    test_groups();
    test_collectives(&c);
    test_dispatch(&c, 16, 4, 5);     /* experts divide evenly for W = 1, 2, 4 */
    test_dispatch(&c, 13, 3, 9);     /* uneven: the last rank owns fewer (or none) */
    test_dispatch(&c, 896, 16, 20);  /* the K3 shape */
    k3_comm_free(&c);
    int rc = k3_test_summary_all(job.world_comm);
    k3_job_free(&job);
    return rc;
}
