/* kda_gate.cu - KDA decay gate g in log space (ops.h; model-architecture.md
 * §1.2 step 6), one thread per element. Evaluated in fp64 like the CPU twin:
 * g feeds a cumulative sum over a chunk, so one final rounding matters more
 * than the few fp64 operations per element cost (n·H·K elements, small). */
#include "kernels/cuda/kda_gate.h"

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

static __global__ void kda_gate_kernel(struct k3_kda_gate_params p)
{
    int64_t hk = (int64_t)p.n_head * p.head_dim, total = p.n * hk;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = idx / hk, c = idx - t * hk;
        double a = exp((double)p.a_log[c / p.head_dim]);
        double z = (double)p.f[t * p.ldf + c] + (double)p.dt_bias[c];
        double v;
        if (p.form == K3_KDA_GATE_SOFTPLUS)
            v = -a * (log1p(exp(-fabs(z))) + (z > 0 ? z : 0)); /* overflow-safe softplus */
        else
            v = p.lower_bound / (1.0 + exp(-a * z));
        p.g[idx] = (float)v;
    }
}

extern "C" void k3_cuda_kda_gate_launch(const struct k3_kda_gate_params *p, cudaStream_t s)
{
    int64_t total = p->n * p->n_head * p->head_dim;
    if (total <= 0) return;
    kda_gate_kernel<<<k3_grid_1d(total, 256), 256, 0, s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_kda_gate(struct k3_backend *be, const struct k3_kda_gate_params *p)
{
    k3_cuda_kda_gate_launch(p, k3_cuda_impl(be)->stream);
}
