/* norm.cu - RMSNorm and L2 norm, one block per row.
 *
 * Pass 1 sums squares (per-thread fp32 partials, then a warp-shuffle block
 * sum); pass 2 rereads the row (from L1/L2: a 7168-wide row is 28 KiB) and
 * writes it scaled. The CPU twin sums in fp64; fp32 here is deliberate: the
 * op is bandwidth-bound everywhere, and fp64 throughput on GB300 is a small
 * fraction of Hopper's. With ≤ 7168/256 = 28 terms per thread and a tree
 * over threads, the relative error of the sum stays ~1e-6 (op test).
 * Rows whose width and strides are multiples of 4 (and 16-byte aligned) take
 * a float4 path that keeps the row in registers (one read from memory) up to
 * d = 8192; anything else the two-pass kernel, scalar where it must be. y may alias x: each element is
 * read and written by the same thread. */
#include "kernels/cuda/norm.h"

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

template <int VEC>
static __device__ __forceinline__ void load_vec(const float *p, float *v)
{
    if (VEC == 4) {
        float4 q = *(const float4 *)p;
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    } else {
        v[0] = *p;
    }
}

template <int VEC>
static __device__ __forceinline__ void store_vec(float *p, const float *v)
{
    if (VEC == 4) *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    else *p = v[0];
}

template <int VEC>
static __global__ void rmsnorm_kernel(struct k3_rmsnorm_params p)
{
    __shared__ float sh[32];
    int64_t r = blockIdx.x;
    const float *x = p.x + r * p.ldx;
    float *y = p.y + r * p.ldy;
    const float *g = p.gate ? p.gate + r * p.ldg : NULL;
    float ss = 0.0f;
    for (int64_t c = (int64_t)threadIdx.x * VEC; c < p.d; c += (int64_t)blockDim.x * VEC) {
        float v[VEC];
        load_vec<VEC>(x + c, v);
        for (int j = 0; j < VEC; j++) ss += v[j] * v[j];
    }
    ss = k3_block_sum(ss, sh);
    float inv = 1.0f / sqrtf(ss / (float)p.d + (float)p.eps);
    for (int64_t c = (int64_t)threadIdx.x * VEC; c < p.d; c += (int64_t)blockDim.x * VEC) {
        float v[VEC], w[VEC], gv[VEC];
        load_vec<VEC>(x + c, v);
        if (p.w) load_vec<VEC>(p.w + c, w);
        if (g) load_vec<VEC>(g + c, gv);
        for (int j = 0; j < VEC; j++) {
            v[j] *= inv;
            if (p.w) v[j] *= w[j];
            if (g) v[j] *= k3_sigmoidf(gv[j]);
        }
        store_vec<VEC>(y + c, v);
    }
}

/* Row held in registers (float4 path only): the row is read from memory
 * once. rmsnorm_rows_kernel: one warp per row, 8 rows per block, for d ≤ 512
 * (per-head norms: d = 128); rmsnorm_cached_kernel: one block of 256 threads
 * per row, CACHE float4 per thread, for d ≤ 8192 (K3's 7168). */
static __device__ __forceinline__ float4 norm4(float4 v, float inv, const float *w, const float *g,
                                               int64_t c)
{
    float o[4] = {v.x * inv, v.y * inv, v.z * inv, v.w * inv};
    if (w) {
        float4 wv = *(const float4 *)(w + c);
        o[0] *= wv.x; o[1] *= wv.y; o[2] *= wv.z; o[3] *= wv.w;
    }
    if (g) {
        float4 gv = *(const float4 *)(g + c);
        o[0] *= k3_sigmoidf(gv.x); o[1] *= k3_sigmoidf(gv.y);
        o[2] *= k3_sigmoidf(gv.z); o[3] *= k3_sigmoidf(gv.w);
    }
    return make_float4(o[0], o[1], o[2], o[3]);
}

#define NORM_ROWS_PER_BLOCK 8

template <int CACHE>
static __global__ void rmsnorm_rows_kernel(struct k3_rmsnorm_params p)
{
    int64_t r = (int64_t)blockIdx.x * NORM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= p.n_rows) return;   /* warp-uniform */
    const float *x = p.x + r * p.ldx;
    float *y = p.y + r * p.ldy;
    const float *g = p.gate ? p.gate + r * p.ldg : NULL;
    float4 v[CACHE];
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < CACHE; u++) {
        int64_t c = ((int64_t)u * 32 + lane) * 4;
        if (c < p.d) {
            v[u] = *(const float4 *)(x + c);
            ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
        }
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = 1.0f / sqrtf(ss / (float)p.d + (float)p.eps);
#pragma unroll
    for (int u = 0; u < CACHE; u++) {
        int64_t c = ((int64_t)u * 32 + lane) * 4;
        if (c < p.d) *(float4 *)(y + c) = norm4(v[u], inv, p.w, g, c);
    }
}

