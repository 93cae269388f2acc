/* glu.cu - y = act(gate, up) elementwise over [n, m] (ops.h), one thread per
 * element with a grid-stride loop. SiTU-GLU as research/model-architecture.md
 * §4.2: [β·tanh(g/β)·σ(g)] · [β_lin·tanh(u/β_lin)]. fp32 throughout (the CPU
 * twin goes through fp64 and rounds once; tanhf/expf are within 2 ulp, so the
 * two agree to a few ulp, see the op test's tolerance). */
#include "kernels/cuda/glu.h"

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

static __global__ void glu_kernel(struct k3_glu_params p)
{
    int64_t total = p.n * p.m;
    float beta = (float)p.beta, beta_lin = (float)p.beta_lin;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = idx / p.m, c = idx - i * p.m;
        float g = p.gate[i * p.ldg + c], u = p.up[i * p.ldu + c];
        float y;
        if (p.act == K3_GLU_SILU)
            y = g * k3_sigmoidf(g) * u;
        else
            y = beta * tanhf(g / beta) * k3_sigmoidf(g) * (beta_lin * tanhf(u / beta_lin));
        p.y[i * p.ldy + c] = y;
    }
}

extern "C" void k3_cuda_glu_launch(const struct k3_glu_params *p, cudaStream_t s)
{
    if (p->n <= 0 || p->m <= 0) return;
    glu_kernel<<<k3_grid_1d(p->n * p->m, 256), 256, 0, s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_glu(struct k3_backend *be, const struct k3_glu_params *p)
{
    k3_cuda_glu_launch(p, k3_cuda_impl(be)->stream);
}
