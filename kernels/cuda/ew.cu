/* ew.cu - elementwise ops over [n, m] with row strides (ops.h), one thread
 * per element, grid-stride. y may alias a (each element read, then written,
 * by one thread). Same fp32 formulas as the CPU twin. */
#include "kernels/cuda/ew.h"

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

static __global__ void ew_kernel(struct k3_ew_params p)
{
    int64_t total = p.n * p.m;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = idx / p.m, c = idx - i * p.m;
        float a = p.a[i * p.lda + c], y;
        switch (p.op) {
        case K3_EW_ADD: y = a + p.b[i * p.ldb + c]; break;
        case K3_EW_SIGMOID: y = 1.0f / (1.0f + expf(-a)); break;
        default: y = a / (1.0f + expf(-p.b[i * p.ldb + c])); break; /* K3_EW_MUL_SIGMOID */
        }
        p.y[i * p.ldy + c] = y;
    }
}

extern "C" void k3_cuda_ew_launch(const struct k3_ew_params *p, cudaStream_t s)
{
    if (p->n <= 0 || p->m <= 0) return;
    K3_CHECK(p->op == K3_EW_ADD || p->op == K3_EW_SIGMOID || p->op == K3_EW_MUL_SIGMOID,
             "unknown elementwise op %d", (int)p->op);
    ew_kernel<<<k3_grid_1d(p->n * p->m, 256), 256, 0, s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_ew(struct k3_backend *be, const struct k3_ew_params *p)
{
    k3_cuda_ew_launch(p, k3_cuda_impl(be)->stream);
}
