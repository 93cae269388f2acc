/* bench_comm.c - the communication layer of K3 at its real sizes, with
 * correctness measured in the same run.
 *
 *   mpirun -np N bench_comm [--comm mpi|staged|nccl] [--tp T] [--json]
 *       [--tokens 1,8,64,512,4096] [--tp-tokens 1,8,64,512,4096,8192]
 *       [--routing uniform,zipf] [--reps 20] [--dim 3584] [--tp-dim 7168]
 *       [--experts 896] [--topk 16] [--combine bf16|f32] [--skip-moe] [--skip-tp]
 *
 * Two tables:
 *  1. MoE dispatch/combine over all N ranks (expert parallelism), bf16 rows
 *     of the latent width, top-k of E experts per token, routing uniform or
 *     Zipf (s = 1, expert 0 hottest: the ranks owning the first experts get
 *     most rows). Columns: the plan (layout + counts, host), dispatch and
 *     combine with their GB/s, and the baseline that moves the same rows
 *     without a plan: all_gather of every rank's rows + reduce_scatter of the
 *     [N * n_tok, dim] bf16 outputs; ratio = baseline / (dispatch + combine).
 *  2. TP all-reduce and reduce-scatter of [n_tok, 7168] rows (f32 and bf16)
 *     in groups of T ranks (--tp, default N), nccl-tests' algbw and busbw.
 *
 * Correctness (#wrong, summed over ranks; the exit code is 1 if any):
 *  - every row is origin-encoded: elements 0-2 hold (source rank, token / 64,
 *    token % 64), exact in bf16, the rest are a hash of (rank, token, column);
 *    a received row must decode to its source block's rank and match the hash
 *    everywhere, and its expert slots must be exactly that token's experts on
 *    this rank (the receiver recomputes the origin's routing);
 *  - the experts are identities: a received row becomes s * x with s the sum
 *    of its slots' weights (rounded to bf16 if the combine is bf16), so token
 *    t must come back as the sum over destination ranks, in rank order, of
 *    those partials: bitwise, recomputed on the host;
 *  - all_gather rows decode to their rank and token; reduce_scatter and
 *    all-reduce inputs are small integers whose sums are exact in bf16.
 *
 * Timing: a barrier, then the call, MPI_Wtime on the host path or CUDA events
 * on the communicator's stream on the device paths (the device calls return
 * after completion, so both see the whole collective); per sample the
 * slowest rank counts; median of --reps samples after 3 warm-up calls.
 * Device paths (built with -DK3_CUDA=ON): `staged` (MPI through pinned host
 * memory; several ranks may share a GPU) and `nccl` (one rank per GPU). The
 * device dispatch packs rows with kernels/cuda/moe_pack.cu, handed to
 * mpi/moe_dispatch_dev.c as function pointers (mpi/ does not see kernels/). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dtype.h"
#include "core/err.h"
#include "core/log.h"
#include "mpi/bootstrap.h"
#include "mpi/comm.h"
#include "mpi/groups.h"
#include "mpi/moe_dispatch.h"
#include "mpi/mpi_check.h"

#ifdef K3_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_pack.h"
#include "mpi/comm_staged.h"
#include "mpi/moe_dispatch_dev.h"
#endif

#define MAX_LIST 32

struct opts {
    const char *comm;
    int tp, json, reps, warmup, dim, tp_dim, n_experts, top_k, skip_moe, skip_tp;
    enum k3_dtype combine_t;
    int tokens[MAX_LIST], n_tokens, tp_tokens[MAX_LIST], n_tp_tokens;
    int zipf[2], n_routing;   /* routing modes: 0 uniform, 1 zipf */
};

struct bench {
    struct opts o;
    struct k3_job job;
    struct k3_groups g;
    struct k3_comm host;      /* MPI over the world, host buffers: plans, barriers */
    struct k3_comm ep;        /* the benchmarked communicator over the world */
    struct k3_comm tpc;       /* the benchmarked communicator over this rank's TP group */
    int dev;                  /* buffers live on the GPU */
    double *zipf_cdf;         /* [n_experts] */
#ifdef K3_HAVE_NCCL
    cudaStream_t stream;
    cudaEvent_t e0, e1;
    struct k3_moe_dev md;
#endif
    long wrong_total;
};

/* ---- buffers: host or device -------------------------------------------- */

static void *buf_alloc(struct bench *b, size_t bytes)
{
    void *p = NULL;
#ifdef K3_HAVE_NCCL
    if (b->dev) {
        K3_CHECK_CUDA(cudaMalloc(&p, bytes ? bytes : 1));
        return p;
    }
#endif
    (void)b;
    p = malloc(bytes ? bytes : 1);
    K3_CHECK(p, "out of memory (%zu bytes)", bytes);
    return p;
}
static void buf_free(struct bench *b, void *p)
{
#ifdef K3_HAVE_NCCL
    if (b->dev) {
        K3_CHECK_CUDA(cudaFree(p));
        return;
    }
#endif
    (void)b;
    free(p);
}
/* host -> buffer, buffer -> host; synchronous */
static void buf_put(struct bench *b, void *dst, const void *src, size_t bytes)
{
#ifdef K3_HAVE_NCCL
    if (b->dev) {
        K3_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->stream));
        K3_CHECK_CUDA(cudaStreamSynchronize(b->stream));
        return;
    }
