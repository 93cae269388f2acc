/* ew.cu - elementwise ops over [n, m] with row strides (ops.h), row by row
 * (blockIdx.y), float4 columns where the strides allow. y may alias a (each
 * element is read, then written, by one thread). Same fp32 formulas as the
 * CPU twin. */
#include "kernels/cuda/ew.h"

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

static __device__ __forceinline__ float ew_value(enum k3_ew_op op, float a, float b)
{
    switch (op) {
    case K3_EW_ADD: return a + b;
    case K3_EW_SIGMOID: return 1.0f / (1.0f + expf(-a));
    default: return a / (1.0f + expf(-b)); /* K3_EW_MUL_SIGMOID */
    }
}

/* One row per blockIdx.y, VEC columns per thread (float4 where aligned). */
template <int VEC>
static __global__ void ew_kernel(struct k3_ew_params p)
{
    for (int64_t i = blockIdx.y; i < p.n; i += gridDim.y) {
        const float *a = p.a + i * p.lda, *b = p.b ? p.b + i * p.ldb : NULL;
        float *y = p.y + i * p.ldy;
        for (int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC; c < p.m;
             c += (int64_t)gridDim.x * blockDim.x * VEC) {
            if (VEC == 4) {
                float4 av = *(const float4 *)(a + c), bv = make_float4(0, 0, 0, 0);
                if (b) bv = *(const float4 *)(b + c);
                *(float4 *)(y + c) = make_float4(ew_value(p.op, av.x, bv.x), ew_value(p.op, av.y, bv.y),
                                                 ew_value(p.op, av.z, bv.z), ew_value(p.op, av.w, bv.w));
            } else {
                y[c] = ew_value(p.op, a[c], b ? b[c] : 0.0f);
            }
        }
    }
}

extern "C" void k3_cuda_ew_launch(const struct k3_ew_params *p, cudaStream_t s)
{
    if (p->n <= 0 || p->m <= 0) return;
    K3_CHECK(p->op == K3_EW_ADD || p->op == K3_EW_SIGMOID || p->op == K3_EW_MUL_SIGMOID,
             "unknown elementwise op %d", (int)p->op);
    struct k3_ew_params q = *p;
    if (q.op == K3_EW_SIGMOID) q.b = NULL;   /* b is unused: never read it */
    int vec4 = q.m % 4 == 0 && q.lda % 4 == 0 && q.ldy % 4 == 0 && k3_aligned16(q.a) &&
               k3_aligned16(q.y) && (!q.b || (q.ldb % 4 == 0 && k3_aligned16(q.b)));
    if (vec4) ew_kernel<4><<<k3_grid_2d(q.n, q.m, 4, 256), 256, 0, s>>>(q);
    else ew_kernel<1><<<k3_grid_2d(q.n, q.m, 1, 256), 256, 0, s>>>(q);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_ew(struct k3_backend *be, const struct k3_ew_params *p)
{
    k3_cuda_ew_launch(p, k3_cuda_impl(be)->stream);
}
