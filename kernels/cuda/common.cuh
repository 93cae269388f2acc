/* common.cuh - what the CUDA op files share: block reductions, grid sizing.
 * Device-only helpers; included by .cu files only. */
#ifndef K3_KERNELS_CUDA_COMMON_CUH
#define K3_KERNELS_CUDA_COMMON_CUH

#include <stdint.h>

#include "kernels/cuda/cuda_check.h"

/* Sum over the block (blockDim.x a multiple of 32, at most 1024). Every thread
 * gets the result. `sh` holds 32 floats; the function syncs before reusing it,
 * so it may be called several times in a row. */
static __device__ __forceinline__ float k3_block_sum(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    __syncthreads();                      /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < n_warp ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float k3_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Blocks for an elementwise kernel over `n` items at `per_block` per block,
 * capped (grid-stride loops cover the rest). */
static inline unsigned k3_grid_1d(int64_t n, int per_block)
{
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > 65535LL * 16) b = 65535LL * 16;
    return (unsigned)b;
}

/* Row x column kernels over [n_rows, n_cols]: blockIdx.y walks rows (with a
 * grid-stride loop past 65535), blockIdx.x * blockDim.x + threadIdx.x walks
 * columns in units of `vec` elements. No 64-bit division per element. */
static inline dim3 k3_grid_2d(int64_t n_rows, int64_t n_cols, int vec, int threads)
{
    int64_t units = (n_cols + vec - 1) / vec;
    int64_t gx = (units + threads - 1) / threads;
    int64_t gy = n_rows < 65535 ? n_rows : 65535;
    return dim3((unsigned)(gx > 0 ? gx : 1), (unsigned)(gy > 0 ? gy : 1), 1);
}

static inline int k3_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Row-parallel kernels: one block per row, blocks capped at 2^31-1 by CUDA;
 * k3 never has that many rows in one step. */
static inline unsigned k3_grid_rows(int64_t n_rows)
{
    K3_CHECK(n_rows >= 0 && n_rows < (1LL << 31), "%lld rows in one launch", (long long)n_rows);
    return (unsigned)(n_rows > 0 ? n_rows : 1);
}

#endif
