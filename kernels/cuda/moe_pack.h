/* moe_pack.h - the device side of MoE dispatch/combine: gather token rows
 * into send order, and add each token's returning partial sums in a fixed
 * order. The layout (which row goes where) is computed on the host by
 * mpi/moe_dispatch.c; mpi/moe_dispatch_dev.c calls these through function
 * pointers (mpi/ may not include kernels/), see moe_dispatch_dev.h. */
#ifndef K3_KERNELS_CUDA_MOE_PACK_H
#define K3_KERNELS_CUDA_MOE_PACK_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i, :] = src[idx[i], :] for i < n_rows; rows of row_bytes bytes. */
struct k3_moe_gather_params {
    const void *src;        /* [*, row_bytes] */
    const int32_t *idx;     /* [n_rows], device */
    void *dst;              /* [n_rows, row_bytes] */
    int64_t n_rows;
    size_t row_bytes;
};
void k3_moe_gather_launch(const struct k3_moe_gather_params *p, cudaStream_t s);

/* out[t, :] = sum over k in [tok_first[t], tok_first[t + 1]) of
 * partial[tok_rows[k], :], in k order (rank order: the same sum every run),
 * fp32 accumulation; a token with no rows gets 0. partial is F32 or BF16. */
struct k3_moe_combine_params {
    const void *partial;      /* [*, dim] of dtype */
    enum k3_dtype dtype;
    const int32_t *tok_first; /* [n_tok + 1], device */
    const int32_t *tok_rows;  /* [tok_first[n_tok]], device */
    float *out;               /* [n_tok, dim] */
    int64_t n_tok;
    int dim;
};
void k3_moe_combine_launch(const struct k3_moe_combine_params *p, cudaStream_t s);

/* The identity expert of benchmarks and tests: y[i, :] = scale[i] * x[i, :],
 * x BF16, y F32 or BF16 (rounded to nearest even, like k3_f32_to_bf16). */
struct k3_moe_scale_params {
    const uint16_t *x;        /* [n_rows, dim] bf16 */
    const float *scale;       /* [n_rows], device */
    void *y;                  /* [n_rows, dim] of y_dtype */
    enum k3_dtype y_dtype;
    int64_t n_rows;
    int dim;
};
void k3_moe_scale_launch(const struct k3_moe_scale_params *p, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
