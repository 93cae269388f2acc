/* sample.cu - see sample.h. One block of 1024 threads per row; the row
 * (163840 fp32 logits for K3 = 640 KB) stays in L2 across the passes.
 *
 * Thresholds without sorting: a logit maps to an order-preserving 32-bit key,
 * and the k-th largest key (top-k) and the top-p cut are found by a radix
 * descent, 8 bits per level (4 histogram passes each: counts for top-k,
 * fixed-point masses for top-p), which gives exact thresholds with ties
 * kept. Measured on the H200 for one 163840-wide row with top-k and top-p:
 * a bit-by-bit search (64 passes) 1.9 ms; radix with plain shared atomics
 * 3.0 ms (contention, see hist_add). Still one block per row: a decode
 * batch of 1 uses one SM; splitting a row over blocks is the next step. The draw is an inverse-CDF walk in id
 * order: per-thread contiguous chunks, a block scan of the chunk sums, then
 * one thread walks its chunk. Probabilities and sums in fp32 (max-subtracted
 * exponentials; relative error ~1e-6 on 163840 terms), so a draw landing
 * within ~1e-6 of a boundary may differ from an fp64 reference. */
#include "kernels/cuda/sample.h"

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

#define SAMPLE_THREADS 1024

static __device__ __forceinline__ uint32_t key_of(float f)
{
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __device__ float block_max_f(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < n_warp ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* (value, index) argmax, ties to the lower index. */
static __device__ void block_argmax(float *v, int64_t *i, float *shv, int64_t *shi)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        int64_t oi = __shfl_xor_sync(0xffffffffu, *i, o);
        if (ov > *v || (ov == *v && oi < *i)) {
            *v = ov;
            *i = oi;
        }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
        shv[warp] = *v;
        shi[warp] = *i;
    }
    __syncthreads();
    *v = lane < n_warp ? shv[lane] : -INFINITY;
    *i = lane < n_warp ? shi[lane] : INT64_MAX;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        int64_t oi = __shfl_xor_sync(0xffffffffu, *i, o);
        if (ov > *v || (ov == *v && oi < *i)) {
            *v = ov;
            *i = oi;
        }
    }
}

/* Probability mass in fixed point, 2^-40 units: e = exp(l - max) ≤ 1 and at
 * most 2^31 ids, so sums fit in 64 bits; integer atomics are order-free. */
static __device__ __forceinline__ unsigned long long fixed_of(float e)
{
    return (unsigned long long)((double)e * 1099511627776.0);
}

