/* router.cu - sigmoid scores, top-k of score + bias, renormalised weights
 * (ops.h; model-architecture.md §2.5). Up to 1024 experts and top-32: one
 * warp per token (router_warp_kernel, below). Beyond: one block per token,
 * router_kernel:
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


/* One warp per token for E ≤ 32·PER ≤ 1024 and k ≤ 32: lane l holds experts
 * l, l+32, ... as packed 64-bit keys in registers: the order-preserving bits
 * of the fp64 biased score with the low 10 bits replaced by (1023 - expert),
 * so one integer max picks the best score and, among equal keys, the lower
 * expert. (Truncating the score to 42 mantissa bits can only reorder scores
 * within 2^-42 of each other; the CPU twin compares full doubles.) Each of
 * the k rounds is a register max plus a 5-step shuffle max, no barriers; the
 * unbiased sigmoid of the k chosen is computed once at the end, one lane per
 * slot. 8 tokens per block. (The block kernel takes 25 µs for one token:
 * 16 rounds of two __syncthreads.) */
#define ROUTER_WARPS 8

static __device__ __forceinline__ unsigned long long router_key(double c, int e)
{
    unsigned long long u = (unsigned long long)__double_as_longlong(c);
    u = (u >> 63) ? ~u : (u | (1ull << 63));
    return (u & ~1023ull) | (unsigned long long)(1023 - e);
}

template <int PER>
static __global__ void router_warp_kernel(struct k3_router_params p)
{
    int64_t t = (int64_t)blockIdx.x * ROUTER_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31, E = p.n_expert;
    if (t >= p.n) return;   /* warp-uniform */
    const float *l = p.logits + t * E;
    unsigned long long key[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) {
        int e = lane + 32 * j;
        key[j] = 0;   /* below every real key: never chosen */
        if (e < E)
            key[j] = router_key(1.0 / (1.0 + exp(-(double)l[e])) + (p.bias ? (double)p.bias[e] : 0.0), e);
    }
    int e_mine = -1;
    for (int r = 0; r < p.k; r++) {
        unsigned long long best = 0;
#pragma unroll
        for (int j = 0; j < PER; j++) best = key[j] > best ? key[j] : best;
        for (int o = 16; o > 0; o >>= 1) {
            unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
            best = other > best ? other : best;
        }
#pragma unroll
        for (int j = 0; j < PER; j++)
            if (key[j] == best) key[j] = 0;
        if (lane == r) e_mine = 1023 - (int)(best & 1023ull);
    }
    double s_mine = lane < p.k ? 1.0 / (1.0 + exp(-(double)l[e_mine])) : 0.0;
    double sum = s_mine;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane < p.k) {
        double norm = (p.renorm && p.k > 1) ? 1.0 / (sum + 1e-20) : 1.0;
        p.idx[t * p.k + lane] = e_mine;
        p.w[t * p.k + lane] = (float)(s_mine * norm * p.scale);
    }
}

extern "C" void k3_cuda_router_launch(const struct k3_router_params *p, cudaStream_t s)
{
    K3_CHECK(p->k >= 1 && p->k <= p->n_expert && p->k <= ROUTER_THREADS,
             "top-%d of %d experts", p->k, p->n_expert);
    K3_CHECK(p->n_expert <= 3072, "%d experts: the router keeps fp64 scores in 48 KiB of shared memory "
             "(at most 3072)", p->n_expert);
    if (p->n <= 0) return;
    dim3 warp_grid(k3_grid_rows((p->n + ROUTER_WARPS - 1) / ROUTER_WARPS));
    if (p->k <= 32 && p->n_expert <= 32 * 8)
        router_warp_kernel<8><<<warp_grid, 32 * ROUTER_WARPS, 0, s>>>(*p);
    else if (p->k <= 32 && p->n_expert <= 32 * 32)
        router_warp_kernel<32><<<warp_grid, 32 * ROUTER_WARPS, 0, s>>>(*p);
    else
        router_kernel<<<k3_grid_rows(p->n), ROUTER_THREADS, sizeof(double) * 2 * (size_t)p->n_expert,
                        s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_router(struct k3_backend *be, const struct k3_router_params *p)
{
    k3_cuda_router_launch(p, k3_cuda_impl(be)->stream);
}
