/* attn_res.cu - Block AttnRes mix (ops.h; model-architecture.md §3.3),
 * optionally fused with the following RMSNorm. Three paths: a split over
 * many blocks per token for ≤ 32 tokens (decode; below, before launch()),
 * one block per token with a single sweep for ≤ 16 candidates, and:
 *
 * The general kernel (any n_cand ≤ 64): per candidate j, two block sums (Σv², Σv·q) give the score
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

/* The common case, n_cand ≤ 16 (K3: at most 8 block snapshots + the partial
 * sum): one sweep over the columns accumulates Σv² and Σv·q for every
 * candidate at once in registers (the candidate loop is unrolled to
 * ATTN_RES_FAST_CAND), then one block-wide reduction of all 2·n_cand sums
 * instead of 2·n_cand separate ones; float4 loads where aligned. */
#define ATTN_RES_FAST_CAND 16

template <int VEC>
static __device__ __forceinline__ void ld(const float *p, float *v)
{
    if (VEC == 4) {
        float4 q = *(const float4 *)p;
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    } else {
        v[0] = *p;
    }
}

template <int VEC>
static __device__ __forceinline__ void st(float *p, const float *v)
{
    if (VEC == 4) *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    else *p = v[0];
}

template <int VEC>
static __global__ void attn_res_fast_kernel(struct attn_res_args a)
{
    const int C = ATTN_RES_FAST_CAND;
    __shared__ float red[32][2 * ATTN_RES_FAST_CAND + 1];
    __shared__ float score[ATTN_RES_FAST_CAND];
    __shared__ float sh[32];
    int64_t t = blockIdx.x, d = a.d;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    float ss[C], dq[C];
#pragma unroll
    for (int j = 0; j < C; j++) ss[j] = dq[j] = 0.0f;
    for (int64_t c = (int64_t)threadIdx.x * VEC; c < d; c += (int64_t)blockDim.x * VEC) {
        float q[VEC];
        ld<VEC>(a.q + c, q);
#pragma unroll
        for (int j = 0; j < C; j++) {
            if (j < a.n_cand) {
                float v[VEC];
                ld<VEC>(a.cand[j] + t * d + c, v);
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    ss[j] += v[k] * v[k];
                    dq[j] += v[k] * q[k];
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < C; j++) {
        if (j < a.n_cand) {   /* uniform across the block */
            for (int o = 16; o > 0; o >>= 1) {
                ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], o);
                dq[j] += __shfl_xor_sync(0xffffffffu, dq[j], o);
            }
            if (lane == 0) {
                red[warp][j] = ss[j];
                red[warp][C + j] = dq[j];
            }
        }
    }
    __syncthreads();
    if (threadIdx.x < a.n_cand) {
        float s2 = 0.0f, sq = 0.0f;
        for (int w = 0; w < n_warp; w++) {
            s2 += red[w][threadIdx.x];
            sq += red[w][C + threadIdx.x];
        }
        score[threadIdx.x] = sq / sqrtf(s2 / (float)d + a.eps);
    }
    __syncthreads();
    float alpha[C], mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int j = 0; j < C; j++)
        if (j < a.n_cand) mx = fmaxf(mx, score[j]);
#pragma unroll
    for (int j = 0; j < C; j++) {
        alpha[j] = j < a.n_cand ? expf(score[j] - mx) : 0.0f;
        sum += alpha[j];
    }
    float inv_sum = 1.0f / sum;
    float *o = a.out + t * d;
    float ss_out = 0.0f;
    for (int64_t c = (int64_t)threadIdx.x * VEC; c < d; c += (int64_t)blockDim.x * VEC) {
        float acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
#pragma unroll
        for (int j = 0; j < C; j++) {
            if (j < a.n_cand) {
                float v[VEC];
                ld<VEC>(a.cand[j] + t * d + c, v);
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += alpha[j] * v[k];
            }
        }
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            acc[k] *= inv_sum;
            ss_out += acc[k] * acc[k];
        }
        st<VEC>(o + c, acc);
    }
    if (!a.normed) return;   /* uniform across the block */
    ss_out = k3_block_sum(ss_out, sh);
    float inv = 1.0f / sqrtf(ss_out / (float)d + a.norm_eps);
    float *y = a.normed + t * d;
    for (int64_t c = (int64_t)threadIdx.x * VEC; c < d; c += (int64_t)blockDim.x * VEC) {
        float v[VEC], w[VEC];
        ld<VEC>(o + c, v);
        if (a.norm_w) ld<VEC>(a.norm_w + c, w);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = a.norm_w ? v[k] * inv * w[k] : v[k] * inv;
        st<VEC>(y + c, v);
    }
}

