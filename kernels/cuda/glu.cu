/* glu.cu - y = act(gate, up) elementwise over [n, m] (ops.h), row by row
 * (blockIdx.y) with float4 columns where the strides allow. SiTU-GLU as
 * research/model-architecture.md §4.2: [β·tanh(g/β)·σ(g)] · [β_lin·tanh(u/β_lin)]. fp32 throughout (the CPU
 * twin goes through fp64 and rounds once; tanhf/expf are within 2 ulp, so the
 * two agree to a few ulp, see the op test's tolerance). */
#include "kernels/cuda/glu.h"

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

static __device__ __forceinline__ float glu_value(int silu, float g, float u, float beta,
                                                 float beta_lin)
{
    if (silu) return g * k3_sigmoidf(g) * u;
    return beta * tanhf(g / beta) * k3_sigmoidf(g) * (beta_lin * tanhf(u / beta_lin));
}

/* One row per blockIdx.y, VEC columns per thread (float4 loads and stores
 * when every row start is 16-byte aligned and m is a multiple of 4). */
template <int VEC>
static __global__ void glu_kernel(struct k3_glu_params p)
{
    int silu = p.act == K3_GLU_SILU;
    float beta = (float)p.beta, beta_lin = (float)p.beta_lin;
    for (int64_t i = blockIdx.y; i < p.n; i += gridDim.y) {
        const float *g = p.gate + i * p.ldg, *u = p.up + i * p.ldu;
        float *y = p.y + i * p.ldy;
        for (int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC; c < p.m;
             c += (int64_t)gridDim.x * blockDim.x * VEC) {
            if (VEC == 4) {
                float4 gv = *(const float4 *)(g + c), uv = *(const float4 *)(u + c);
                *(float4 *)(y + c) = make_float4(glu_value(silu, gv.x, uv.x, beta, beta_lin),
                                                 glu_value(silu, gv.y, uv.y, beta, beta_lin),
                                                 glu_value(silu, gv.z, uv.z, beta, beta_lin),
                                                 glu_value(silu, gv.w, uv.w, beta, beta_lin));
            } else {
                y[c] = glu_value(silu, g[c], u[c], beta, beta_lin);
            }
        }
    }
}

extern "C" void k3_cuda_glu_launch(const struct k3_glu_params *p, cudaStream_t s)
{
    if (p->n <= 0 || p->m <= 0) return;
    int vec4 = p->m % 4 == 0 && p->ldg % 4 == 0 && p->ldu % 4 == 0 && p->ldy % 4 == 0 &&
               k3_aligned16(p->gate) && k3_aligned16(p->up) && k3_aligned16(p->y);
    if (vec4) glu_kernel<4><<<k3_grid_2d(p->n, p->m, 4, 256), 256, 0, s>>>(*p);
    else glu_kernel<1><<<k3_grid_2d(p->n, p->m, 1, 256), 256, 0, s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_glu(struct k3_backend *be, const struct k3_glu_params *p)
{
    k3_cuda_glu_launch(p, k3_cuda_impl(be)->stream);
}
