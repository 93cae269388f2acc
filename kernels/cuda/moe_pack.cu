/* moe_pack.cu - see moe_pack.h. One block per row (gather, scale) or per
 * token (combine). Rows are moved as 16-byte words when every row start is
 * 16-byte aligned (K3's latent rows, 3584 bf16 = 7168 bytes, are), bytes
 * otherwise. Combine reads a token's partials one after another rather than
 * scattering them with atomics: the order, and so the sum, is fixed. */
#include "kernels/cuda/moe_pack.h"

#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"

static __global__ void moe_gather_kernel(const char *src, const int32_t *idx, char *dst,
                                         size_t row_bytes, int vec16)
{
    int64_t i = blockIdx.x;
    const char *s = src + (size_t)idx[i] * row_bytes;
    char *d = dst + (size_t)i * row_bytes;
    if (vec16) {
        for (size_t c = threadIdx.x; c < row_bytes / 16; c += blockDim.x)
            ((uint4 *)d)[c] = ((const uint4 *)s)[c];
    } else {
        for (size_t c = threadIdx.x; c < row_bytes; c += blockDim.x) d[c] = s[c];
    }
}

extern "C" void k3_moe_gather_launch(const struct k3_moe_gather_params *p, cudaStream_t s)
{
    if (p->n_rows <= 0 || !p->row_bytes) return;
    K3_CHECK(p->n_rows <= 0x7fffffff, "gather of %lld rows", (long long)p->n_rows);
    int vec16 = p->row_bytes % 16 == 0 && ((uintptr_t)p->src & 15) == 0 &&
                ((uintptr_t)p->dst & 15) == 0;
    moe_gather_kernel<<<(unsigned)p->n_rows, 256, 0, s>>>((const char *)p->src, p->idx,
                                                          (char *)p->dst, p->row_bytes, vec16);
    K3_CHECK_LAUNCH();
}

template <typename T> static __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T>
static __global__ void moe_combine_kernel(const T *partial, const int32_t *tok_first,
                                          const int32_t *tok_rows, float *out, int dim)
{
    int64_t t = blockIdx.x;
    int k0 = tok_first[t], k1 = tok_first[t + 1];
    float *o = out + t * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float acc = 0.0f;
        for (int k = k0; k < k1; k++) acc += to_f32(partial[(int64_t)tok_rows[k] * dim + c]);
        o[c] = acc;
    }
}

extern "C" void k3_moe_combine_launch(const struct k3_moe_combine_params *p, cudaStream_t s)
{
    if (p->n_tok <= 0) return;
    K3_CHECK(p->dtype == K3_DTYPE_F32 || p->dtype == K3_DTYPE_BF16,
             "MoE combine takes F32 or BF16 partials, not dtype %d", (int)p->dtype);
    unsigned grid = (unsigned)p->n_tok;
    if (p->dtype == K3_DTYPE_F32)
        moe_combine_kernel<float><<<grid, 256, 0, s>>>((const float *)p->partial, p->tok_first,
                                                       p->tok_rows, p->out, p->dim);
    else
        moe_combine_kernel<__nv_bfloat16><<<grid, 256, 0, s>>>(
            (const __nv_bfloat16 *)p->partial, p->tok_first, p->tok_rows, p->out, p->dim);
    K3_CHECK_LAUNCH();
}

static __global__ void moe_scale_kernel(const __nv_bfloat16 *x, const float *scale, void *y,
                                        int y_bf16, int dim)
{
    int64_t i = blockIdx.x;
    float s = scale[i];
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float v = s * __bfloat162float(x[i * dim + c]);
        if (y_bf16) ((__nv_bfloat16 *)y)[i * dim + c] = __float2bfloat16_rn(v);
        else ((float *)y)[i * dim + c] = v;
    }
}

extern "C" void k3_moe_scale_launch(const struct k3_moe_scale_params *p, cudaStream_t s)
{
    if (p->n_rows <= 0) return;
    K3_CHECK(p->y_dtype == K3_DTYPE_F32 || p->y_dtype == K3_DTYPE_BF16,
             "MoE scale writes F32 or BF16, not dtype %d", (int)p->y_dtype);
    moe_scale_kernel<<<(unsigned)p->n_rows, 256, 0, s>>>((const __nv_bfloat16 *)p->x, p->scale,
                                                         p->y, p->y_dtype == K3_DTYPE_BF16, p->dim);
    K3_CHECK_LAUNCH();
}