#endif
    (void)b;
    memcpy(dst, src, bytes);
}
static void buf_get(struct bench *b, void *dst, const void *src, size_t bytes)
{
#ifdef K3_HAVE_NCCL
    if (b->dev) {
        K3_CHECK_CUDA(cudaStreamSynchronize(b->stream));
        K3_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
        return;
    }
#endif
    (void)b;
    memcpy(dst, src, bytes);
}

/* ---- timing -------------------------------------------------------------- */

typedef void (*op_fn)(struct bench *b, void *ctx);

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

/* Median over reps samples of the slowest rank's time, in µs. */
static double time_us(struct bench *b, op_fn fn, void *ctx)
{
    for (int i = 0; i < b->o.warmup; i++) fn(b, ctx);
    double *t = malloc(sizeof(double) * (size_t)b->o.reps);
    K3_CHECK(t, "out of memory");
    for (int i = 0; i < b->o.reps; i++) {
        b->host.ops->barrier(&b->host, "bench.sample");
        double us;
#ifdef K3_HAVE_NCCL
        if (b->dev) {
            K3_CHECK_CUDA(cudaEventRecord(b->e0, b->stream));
            fn(b, ctx);
            K3_CHECK_CUDA(cudaEventRecord(b->e1, b->stream));
            K3_CHECK_CUDA(cudaEventSynchronize(b->e1));
            float ms;
            K3_CHECK_CUDA(cudaEventElapsedTime(&ms, b->e0, b->e1));
            us = 1e3 * ms;
        } else
#endif
        {
            double t0 = MPI_Wtime();
            fn(b, ctx);
            us = 1e6 * (MPI_Wtime() - t0);
        }
        K3_CHECK_MPI(MPI_Allreduce(&us, &t[i], 1, MPI_DOUBLE, MPI_MAX, b->job.world_comm));
    }
    qsort(t, (size_t)b->o.reps, sizeof(double), cmp_d);
    double med = t[b->o.reps / 2];
    free(t);
    return med;
}

static long sum_world(struct bench *b, long v)
{
    long s;
    K3_CHECK_MPI(MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, b->job.world_comm));
    return s;
}
static double mean_world(struct bench *b, double v)
{
    double s;
    K3_CHECK_MPI(MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, b->job.world_comm));
    return s / b->job.world;
}

/* ---- origin-encoded rows and deterministic routing ---------------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}
static double u01(uint64_t *s)
{
    *s = mix(*s + 0x9e3779b97f4a7c15ull);
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* Element d of token t of rank r, as bf16 bits. */
static uint16_t enc(int r, int t, int d)
{
    if (d == 0) return k3_f32_to_bf16((float)r);
    if (d == 1) return k3_f32_to_bf16((float)(t >> 6));
    if (d == 2) return k3_f32_to_bf16((float)(t & 63));
    uint64_t h = mix(((uint64_t)r << 40) ^ ((uint64_t)t << 20) ^ (uint64_t)d);
    return k3_f32_to_bf16((float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0));
}
static void enc_row(uint16_t *row, int r, int t, int dim)
{
    for (int d = 0; d < dim; d++) row[d] = enc(r, t, d);
}

/* The top-k of token t on rank r: distinct experts, weights in (0.05, 1]. */
static void route(const struct bench *b, int mode, int r, int t, int32_t *ids, float *w)
{
    int E = b->o.n_experts, K = b->o.top_k;
    uint64_t s = mix(((uint64_t)(mode + 1) << 56) ^ ((uint64_t)r << 32) ^ (uint64_t)t);
    for (int j = 0; j < K; j++) {
        int e, dup;
        do {
            if (mode == 0) {
                e = (int)(u01(&s) * E);
                if (e >= E) e = E - 1;
            } else {   /* inverse CDF by binary search */
                double u = u01(&s);
                int lo = 0, hi = E - 1;
                while (lo < hi) {
                    int mid = (lo + hi) / 2;
                    if (b->zipf_cdf[mid] < u) lo = mid + 1;
                    else hi = mid;
                }
                e = lo;
            }
            dup = 0;
            for (int i = 0; i < j; i++) dup |= ids[i] == e;
        } while (dup);
        ids[j] = e;
        w[j] = (float)(0.05 + 0.95 * u01(&s));
    }
}

/* ---- MoE dispatch / combine --------------------------------------------- */

struct moe_ctx {
    struct k3_moe_layout l;
    int n_tok, mode;
    size_t row_bytes;
    int32_t *ids;
    float *w;
    void *x, *recv, *y, *out;       /* benchmarked buffers (host or device) */
    void *ag, *rs_in, *rs_out;      /* baseline */
    float *scale;                   /* [n_recv] identity expert's factor; device copy on GPU */
};