static __device__ unsigned long long block_sum_u64(unsigned long long v, unsigned long long *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < n_warp ? sh[lane] : 0ull;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* hist[bin] += v for every lane of the warp (bin < 0: this lane adds
 * nothing). Lanes with the same bin are summed in registers first and one
 * lane per distinct bin does the atomic: logits cluster in a few top-byte
 * bins, and plain shared atomics on those serialised the first radix
 * version (3.0 ms per row, slower than the 64-pass bit search's 1.9 ms).
 * Every lane of the warp must call it. */
static __device__ __forceinline__ void hist_add(unsigned long long *hist, int bin,
                                                unsigned long long v)
{
    unsigned grp = __match_any_sync(0xffffffffu, bin);
    unsigned long long sum = 0;
    for (int j = 0; j < 32; j++) {
        unsigned long long o = __shfl_sync(0xffffffffu, v, j);
        if ((grp >> j) & 1u) sum += o;
    }
    if (bin >= 0 && (int)(threadIdx.x & 31) == __ffs(grp) - 1) atomicAdd(&hist[bin], sum);
}

/* One level of the radix descent (thread 0): walking digits from 255 down,
 * the first digit whose cumulative count/mass reaches `need` is the next
 * digit of the threshold; what lies above it is subtracted from need. The
 * result is published through shared memory for the whole block. */
static __device__ void descend(const unsigned long long *hist, unsigned long long need,
                               uint32_t prefix, int shift, uint32_t *sh_prefix,
                               unsigned long long *sh_need)
{
    unsigned long long above = 0;
    int d = 0;
    for (int b = 255; b >= 0; b--) {
        if (above + hist[b] >= need) {
            d = b;
            break;
        }
        above += hist[b];
    }
    *sh_prefix = prefix | ((uint32_t)d << shift);
    *sh_need = need - above;
}

static __global__ void sample_kernel(struct k3_sample_params p)
{
    __shared__ float sh[32];
    __shared__ int64_t shi[32];
    __shared__ float scan[SAMPLE_THREADS];
    __shared__ int64_t chosen;
    __shared__ unsigned long long hist[256];
    __shared__ unsigned long long sh64[32];
    __shared__ uint32_t sh_prefix;
    __shared__ unsigned long long sh_need;
    int64_t r = blockIdx.x, V = p.vocab;
    const float *l = p.logits + r * p.ld;
    float T = p.temperature ? p.temperature[r] : 0.0f;
    if (!(T > 0.0f)) {
        float bv = -INFINITY;
        int64_t bi = INT64_MAX;
        for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
            float v = l[c];
            if (v > bv || (v == bv && c < bi)) {
                bv = v;
                bi = c;
            }
        }
        block_argmax(&bv, &bi, sh, shi);
        if (threadIdx.x == 0) p.out[r] = (int32_t)(bi == INT64_MAX ? 0 : bi);
        return;
    }
    float invT = 1.0f / T;
    float mx = -INFINITY;
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) mx = fmaxf(mx, l[c]);
    mx = block_max_f(mx, sh);
    /* top-k: the k-th largest key (ties kept) by an 8-bit radix descent */
    uint32_t t = 0;
    int k = p.top_k ? p.top_k[r] : 0;
    if (k > 0 && k < V) {
        uint32_t prefix = 0, mask = 0;
        unsigned long long need = (unsigned long long)k;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
            __syncthreads();
            for (int64_t base = 0; base < V; base += blockDim.x) {   /* warp-uniform trip count */
                int64_t c = base + threadIdx.x;
                uint32_t key = c < V ? key_of(l[c]) : 0u;
                int in = c < V && (key & mask) == prefix;
                hist_add(hist, in ? (int)((key >> shift) & 255u) : -1, 1ull);
            }
            __syncthreads();
            if (threadIdx.x == 0) descend(hist, need, prefix, shift, &sh_prefix, &sh_need);
            __syncthreads();
            prefix = sh_prefix;
            need = sh_need;
            mask |= 255u << shift;
        }
        t = prefix;
    }
    /* top-p over the top-k set: the largest key t2 whose mass Σ_{key >= t2}
     * reaches top_p of the top-k mass, by the same descent over masses in
     * 2^-40 fixed point (integer atomics: the same answer on every run) */
    float top_p = p.top_p ? p.top_p[r] : 1.0f;
    if (top_p < 1.0f) {
        unsigned long long zk = 0;
        for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
            uint32_t key = key_of(l[c]);
            if (key >= t) zk += fixed_of(expf((l[c] - mx) * invT));
        }
        zk = block_sum_u64(zk, sh64);
        unsigned long long need = (unsigned long long)((double)zk * (double)top_p);
        if (need < 1) need = 1;
        uint32_t prefix = 0, mask = 0;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
            __syncthreads();
            for (int64_t base = 0; base < V; base += blockDim.x) {
                int64_t c = base + threadIdx.x;
                uint32_t key = c < V ? key_of(l[c]) : 0u;
                int in = c < V && key >= t && (key & mask) == prefix;
                hist_add(hist, in ? (int)((key >> shift) & 255u) : -1,
                         in ? fixed_of(expf((l[c] - mx) * invT)) : 0ull);
            }
            __syncthreads();
            if (threadIdx.x == 0) descend(hist, need, prefix, shift, &sh_prefix, &sh_need);
            __syncthreads();
            prefix = sh_prefix;
            need = sh_need;
            mask |= 255u << shift;
        }
        if (prefix > t) t = prefix;
    }
    /* min-p: p >= min_p · p_max, i.e. logit >= max + T·ln(min_p) */
    float min_p = p.min_p ? p.min_p[r] : 0.0f;
    if (min_p > 0.0f) {
        uint32_t tm = key_of(mx + T * logf(min_p));
        if (tm > t) t = tm;
    }
    /* the draw: contiguous chunks per thread, block scan, one thread walks */
    int64_t chunk = (V + blockDim.x - 1) / blockDim.x;
    int64_t c0 = threadIdx.x * chunk, c1 = c0 + chunk < V ? c0 + chunk : V;
    float mine = 0.0f;
    for (int64_t c = c0; c < c1; c++)
        if (key_of(l[c]) >= t) mine += expf((l[c] - mx) * invT);
    scan[threadIdx.x] = mine;
    if (threadIdx.x == 0) chosen = -1;
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off <<= 1) {   /* inclusive Hillis-Steele scan */
        float add = threadIdx.x >= (unsigned)off ? scan[threadIdx.x - off] : 0.0f;
        __syncthreads();
        scan[threadIdx.x] += add;
        __syncthreads();
    }
    float total = scan[blockDim.x - 1];
    float target = p.u[r] * total;
    float before = threadIdx.x ? scan[threadIdx.x - 1] : 0.0f;
    if (mine > 0.0f && target >= before && target < scan[threadIdx.x]) {
        float run = before;
        int64_t pick = -1;
        for (int64_t c = c0; c < c1 && pick < 0; c++) {
            if (key_of(l[c]) < t) continue;
            run += expf((l[c] - mx) * invT);
            if (run > target) pick = c;
        }
        if (pick < 0) pick = c1 - 1;   /* rounding at the chunk's end */
        chosen = pick;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int64_t pick = chosen;
        if (pick < 0) {
            /* target at or past the total (u close to 1 and rounding): the
             * last kept id */
            for (int64_t c = V - 1; c >= 0; c--)
                if (key_of(l[c]) >= t) {
                    pick = c;
                    break;
                }
        }
        p.out[r] = (int32_t)(pick < 0 ? 0 : pick);
    }
}

extern "C" void k3_cuda_sample_launch(const struct k3_sample_params *p, cudaStream_t s)
{
    if (p->n <= 0) return;
    K3_CHECK(p->vocab >= 1 && p->vocab < (1LL << 31), "sampling over %lld ids", (long long)p->vocab);
    K3_CHECK(!p->temperature || p->u, "sampling with a temperature needs u");
    sample_kernel<<<k3_grid_rows(p->n), SAMPLE_THREADS, 0, s>>>(*p);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_sample(struct k3_backend *be, const struct k3_sample_params *p)
{
    k3_cuda_sample_launch(p, k3_cuda_impl(be)->stream);
}
