/* router.cu - sigmoid scores, top-k of score + bias, renormalised weights
 * (ops.h; model-architecture.md §2.5), one block per token.
 *
 * The token's E scores live in shared memory; top-k is k rounds of a block
 * argmax (per-thread best, then warp shuffles, then one warp over the warp
 * winners), ties to the lower expert index like the CPU twin. k ≤ 16 and
 * E ≤ 1024 here, so k block reductions beat a sort. Scores are fp64: the
 * selection compares biased scores that can sit within fp32 rounding of each
 * other, and the work (n·E) is tiny next to the GEMM that made the logits,
 * so fp64 makes the GPU choose exactly the experts the CPU reference chooses. */
#include "kernels/cuda/router.h"

#include <math.h>

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

#define ROUTER_THREADS 256

/* (value, index) of the larger; equal values: the lower index. idx < 0: none. */
static __device__ __forceinline__ void better(double *v, int *i, double v2, int i2)
{
    if (i2 < 0) return;
    if (*i < 0 || v2 > *v || (v2 == *v && i2 < *i)) {
        *v = v2;
        *i = i2;
    }
}

static __global__ void router_kernel(struct k3_router_params p)
{
    extern __shared__ double sh_scores[];   /* s[E], then c[E] */
    __shared__ double warp_v[32];
    __shared__ int warp_i[32];
    __shared__ double sum_sel;
    int E = p.n_expert;
    double *s = sh_scores, *c = sh_scores + E;
    int64_t t = blockIdx.x;
    const float *l = p.logits + t * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        s[e] = 1.0 / (1.0 + exp(-(double)l[e]));
        c[e] = s[e] + (p.bias ? (double)p.bias[e] : 0.0);
    }
    if (threadIdx.x == 0) sum_sel = 0.0;
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    for (int j = 0; j < p.k; j++) {
        double bv = 0.0;
        int bi = -1;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (c[e] != -INFINITY) better(&bv, &bi, c[e], e);
        for (int o = 16; o > 0; o >>= 1) {
            double ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            better(&bv, &bi, ov, oi);
        }
        if (lane == 0) {
            warp_v[warp] = bv;
            warp_i[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            bv = 0.0;
            bi = -1;
            if (lane < n_warp) {
                bv = warp_v[lane];
                bi = warp_i[lane];
            }
            for (int o = 16; o > 0; o >>= 1) {
                double ov = __shfl_xor_sync(0xffffffffu, bv, o);
                int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                better(&bv, &bi, ov, oi);
            }
            if (lane == 0) {
                p.idx[t * p.k + j] = bi;
                c[bi] = -INFINITY;
                sum_sel += s[bi];
            }
        }
        __syncthreads();
    }
    if (threadIdx.x < p.k) {
        double norm = (p.renorm && p.k > 1) ? 1.0 / (sum_sel + 1e-20) : 1.0;
        int e = p.idx[t * p.k + threadIdx.x];
        p.w[t * p.k + threadIdx.x] = (float)(s[e] * norm * p.scale);
    }
}

extern "C" void k3_cuda_router_launch(const struct k3_router_params *p, cudaStream_t s)
{
    K3_CHECK(p->k >= 1 && p->k <= p->n_expert && p->k <= ROUTER_THREADS,
             "top-%d of %d experts", p->k, p->n_expert);
    K3_CHECK(p->n_expert <= 3072, "%d experts: the router keeps fp64 scores in 48 KiB of shared memory "
             "(at most 3072)", p->n_expert);
    if (p->n <= 0) return;
    size_t shmem = sizeof(double) * 2 * (size_t)p->n_expert;
    router_kernel<<<k3_grid_rows(p->n), ROUTER_THREADS, shmem, s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_router(struct k3_backend *be, const struct k3_router_params *p)
{
    k3_cuda_router_launch(p, k3_cuda_impl(be)->stream);
}