static void op_plan(struct bench *b, void *p)
{
    struct moe_ctx *m = p;
    k3_moe_plan(&m->l, &b->host, m->ids, m->w, m->n_tok, b->o.top_k, "bench.moe.plan");
#ifdef K3_HAVE_NCCL
    if (b->dev) k3_moe_dev_upload_plan(&b->md, &m->l);
#endif
}
static void op_dispatch(struct bench *b, void *p)
{
    struct moe_ctx *m = p;
#ifdef K3_HAVE_NCCL
    if (b->dev) {
        k3_moe_dev_dispatch(&b->md, &m->l, &b->ep, m->x, m->row_bytes, m->recv, "bench.moe.dispatch");
        return;
    }
#endif
    k3_moe_dispatch(&m->l, &b->ep, m->x, m->row_bytes, m->recv, "bench.moe.dispatch");
}
static void op_combine(struct bench *b, void *p)
{
    struct moe_ctx *m = p;
#ifdef K3_HAVE_NCCL
    if (b->dev) {
        k3_moe_dev_combine(&b->md, &m->l, &b->ep, m->y, b->o.combine_t, b->o.dim, m->out,
                           "bench.moe.combine");
        return;
    }
#endif
    k3_moe_combine(&m->l, &b->ep, m->y, b->o.dim, m->out, "bench.moe.combine");
}
static void op_all_gather(struct bench *b, void *p)
{
    struct moe_ctx *m = p;
    b->ep.ops->all_gather(&b->ep, m->x, m->ag, (size_t)m->n_tok * m->row_bytes, "bench.moe.ag");
}
static void op_reduce_scatter(struct bench *b, void *p)
{
    struct moe_ctx *m = p;
    b->ep.ops->reduce_scatter(&b->ep, m->rs_in, m->rs_out, (size_t)m->n_tok * (size_t)b->o.dim,
                              K3_DTYPE_BF16, "bench.moe.rs");
}

/* Small integers, exact in bf16 and in their sums over <= 64 ranks. */
static float small_int(size_t i, int r) { return (float)((int)((i * 7 + (size_t)r * 3) % 17) - 8); }

/* The identity experts on the received rows: y = s * x. */
static void identity_experts(struct bench *b, struct moe_ctx *m, const uint16_t *recv_h)
{
    int K = b->o.top_k, dim = b->o.dim;
    size_t n = m->l.n_recv;
    float *s = malloc(sizeof(float) * (n ? n : 1));
    K3_CHECK(s, "out of memory");
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (int j = 0; j < K; j++)
            if (m->l.recv_slots[i * (size_t)K + (size_t)j].expert >= 0)
                acc += m->l.recv_slots[i * (size_t)K + (size_t)j].weight;
        s[i] = acc;
    }
#ifdef K3_HAVE_NCCL
    if (b->dev) {
        buf_put(b, m->scale, s, sizeof(float) * n);
        k3_moe_scale_launch(&(struct k3_moe_scale_params){m->recv, m->scale, m->y, b->o.combine_t,
                                                          (int64_t)n, dim}, b->stream);
        K3_CHECK_CUDA(cudaStreamSynchronize(b->stream));
        free(s);
        return;
    }
#endif
    float *y = m->y;
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < dim; d++)
            y[i * (size_t)dim + (size_t)d] = s[i] * k3_bf16_to_f32(recv_h[i * (size_t)dim + (size_t)d]);
    free(s);
}

/* Received rows wrong: payload, origin, or expert slots. */
static long check_dispatch(struct bench *b, struct moe_ctx *m, const uint16_t *recv_h, int mode)
{
    int K = b->o.top_k, dim = b->o.dim, W = b->job.world;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)K);
    float *w = malloc(sizeof(float) * (size_t)K);
    uint16_t *want = malloc(sizeof(uint16_t) * (size_t)dim);
    long bad = 0;
    for (int src = 0; src < W; src++) {
        int prev = -1;
        for (size_t i = m->l.recv_first[src]; i < m->l.recv_first[src] + m->l.recv_rows[src]; i++) {
            const uint16_t *row = recv_h + i * (size_t)dim;
            float f0 = k3_bf16_to_f32(row[0]), f1 = k3_bf16_to_f32(row[1]), f2 = k3_bf16_to_f32(row[2]);
            int t = (int)f1 * 64 + (int)f2;
            /* from src, a token we had not seen yet from src, in token order */
            if (f0 != (float)src || t <= prev || t < 0 || f1 != (float)(int)f1) {
                bad++;
                continue;
            }
            prev = t;
            enc_row(want, src, t, dim);
            int ok = !memcmp(want, row, sizeof(uint16_t) * (size_t)dim);
            route(b, mode, src, t, ids, w);
            int n_mine = 0;
            for (int j = 0; j < K; j++) {
                if (k3_moe_owner(&m->l, ids[j]) != b->job.rank) continue;
                const struct k3_moe_slot *sl = &m->l.recv_slots[i * (size_t)K + (size_t)n_mine++];
                ok &= sl->expert == ids[j] && sl->weight == w[j];
            }
            ok &= n_mine > 0;
            for (int j = n_mine; j < K; j++) ok &= m->l.recv_slots[i * (size_t)K + (size_t)j].expert == -1;
            bad += !ok;
        }
    }
    free(ids);
    free(w);
    free(want);
    return bad;
}