/* Few tokens (decode): one block per token leaves all but n SMs idle and the
 * op latency-bound (18 µs for one 7168-wide token with 9 candidates). The
 * split path gives each token S = d/512 blocks of 128 threads, one float4 of
 * every candidate per thread: kernel 1 writes per-block partial Σv², Σv·q;
 * kernel 2 sums the S partials in a fixed order (deterministic), takes the
 * softmax and mixes its columns (and writes a partial Σout² for the norm);
 * kernel 3 (fused norm only) scales its columns. Partials go to backend
 * scratch: [n][S][33] floats. */
#define SPLIT_COLS 512
#define SPLIT_THREADS 128
#define SPLIT_STRIDE 33

static __global__ void attn_res_split_partial(struct attn_res_args a, float *part)
{
    const int C = ATTN_RES_FAST_CAND;
    __shared__ float red[SPLIT_THREADS / 32][2 * ATTN_RES_FAST_CAND];
    int64_t t = blockIdx.y, d = a.d;
    int S = gridDim.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t c = (int64_t)blockIdx.x * SPLIT_COLS + threadIdx.x * 4;
    float q[4] = {0, 0, 0, 0};
    if (c < d) ld<4>(a.q + c, q);
#pragma unroll
    for (int j = 0; j < C; j++) {
        if (j < a.n_cand) {   /* uniform */
            float v[4] = {0, 0, 0, 0};
            if (c < d) ld<4>(a.cand[j] + t * d + c, v);
            float ss = v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3];
            float dq = v[0] * q[0] + v[1] * q[1] + v[2] * q[2] + v[3] * q[3];
            for (int o = 16; o > 0; o >>= 1) {
                ss += __shfl_xor_sync(0xffffffffu, ss, o);
                dq += __shfl_xor_sync(0xffffffffu, dq, o);
            }
            if (lane == 0) {
                red[warp][j] = ss;
                red[warp][C + j] = dq;
            }
        }
    }
    __syncthreads();
    if (threadIdx.x < 2 * C && (threadIdx.x % C) < a.n_cand) {
        float sum = 0.0f;
        for (int w = 0; w < SPLIT_THREADS / 32; w++) sum += red[w][threadIdx.x];
        part[(t * S + blockIdx.x) * SPLIT_STRIDE + threadIdx.x] = sum;
    }
}

static __global__ void attn_res_split_mix(struct attn_res_args a, float *part)
{
    const int C = ATTN_RES_FAST_CAND;
    __shared__ float score[ATTN_RES_FAST_CAND];
    __shared__ float sh[32];
    int64_t t = blockIdx.y, d = a.d;
    int S = gridDim.x;
    if (threadIdx.x < a.n_cand) {
        float ss = 0.0f, dq = 0.0f;
        for (int s2 = 0; s2 < S; s2++) {   /* fixed order: the same sum in every block */
            ss += part[(t * S + s2) * SPLIT_STRIDE + threadIdx.x];
            dq += part[(t * S + s2) * SPLIT_STRIDE + C + threadIdx.x];
        }
        score[threadIdx.x] = dq / sqrtf(ss / (float)d + a.eps);
    }
    __syncthreads();
    float alpha[C], mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int j = 0; j < C; j++)
        if (j < a.n_cand) mx = fmaxf(mx, score[j]);
#pragma unroll
    for (int j = 0; j < C; j++) {
        alpha[j] = j < a.n_cand ? expf(score[j] - mx) : 0.0f;
        sum += alpha[j];
    }
    float inv_sum = 1.0f / sum;
    int64_t c = (int64_t)blockIdx.x * SPLIT_COLS + threadIdx.x * 4;
    float acc[4] = {0, 0, 0, 0};
    if (c < d) {
#pragma unroll
        for (int j = 0; j < C; j++) {
            if (j < a.n_cand) {
                float v[4];
                ld<4>(a.cand[j] + t * d + c, v);
#pragma unroll
                for (int k = 0; k < 4; k++) acc[k] += alpha[j] * v[k];
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) acc[k] *= inv_sum;
        st<4>(a.out + t * d + c, acc);
    }
    if (!a.normed) return;   /* uniform */
    float ss_out = acc[0] * acc[0] + acc[1] * acc[1] + acc[2] * acc[2] + acc[3] * acc[3];
    ss_out = k3_block_sum(ss_out, sh);
    if (threadIdx.x == 0) part[(t * S + blockIdx.x) * SPLIT_STRIDE + 2 * C] = ss_out;
}