template <int CACHE>
static __global__ void rmsnorm_cached_kernel(struct k3_rmsnorm_params p)
{
    __shared__ float sh[32];
    int64_t r = blockIdx.x;
    const float *x = p.x + r * p.ldx;
    float *y = p.y + r * p.ldy;
    const float *g = p.gate ? p.gate + r * p.ldg : NULL;
    float4 v[CACHE];
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < CACHE; u++) {
        int64_t c = ((int64_t)u * blockDim.x + threadIdx.x) * 4;
        if (c < p.d) {
            v[u] = *(const float4 *)(x + c);
            ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
        }
    }
    ss = k3_block_sum(ss, sh);
    float inv = 1.0f / sqrtf(ss / (float)p.d + (float)p.eps);
#pragma unroll
    for (int u = 0; u < CACHE; u++) {
        int64_t c = ((int64_t)u * blockDim.x + threadIdx.x) * 4;
        if (c < p.d) *(float4 *)(y + c) = norm4(v[u], inv, p.w, g, c);
    }
}

template <int VEC>
static __global__ void l2norm_kernel(struct k3_l2norm_params p)
{
    __shared__ float sh[32];
    int64_t r = blockIdx.x;
    const float *x = p.x + r * p.d;
    float *y = p.y + r * p.d;
    float ss = 0.0f;
    for (int64_t c = (int64_t)threadIdx.x * VEC; c < p.d; c += (int64_t)blockDim.x * VEC) {
        float v[VEC];
        load_vec<VEC>(x + c, v);
        for (int j = 0; j < VEC; j++) ss += v[j] * v[j];
    }
    ss = k3_block_sum(ss, sh);
    float f = (float)p.scale / sqrtf(ss + (float)p.eps);
    for (int64_t c = (int64_t)threadIdx.x * VEC; c < p.d; c += (int64_t)blockDim.x * VEC) {
        float v[VEC];
        load_vec<VEC>(x + c, v);
        for (int j = 0; j < VEC; j++) v[j] *= f;
        store_vec<VEC>(y + c, v);
    }
}

/* Threads per row: a warp multiple, no more than the row needs, at most 256. */
static int row_threads(int64_t d, int vec)
{
    int64_t t = (d / vec + 31) / 32 * 32;
    return t < 32 ? 32 : (t > 256 ? 256 : (int)t);
}

extern "C" void k3_cuda_rmsnorm_launch(const struct k3_rmsnorm_params *p, cudaStream_t s)
{
    if (p->n_rows <= 0 || p->d <= 0) return;
    int vec4 = p->d % 4 == 0 && p->ldx % 4 == 0 && p->ldy % 4 == 0 && k3_aligned16(p->x) &&
               k3_aligned16(p->y) && (!p->w || k3_aligned16(p->w)) &&
               (!p->gate || (p->ldg % 4 == 0 && k3_aligned16(p->gate)));
    if (vec4 && p->d <= 512)
        rmsnorm_rows_kernel<4><<<k3_grid_rows((p->n_rows + NORM_ROWS_PER_BLOCK - 1) /
                                              NORM_ROWS_PER_BLOCK), 32 * NORM_ROWS_PER_BLOCK, 0,
                                 s>>>(*p);
    else if (vec4 && p->d <= 8192)
        rmsnorm_cached_kernel<8><<<k3_grid_rows(p->n_rows), 256, 0, s>>>(*p);
    else if (vec4)
        rmsnorm_kernel<4><<<k3_grid_rows(p->n_rows), row_threads(p->d, 4), 0, s>>>(*p);
    else
        rmsnorm_kernel<1><<<k3_grid_rows(p->n_rows), row_threads(p->d, 1), 0, s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_l2norm_launch(const struct k3_l2norm_params *p, cudaStream_t s)
{
    if (p->n_rows <= 0 || p->d <= 0) return;
    int vec4 = p->d % 4 == 0 && k3_aligned16(p->x) && k3_aligned16(p->y);
    if (vec4)
        l2norm_kernel<4><<<k3_grid_rows(p->n_rows), row_threads(p->d, 4), 0, s>>>(*p);
    else
        l2norm_kernel<1><<<k3_grid_rows(p->n_rows), row_threads(p->d, 1), 0, s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_rmsnorm(struct k3_backend *be, const struct k3_rmsnorm_params *p)
{
    k3_cuda_rmsnorm_launch(p, k3_cuda_impl(be)->stream);
}

extern "C" void k3_cuda_l2norm(struct k3_backend *be, const struct k3_l2norm_params *p)
{
    k3_cuda_l2norm_launch(p, k3_cuda_impl(be)->stream);
}