/* Tokens whose combined row is not bitwise the expected sum. */
static long check_combine(struct bench *b, struct moe_ctx *m, const float *out_h)
{
    int K = b->o.top_k, dim = b->o.dim, W = b->job.world;
    int bf16 = b->dev && b->o.combine_t == K3_DTYPE_BF16;
    float *sr = malloc(sizeof(float) * (size_t)W);
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)dim);
    long bad = 0;
    for (int t = 0; t < m->n_tok; t++) {
        const int32_t *ids = m->ids + (size_t)t * (size_t)K;
        const float *w = m->w + (size_t)t * (size_t)K;
        int any_r[64] = {0};
        for (int r = 0; r < W; r++) sr[r] = 0.0f;
        for (int j = 0; j < K; j++) {
            int r = k3_moe_owner(&m->l, ids[j]);
            sr[r] += w[j];
            if (r < 64) any_r[r] = 1;
        }
        enc_row(x, b->job.rank, t, dim);
        int ok = 1;
        for (int d = 0; d < dim && ok; d++) {
            float acc = 0.0f, xf = k3_bf16_to_f32(x[d]);
            for (int r = 0; r < W; r++) {
                if (r < 64 && !any_r[r]) continue;
                float p = sr[r] * xf;
                if (bf16) p = k3_bf16_to_f32(k3_f32_to_bf16(p));
                acc += p;
            }
            ok = out_h[(size_t)t * (size_t)dim + (size_t)d] == acc;
        }
        bad += !ok;
    }
    free(sr);
    free(x);
    return bad;
}

static void moe_header(struct bench *b)
{
    if (b->o.json || b->job.rank) return;
    printf("# MoE dispatch/combine: comm %s, %d rank(s), rows [n_tok, %d] bf16 (%d bytes), "
           "top-%d of %d experts, combine %s\n", b->ep.kind, b->job.world, b->o.dim,
           2 * b->o.dim, b->o.top_k, b->o.n_experts, b->dev ? k3_dtype_name(b->o.combine_t) : "f32");
    printf("# rows/rank: rows each rank sends (a token goes to a rank once); GB/s: those rows' "
           "bytes / time; baseline: all_gather of the rows + reduce_scatter of [N*n_tok, %d] "
           "bf16; ratio = (ag + rs) / (dispatch + combine)\n", b->o.dim);
    printf("# %8s %8s %10s %10s %10s %8s %10s %8s %10s %10s %8s %7s %7s\n", "tok/rank",
           "routing", "rows/rank", "plan", "dispatch", "", "combine", "", "all_gath", "red_scat",
           "", "ratio", "#wrong");
    printf("# %8s %8s %10s %10s %10s %8s %10s %8s %10s %10s %8s %7s %7s\n", "", "", "", "(us)",
           "(us)", "(GB/s)", "(us)", "(GB/s)", "(us)", "(us)", "(GB/s)", "", "");
}