static __global__ void attn_res_split_norm(struct attn_res_args a, const float *part)
{
    const int C = ATTN_RES_FAST_CAND;
    int64_t t = blockIdx.y, d = a.d;
    int S = gridDim.x;
    float ss = 0.0f;
    for (int s2 = 0; s2 < S; s2++) ss += part[(t * S + s2) * SPLIT_STRIDE + 2 * C];
    float inv = 1.0f / sqrtf(ss / (float)d + a.norm_eps);
    int64_t c = (int64_t)blockIdx.x * SPLIT_COLS + threadIdx.x * 4;
    if (c >= d) return;
    float v[4], w[4];
    ld<4>(a.out + t * d + c, v);
    if (a.norm_w) ld<4>(a.norm_w + c, w);
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = a.norm_w ? v[k] * inv * w[k] : v[k] * inv;
    st<4>(a.normed + t * d + c, v);
}

static void launch(const struct k3_attn_res_params *p, const float *norm_w, float *normed,
                   double norm_eps, float *scratch, size_t scratch_floats, cudaStream_t s)
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
    if (p->n_cand <= ATTN_RES_FAST_CAND) {
        int vec4 = p->d % 4 == 0 && k3_aligned16(p->q) && k3_aligned16(p->out) &&
                   (!normed || k3_aligned16(normed)) && (!norm_w || k3_aligned16(norm_w));
        for (int j = 0; j < p->n_cand; j++) vec4 = vec4 && k3_aligned16(p->cand[j]);
        int64_t S = (p->d + SPLIT_COLS - 1) / SPLIT_COLS;
        if (vec4 && scratch && p->n <= 32 && S <= 65535 &&
            (size_t)(p->n * S * SPLIT_STRIDE) <= scratch_floats) {
            dim3 grid((unsigned)S, (unsigned)p->n);
            attn_res_split_partial<<<grid, SPLIT_THREADS, 0, s>>>(a, scratch);
            K3_CHECK_LAUNCH();
            attn_res_split_mix<<<grid, SPLIT_THREADS, 0, s>>>(a, scratch);
            K3_CHECK_LAUNCH();
            if (normed) {
                attn_res_split_norm<<<grid, SPLIT_THREADS, 0, s>>>(a, scratch);
                K3_CHECK_LAUNCH();
            }
            return;
        }
        int vec = vec4 ? 4 : 1;
        int64_t units = p->d / vec;
        int threads = units >= ATTN_RES_THREADS ? ATTN_RES_THREADS : (int)((units + 31) / 32 * 32);
        if (vec4) attn_res_fast_kernel<4><<<k3_grid_rows(p->n), threads, 0, s>>>(a);
        else attn_res_fast_kernel<1><<<k3_grid_rows(p->n), threads, 0, s>>>(a);
    } else {
        int threads = p->d >= ATTN_RES_THREADS ? ATTN_RES_THREADS : (int)((p->d + 31) / 32 * 32);
        attn_res_kernel<<<k3_grid_rows(p->n), threads, 0, s>>>(a);
    }
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_attn_res_launch(const struct k3_attn_res_params *p, cudaStream_t s)
{
    launch(p, NULL, NULL, 0.0, NULL, 0, s);
}

extern "C" void k3_cuda_attn_res_norm_launch(const struct k3_attn_res_norm_params *p,
                                             cudaStream_t s)
{
    K3_CHECK(p->normed, "attn_res_norm without an output for the norm");
    launch(&p->mix, p->norm_w, p->normed, p->norm_eps, NULL, 0, s);
}

/* The backend's entry points may take the split path (they own scratch). */
extern "C" void k3_cuda_attn_res(struct k3_backend *be, const struct k3_attn_res_params *p)
{
    struct k3_cuda_backend *cb = k3_cuda_impl(be);
    launch(p, NULL, NULL, 0.0, cb->op_scratch, cb->op_scratch_floats, cb->stream);
}

extern "C" void k3_cuda_attn_res_norm(struct k3_backend *be,
                                      const struct k3_attn_res_norm_params *p)
{
    struct k3_cuda_backend *cb = k3_cuda_impl(be);
    K3_CHECK(p->normed, "attn_res_norm without an output for the norm");
    launch(&p->mix, p->norm_w, p->normed, p->norm_eps, cb->op_scratch, cb->op_scratch_floats,
           cb->stream);
}
