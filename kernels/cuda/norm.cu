/* norm.cu - RMSNorm and L2 norm, one block per row.
 *
 * Pass 1 sums squares (per-thread fp32 partials, then a warp-shuffle block
 * sum); pass 2 rereads the row (from L1/L2: a 7168-wide row is 28 KiB) and
 * writes it scaled. The CPU twin sums in fp64; fp32 here is deliberate: the
 * op is bandwidth-bound everywhere, and fp64 throughput on GB300 is a small
 * fraction of Hopper's. With ≤ 7168/256 = 28 terms per thread and a tree
 * over threads, the relative error of the sum stays ~1e-6 (op test).
 * Rows whose width and strides are multiples of 4 (and 16-byte aligned) take
 * a float4 path; anything else the scalar one. y may alias x: each element is
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
    if (vec4)
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