static void bench_moe(struct bench *b, int n_tok, int mode)
{
    int W = b->job.world, R = b->job.rank, K = b->o.top_k, dim = b->o.dim;
    struct moe_ctx m = {0};
    m.n_tok = n_tok;
    m.mode = mode;
    m.row_bytes = sizeof(uint16_t) * (size_t)dim;
    k3_moe_layout_init(&m.l, b->o.n_experts, W, R);
    m.ids = malloc(sizeof(int32_t) * (size_t)n_tok * (size_t)K);
    m.w = malloc(sizeof(float) * (size_t)n_tok * (size_t)K);
    uint16_t *xh = malloc(m.row_bytes * (size_t)n_tok);
    K3_CHECK(m.ids && m.w && xh, "out of memory");
    for (int t = 0; t < n_tok; t++) {
        route(b, mode, R, t, m.ids + (size_t)t * (size_t)K, m.w + (size_t)t * (size_t)K);
        enc_row(xh + (size_t)t * (size_t)dim, R, t, dim);
    }
    size_t max_recv = (size_t)W * (size_t)n_tok;   /* rows: each source sends a token once */
    size_t y_elt = b->dev ? k3_dtype_bytes(b->o.combine_t) : sizeof(float);
    m.x = buf_alloc(b, m.row_bytes * (size_t)n_tok);
    m.recv = buf_alloc(b, m.row_bytes * max_recv);
    m.y = buf_alloc(b, y_elt * (size_t)dim * max_recv);
    m.out = buf_alloc(b, sizeof(float) * (size_t)dim * (size_t)n_tok);
    m.ag = buf_alloc(b, m.row_bytes * max_recv);
    m.rs_in = buf_alloc(b, m.row_bytes * max_recv);
    m.rs_out = buf_alloc(b, m.row_bytes * (size_t)n_tok);
    m.scale = buf_alloc(b, sizeof(float) * max_recv);
    buf_put(b, m.x, xh, m.row_bytes * (size_t)n_tok);

    /* plan, then one checked round trip */
    double plan_us = time_us(b, op_plan, &m);
    op_plan(b, &m);
    op_dispatch(b, &m);
    uint16_t *recv_h = malloc(m.row_bytes * (m.l.n_recv ? m.l.n_recv : 1));
    buf_get(b, recv_h, m.recv, m.row_bytes * m.l.n_recv);
    long wrong_d = check_dispatch(b, &m, recv_h, mode);
    identity_experts(b, &m, recv_h);
    op_combine(b, &m);
    float *out_h = malloc(sizeof(float) * (size_t)dim * (size_t)n_tok);
    buf_get(b, out_h, m.out, sizeof(float) * (size_t)dim * (size_t)n_tok);
    long wrong_c = check_combine(b, &m, out_h);

    /* baseline, checked */
    size_t rs_n = (size_t)W * (size_t)n_tok * (size_t)dim;
    uint16_t *rsh = malloc(sizeof(uint16_t) * rs_n);
    for (size_t i = 0; i < rs_n; i++) rsh[i] = k3_f32_to_bf16(small_int(i, R));
    buf_put(b, m.rs_in, rsh, sizeof(uint16_t) * rs_n);
    op_all_gather(b, &m);
    op_reduce_scatter(b, &m);
    uint16_t *agh = malloc(m.row_bytes * max_recv);
    buf_get(b, agh, m.ag, m.row_bytes * max_recv);
    buf_get(b, rsh, m.rs_out, m.row_bytes * (size_t)n_tok);
    long wrong_b = 0;
    uint16_t *want = malloc(m.row_bytes);
    for (int r = 0; r < W; r++)
        for (int t = 0; t < n_tok; t++) {
            enc_row(want, r, t, dim);
            wrong_b += memcmp(want, agh + ((size_t)r * (size_t)n_tok + (size_t)t) * (size_t)dim,
                              m.row_bytes) != 0;
        }
    size_t cnt = (size_t)n_tok * (size_t)dim;
    for (size_t i = 0; i < cnt; i++) {
        float acc = 0.0f;
        for (int r = 0; r < W; r++) acc += small_int((size_t)R * cnt + i, r);
        wrong_b += k3_bf16_to_f32(rsh[i]) != acc;
    }

    double disp_us = time_us(b, op_dispatch, &m);
    double comb_us = time_us(b, op_combine, &m);
    double ag_us = time_us(b, op_all_gather, &m);
    double rs_us = time_us(b, op_reduce_scatter, &m);

    double rows = mean_world(b, (double)m.l.n_send);
    double disp_gbs = rows * (double)m.row_bytes / disp_us * 1e-3;
    double comb_gbs = rows * (double)(y_elt * (size_t)dim) / comb_us * 1e-3;
    double base_bytes = (double)W * n_tok * (double)m.row_bytes * 2.0;
    double base_gbs = base_bytes / (ag_us + rs_us) * 1e-3;
    double ratio = (ag_us + rs_us) / (disp_us + comb_us);
    long wd = sum_world(b, wrong_d), wc = sum_world(b, wrong_c), wb = sum_world(b, wrong_b);
    long wrong = wd + wc + wb;
    b->wrong_total += wrong;
    const char *rname = mode ? "zipf" : "uniform";
    if (R == 0) {
        if (b->o.json)
            printf("{\"table\": \"moe\", \"comm\": \"%s\", \"ranks\": %d, \"tok_per_rank\": %d, "
                   "\"routing\": \"%s\", \"dim\": %d, \"top_k\": %d, \"experts\": %d, "
                   "\"rows_per_rank\": %.1f, \"plan_us\": %.2f, \"dispatch_us\": %.2f, "
                   "\"dispatch_GB_s\": %.2f, \"combine_us\": %.2f, \"combine_GB_s\": %.2f, "
                   "\"all_gather_us\": %.2f, \"reduce_scatter_us\": %.2f, \"baseline_GB_s\": %.2f, "
                   "\"ratio\": %.3f, \"wrong_dispatch\": %ld, \"wrong_combine\": %ld, "
                   "\"wrong_baseline\": %ld}\n", b->ep.kind, W, n_tok, rname, dim, K,
                   b->o.n_experts, rows, plan_us, disp_us, disp_gbs, comb_us, comb_gbs, ag_us,
                   rs_us, base_gbs, ratio, wd, wc, wb);
        else
            printf("  %8d %8s %10.1f %10.2f %10.2f %8.2f %10.2f %8.2f %10.2f %10.2f %8.2f %7.2f %7ld\n",
                   n_tok, rname, rows, plan_us, disp_us, disp_gbs, comb_us, comb_gbs, ag_us, rs_us,
                   base_gbs, ratio, wrong);
        fflush(stdout);
    }
    free(recv_h); free(out_h); free(rsh); free(agh); free(want); free(xh); free(m.ids); free(m.w);
    buf_free(b, m.x); buf_free(b, m.recv); buf_free(b, m.y); buf_free(b, m.out);
    buf_free(b, m.ag); buf_free(b, m.rs_in); buf_free(b, m.rs_out); buf_free(b, m.scale);
    k3_moe_layout_free(&m.l);
}

/* ---- TP all-reduce / reduce-scatter ------------------------------------- */

struct tp_ctx { void *buf, *send, *recv; size_t count; enum k3_dtype t; };

static void op_all_reduce(struct bench *b, void *p)
{
    struct tp_ctx *c = p;
    b->tpc.ops->all_reduce(&b->tpc, c->buf, c->count, c->t, "bench.tp.all_reduce");
}
static void op_tp_reduce_scatter(struct bench *b, void *p)
{
    struct tp_ctx *c = p;
    b->tpc.ops->reduce_scatter(&b->tpc, c->send, c->recv, c->count / (size_t)b->tpc.size, c->t,
                               "bench.tp.reduce_scatter");
}

