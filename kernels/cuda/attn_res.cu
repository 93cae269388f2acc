/* attn_res.cu - Block AttnRes mix (ops.h; model-architecture.md §3.3), one
 * block per token, optionally fused with the following RMSNorm.
 *
 * Per candidate j: two block sums (Σv², Σv·q) give the score
 * s_j = (v·q) / sqrt(mean(v²) + eps); the softmax over the ≤ 64 scores is
 * done by every thread redundantly (no extra sync); then each thread writes
 * its columns of Σ α_j V_j. The fused norm sums the squares of what this
 * thread just wrote and rescales its own columns in a second sweep (the
 * values come back from L1; no other thread touches them).
 * fp32 partials and tree sums instead of the reference's fp64: the op is
 * bandwidth-bound and GB300 has little fp64; the op test bounds the effect.
 * Candidate pointers travel in the kernel's parameter block (≤ 64 × 8 B). */
#include "kernels/cuda/attn_res.h"

#include <string.h>

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

#define ATTN_RES_MAX_CAND 64
#define ATTN_RES_THREADS 256

struct attn_res_args {
    const float *cand[ATTN_RES_MAX_CAND];
    int n_cand;
    const float *q;
    float *out;
    int64_t d;
    float eps;
    const float *norm_w;
    float *normed;
    float norm_eps;
};

static __global__ void attn_res_kernel(struct attn_res_args a)
{
    __shared__ float sh[32];
    __shared__ float score[ATTN_RES_MAX_CAND];
    int64_t t = blockIdx.x, d = a.d;
    for (int j = 0; j < a.n_cand; j++) {
        const float *v = a.cand[j] + t * d;
        float ss = 0.0f, dq = 0.0f;
        for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
            float x = v[c];
            ss += x * x;
            dq += x * a.q[c];
        }
        ss = k3_block_sum(ss, sh);
        dq = k3_block_sum(dq, sh);
        if (threadIdx.x == 0) score[j] = dq / sqrtf(ss / (float)d + a.eps);
    }
    __syncthreads();
    float mx = -INFINITY, sum = 0.0f, alpha[ATTN_RES_MAX_CAND];
    for (int j = 0; j < a.n_cand; j++) mx = fmaxf(mx, score[j]);
    for (int j = 0; j < a.n_cand; j++) {
        alpha[j] = expf(score[j] - mx);
        sum += alpha[j];
    }
    float inv_sum = 1.0f / sum;
    float *o = a.out + t * d;
    float ss_out = 0.0f;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < a.n_cand; j++) acc += alpha[j] * a.cand[j][t * d + c];
        acc *= inv_sum;
        o[c] = acc;
        ss_out += acc * acc;
    }
    if (!a.normed) return;   /* uniform across the block: no thread waits in a sync */
    ss_out = k3_block_sum(ss_out, sh);
    float inv = 1.0f / sqrtf(ss_out / (float)d + a.norm_eps);
    float *y = a.normed + t * d;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float v = o[c] * inv;
        y[c] = a.norm_w ? v * a.norm_w[c] : v;
    }
}

static void launch(const struct k3_attn_res_params *p, const float *norm_w, float *normed,
                   double norm_eps, cudaStream_t s)
{
    K3_CHECK(p->n_cand >= 1 && p->n_cand <= ATTN_RES_MAX_CAND, "%d AttnRes candidates (max %d)",
             p->n_cand, ATTN_RES_MAX_CAND);
    if (p->n <= 0 || p->d <= 0) return;
    struct attn_res_args a;
    memset(&a, 0, sizeof a);
    for (int j = 0; j < p->n_cand; j++) a.cand[j] = p->cand[j];
    a.n_cand = p->n_cand;
    a.q = p->q;
    a.out = p->out;
    a.d = p->d;
    a.eps = (float)p->eps;
    a.norm_w = norm_w;
    a.normed = normed;
    a.norm_eps = (float)norm_eps;
    int threads = p->d >= ATTN_RES_THREADS ? ATTN_RES_THREADS : (int)((p->d + 31) / 32 * 32);
    attn_res_kernel<<<k3_grid_rows(p->n), threads, 0, s>>>(a);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_attn_res_launch(const struct k3_attn_res_params *p, cudaStream_t s)
{
    launch(p, NULL, NULL, 0.0, s);
}

extern "C" void k3_cuda_attn_res_norm_launch(const struct k3_attn_res_norm_params *p,
                                             cudaStream_t s)
{
    K3_CHECK(p->normed, "attn_res_norm without an output for the norm");
    launch(&p->mix, p->norm_w, p->normed, p->norm_eps, s);
}

extern "C" void k3_cuda_attn_res(struct k3_backend *be, const struct k3_attn_res_params *p)
{
    k3_cuda_attn_res_launch(p, k3_cuda_impl(be)->stream);
}

extern "C" void k3_cuda_attn_res_norm(struct k3_backend *be,
                                      const struct k3_attn_res_norm_params *p)
{
    k3_cuda_attn_res_norm_launch(p, k3_cuda_impl(be)->stream);
}
