/* matmul.h - the dense matmul of ops.h (struct k3_matmul_params) through
 * cuBLASLt: BF16/F16 weights with fp32 accumulation, F32 weights in fp32. */
#ifndef K3_KERNELS_CUDA_MATMUL_H
#define K3_KERNELS_CUDA_MATMUL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct k3_cuda_matmul_ctx;

/* ws: cuBLASLt workspace; xconv: room for 16-bit copies of the activations
 * (larger inputs are processed in row chunks that fit). Both device memory
 * the caller owns (the backend's scratch arena). */
struct k3_cuda_matmul_ctx *k3_cuda_matmul_ctx_init(void *ws, size_t ws_bytes, void *xconv,
                                                   size_t xconv_bytes);
void k3_cuda_matmul_ctx_free(struct k3_cuda_matmul_ctx *ctx);

/* Plans (cuBLASLt descriptors + chosen algorithm) are cached by shape,
 * strides and alignment; the first call for a shape pays the heuristic. */
void k3_cuda_matmul_launch(struct k3_cuda_matmul_ctx *ctx, const struct k3_matmul_params *p,
                           cudaStream_t s);
void k3_cuda_matmul(struct k3_backend *be, const struct k3_matmul_params *p);

/* cuBLASLt bf16 GEMM on raw operands, for the benchmark's peak:
 * D[m, n] (col-major, fp32) = A[k, m]ᵀ · B[k, n], bf16 inputs, fp32 accumulate. */
void k3_cuda_gemm_bf16_raw(struct k3_cuda_matmul_ctx *ctx, const void *a, const void *b, float *d,
                           int64_t m, int64_t n, int64_t k, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