static void tp_fill(void *h, size_t n, enum k3_dtype t, size_t first, int r)
{
    for (size_t i = 0; i < n; i++) {
        float v = small_int(first + i, r);
        if (t == K3_DTYPE_BF16) ((uint16_t *)h)[i] = k3_f32_to_bf16(v);
        else ((float *)h)[i] = v;
    }
}
static long tp_check(const void *h, size_t n, enum k3_dtype t, size_t first, int T)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = 0.0f;
        for (int r = 0; r < T; r++) want += small_int(first + i, r);
        float got = t == K3_DTYPE_BF16 ? k3_bf16_to_f32(((const uint16_t *)h)[i]) : ((const float *)h)[i];
        bad += got != want;
    }
    return bad;
}

static void tp_header(struct bench *b)
{
    if (b->o.json || b->job.rank) return;
    printf("# TP collectives: comm %s, %d group(s) of %d rank(s), rows [n_tok, %d]; size = bytes "
           "of one rank's [n_tok, %d] input; algbw = size / time, busbw as nccl-tests "
           "(all-reduce 2(T-1)/T, reduce-scatter (T-1)/T)\n", b->tpc.kind, b->g.adp, b->g.tp,
           b->o.tp_dim, b->o.tp_dim);
    printf("# %8s %6s %12s %12s %9s %9s %7s %12s %9s %9s %7s\n", "tokens", "type", "size",
           "all_reduce", "algbw", "busbw", "#wrong", "red_scat", "algbw", "busbw", "#wrong");
    printf("# %8s %6s %12s %12s %9s %9s %7s %12s %9s %9s %7s\n", "", "", "(B)", "(us)", "(GB/s)",
           "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static void bench_tp(struct bench *b, int n_tok, enum k3_dtype t)
{
    int T = b->tpc.size, r = b->tpc.rank;
    size_t count = (size_t)n_tok * (size_t)b->o.tp_dim, elt = k3_dtype_bytes(t), bytes = count * elt;
    K3_CHECK(count % (size_t)T == 0, "[%d, %d] does not split over %d ranks", n_tok, b->o.tp_dim, T);
    struct tp_ctx c = {buf_alloc(b, bytes), buf_alloc(b, bytes), buf_alloc(b, bytes / (size_t)T), count, t};
    void *h = malloc(bytes);
    K3_CHECK(h, "out of memory");
    tp_fill(h, count, t, 0, r);
    buf_put(b, c.buf, h, bytes);
    buf_put(b, c.send, h, bytes);
    op_all_reduce(b, &c);
    buf_get(b, h, c.buf, bytes);
    long w_ar = tp_check(h, count, t, 0, T);
    op_tp_reduce_scatter(b, &c);
    buf_get(b, h, c.recv, bytes / (size_t)T);
    long w_rs = tp_check(h, count / (size_t)T, t, (size_t)r * (count / (size_t)T), T);
    double ar_us = time_us(b, op_all_reduce, &c);
    double rs_us = time_us(b, op_tp_reduce_scatter, &c);
    w_ar = sum_world(b, w_ar);
    w_rs = sum_world(b, w_rs);
    b->wrong_total += w_ar + w_rs;
    double ar_alg = (double)bytes / ar_us * 1e-3, rs_alg = (double)bytes / rs_us * 1e-3;
    double ar_bus = ar_alg * 2.0 * (T - 1) / T, rs_bus = rs_alg * (T - 1) / T;
    if (b->job.rank == 0) {
        if (b->o.json)
            printf("{\"table\": \"tp\", \"comm\": \"%s\", \"tp\": %d, \"groups\": %d, \"tokens\": %d, "
                   "\"dim\": %d, \"type\": \"%s\", \"bytes\": %zu, \"all_reduce_us\": %.2f, "
                   "\"all_reduce_algbw\": %.2f, \"all_reduce_busbw\": %.2f, \"wrong_all_reduce\": %ld, "
                   "\"reduce_scatter_us\": %.2f, \"reduce_scatter_algbw\": %.2f, "
                   "\"reduce_scatter_busbw\": %.2f, \"wrong_reduce_scatter\": %ld}\n",
                   b->tpc.kind, T, b->g.adp, n_tok, b->o.tp_dim, k3_dtype_name(t), bytes, ar_us,
                   ar_alg, ar_bus, w_ar, rs_us, rs_alg, rs_bus, w_rs);
        else
            printf("  %8d %6s %12zu %12.2f %9.2f %9.2f %7ld %12.2f %9.2f %9.2f %7ld\n", n_tok,
                   k3_dtype_name(t), bytes, ar_us, ar_alg, ar_bus, w_ar, rs_us, rs_alg, rs_bus, w_rs);
        fflush(stdout);
    }
    free(h);
    buf_free(b, c.buf);
    buf_free(b, c.send);
    buf_free(b, c.recv);
}

/* ---- options and set-up -------------------------------------------------- */

static int parse_list(const char *s, int *out)
{
    int n = 0;
    while (*s && n < MAX_LIST) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static int parse(struct opts *o, int argc, char **argv, char *err, size_t err_bytes)
{
    static const int tok[] = {1, 8, 64, 512, 4096}, tp_tok[] = {1, 8, 64, 512, 4096, 8192};
    *o = (struct opts){.comm = "mpi", .reps = 20, .warmup = 3, .dim = 3584, .tp_dim = 7168,
                       .n_experts = 896, .top_k = 16, .combine_t = K3_DTYPE_BF16,
                       .zipf = {0, 1}, .n_routing = 2};
    memcpy(o->tokens, tok, sizeof tok);
    o->n_tokens = 5;
    memcpy(o->tp_tokens, tp_tok, sizeof tp_tok);
    o->n_tp_tokens = 6;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "--json")) { o->json = 1; takes = 0; }
        else if (!strcmp(a, "--skip-moe")) { o->skip_moe = 1; takes = 0; }
        else if (!strcmp(a, "--skip-tp")) { o->skip_tp = 1; takes = 0; }
        else if (!v) { snprintf(err, err_bytes, "%s needs a value", a); return -1; }
        else if (!strcmp(a, "--comm")) o->comm = v;
        else if (!strcmp(a, "--tp")) o->tp = atoi(v);
        else if (!strcmp(a, "--reps")) o->reps = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--dim")) o->dim = atoi(v);
        else if (!strcmp(a, "--tp-dim")) o->tp_dim = atoi(v);
        else if (!strcmp(a, "--experts")) o->n_experts = atoi(v);
        else if (!strcmp(a, "--topk")) o->top_k = atoi(v);
        else if (!strcmp(a, "--combine")) {
            if (!strcmp(v, "bf16")) o->combine_t = K3_DTYPE_BF16;
            else if (!strcmp(v, "f32")) o->combine_t = K3_DTYPE_F32;
            else { snprintf(err, err_bytes, "--combine bf16|f32, not %s", v); return -1; }
        } else if (!strcmp(a, "--tokens")) {
            if ((o->n_tokens = parse_list(v, o->tokens)) < 1) { snprintf(err, err_bytes, "bad --tokens %s", v); return -1; }
        } else if (!strcmp(a, "--tp-tokens")) {
            if ((o->n_tp_tokens = parse_list(v, o->tp_tokens)) < 1) { snprintf(err, err_bytes, "bad --tp-tokens %s", v); return -1; }
        } else if (!strcmp(a, "--routing")) {
            o->n_routing = 0;
            if (strstr(v, "uniform")) o->zipf[o->n_routing++] = 0;
            if (strstr(v, "zipf")) o->zipf[o->n_routing++] = 1;
            if (!o->n_routing) { snprintf(err, err_bytes, "--routing uniform,zipf, not %s", v); return -1; }
        } else { snprintf(err, err_bytes, "unknown option %s (see the top of bench_comm.c)", a); return -1; }
        i += takes;
    }
    if (o->reps < 1 || o->warmup < 0 || o->dim < 3 || o->tp_dim < 1 || o->top_k < 1 ||
        o->n_experts < o->top_k) {
        snprintf(err, err_bytes, "bad sizes: reps %d, dim %d, tp-dim %d, top-%d of %d", o->reps,
                 o->dim, o->tp_dim, o->top_k, o->n_experts);
        return -1;
    }
    if (strcmp(o->comm, "mpi") && strcmp(o->comm, "staged") && strcmp(o->comm, "nccl")) {
        snprintf(err, err_bytes, "--comm mpi|staged|nccl, not %s", o->comm);
        return -1;
    }
    return 0;
}

static size_t max_i(const int *v, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return (size_t)m;
}

#ifdef K3_HAVE_NCCL
static void gather_cuda(const void *src, const int32_t *idx, void *dst, int64_t n_rows,
                        size_t row_bytes, void *stream)
{
    k3_moe_gather_launch(&(struct k3_moe_gather_params){src, idx, dst, n_rows, row_bytes},
                         (cudaStream_t)stream);
}
static void combine_cuda(const void *partial, enum k3_dtype t, const int32_t *tok_first,
                         const int32_t *tok_rows, float *out, int64_t n_tok, int dim, void *stream)
{
    k3_moe_combine_launch(&(struct k3_moe_combine_params){partial, t, tok_first, tok_rows, out,
                                                          n_tok, dim}, (cudaStream_t)stream);
}
#endif

int main(int argc, char **argv)
{
    struct bench b = {0};
    k3_job_init(&b.job, &argc, &argv);
    char err[256];
    if (parse(&b.o, argc, argv, err, sizeof err)) {
        if (b.job.rank == 0) fprintf(stderr, "bench_comm: %s\n", err);
        k3_job_exit(&b.job, 2);
    }
    int W = b.job.world;
    if (b.o.tp <= 0) b.o.tp = W;
    struct k3_err gerr;
    if (W % b.o.tp || k3_groups_init(&b.g, &b.job, b.o.tp, W / b.o.tp, &gerr)) {
        if (b.job.rank == 0) fprintf(stderr, "bench_comm: --tp %d does not divide %d ranks\n", b.o.tp, W);
        k3_job_exit(&b.job, 2);
    }
    b.dev = strcmp(b.o.comm, "mpi") != 0;
#ifndef K3_HAVE_NCCL
    if (b.dev) {
        if (b.job.rank == 0) fprintf(stderr, "bench_comm: --comm %s needs a build with -DK3_CUDA=ON\n", b.o.comm);
        k3_job_exit(&b.job, 2);
    }
#endif
    b.zipf_cdf = malloc(sizeof(double) * (size_t)b.o.n_experts);
    K3_CHECK(b.zipf_cdf, "out of memory");
    double z = 0;
    for (int e = 0; e < b.o.n_experts; e++) z += 1.0 / (e + 1);
    double acc = 0;
    for (int e = 0; e < b.o.n_experts; e++) b.zipf_cdf[e] = (acc += 1.0 / (e + 1) / z);
    b.zipf_cdf[b.o.n_experts - 1] = 1.0;

    k3_comm_init_mpi(&b.host, b.job.world_comm, 120);
    size_t max_tok = max_i(b.o.tokens, b.o.n_tokens), max_tp = max_i(b.o.tp_tokens, b.o.n_tp_tokens);
    char device[320] = "CPU";
#ifdef K3_HAVE_NCCL
    if (b.dev) {
        int n_dev = 0;
        K3_CHECK_CUDA(cudaGetDeviceCount(&n_dev));
        K3_CHECK(n_dev > 0, "--comm %s needs a GPU", b.o.comm);
        int d = b.job.local_rank % n_dev;
        K3_CHECK_CUDA(cudaSetDevice(d));
        struct cudaDeviceProp prop;
        K3_CHECK_CUDA(cudaGetDeviceProperties(&prop, d));
        snprintf(device, sizeof device, "%.256s (device %d of %d visible)", prop.name, d, n_dev);
        K3_CHECK_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
        K3_CHECK_CUDA(cudaEventCreate(&b.e0));
        K3_CHECK_CUDA(cudaEventCreate(&b.e1));
        /* staging: the largest single collective of either table */
        size_t moe = (size_t)W * max_tok * (size_t)b.o.dim * 4;
        size_t tp = max_tp * (size_t)b.o.tp_dim * 4;
        size_t max_bytes = moe > tp ? moe : tp;
        if (!strcmp(b.o.comm, "nccl")) {
            k3_comm_init_nccl(&b.ep, b.job.world_comm, b.stream, 120);
            k3_comm_init_nccl(&b.tpc, b.g.tp_comm, b.stream, 120);
        } else {
            k3_comm_init_staged(&b.ep, b.job.world_comm, b.stream, max_bytes, 120);
            k3_comm_init_staged(&b.tpc, b.g.tp_comm, b.stream, max_bytes, 120);
        }
        struct k3_moe_dev_kernels k = {gather_cuda, combine_cuda};
        k3_moe_dev_init(&b.md, &k, b.stream, W, (int)max_tok, sizeof(float) * (size_t)b.o.dim);
    } else
#endif
    {
        k3_comm_init_mpi(&b.ep, b.job.world_comm, 120);
        k3_comm_init_mpi(&b.tpc, b.g.tp_comm, 120);
    }
    (void)max_tok;
    (void)max_tp;
    if (b.job.rank == 0 && !b.o.json) {
        time_t now = time(NULL);
        char date[32];
        strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
        printf("# k3 communication benchmark, %s, %d rank(s) on %d node(s), rank 0 on %s, %s\n",
               date, W, b.job.n_nodes, b.job.host, device);
        printf("# median of %d samples (slowest rank per sample) after %d warm-up; %s\n",
               b.o.reps, b.o.warmup, b.dev ? "CUDA events on the communicator's stream" : "MPI_Wtime");
    }
    if (!b.o.skip_moe) {
        moe_header(&b);
        for (int ri = 0; ri < b.o.n_routing; ri++)
            for (int i = 0; i < b.o.n_tokens; i++) bench_moe(&b, b.o.tokens[i], b.o.zipf[ri]);
    }
    if (!b.o.skip_tp) {
        tp_header(&b);
        enum k3_dtype ts[2] = {K3_DTYPE_F32, K3_DTYPE_BF16};
        for (int ti = 0; ti < 2; ti++)
            for (int i = 0; i < b.o.n_tp_tokens; i++) bench_tp(&b, b.o.tp_tokens[i], ts[ti]);
    }
    int rc = b.wrong_total ? 1 : 0;
    if (b.job.rank == 0 && !b.o.json)
        printf("# total #wrong %ld: %s\n", b.wrong_total, rc ? "FAIL" : "ok");
#ifdef K3_HAVE_NCCL
    if (b.dev) k3_moe_dev_free(&b.md);
#endif
    k3_comm_free(&b.tpc);
    k3_comm_free(&b.ep);
    k3_comm_free(&b.host);
#ifdef K3_HAVE_NCCL
    if (b.dev) {
        K3_CHECK_CUDA(cudaEventDestroy(b.e0));
        K3_CHECK_CUDA(cudaEventDestroy(b.e1));
        K3_CHECK_CUDA(cudaStreamDestroy(b.stream));
    }
#endif
    free(b.zipf_cdf);
    k3_groups_free(&b.g);
    k3_job_exit(&b.job, rc);
}
