/* attn_res.h - the Block AttnRes mix on the GPU (ops.h, struct k3_attn_res_params),
 * and the mix fused with the RMSNorm that always follows it. */
#ifndef K3_KERNELS_CUDA_ATTN_RES_H
#define K3_KERNELS_CUDA_ATTN_RES_H

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The fused form (a CUDA-side extension of ops.h): out = AttnRes mix as in
 * k3_attn_res_params, and in the same pass normed[n, d] = RMSNorm(out) ·
 * norm_w (norm_w may be NULL). One read of the candidates instead of two
 * kernels and a round trip of `out` through memory. */
struct k3_attn_res_norm_params {
    struct k3_attn_res_params mix;
    const float *norm_w;
    float *normed;
    double norm_eps;
};

void k3_cuda_attn_res_launch(const struct k3_attn_res_params *p, cudaStream_t s);
void k3_cuda_attn_res_norm_launch(const struct k3_attn_res_norm_params *p, cudaStream_t s);
void k3_cuda_attn_res(struct k3_backend *be, const struct k3_attn_res_params *p);
void k3_cuda_attn_res_norm(struct k3_backend *be, const struct k3_attn_res_norm_params *p);

#ifdef __cplusplus
}
#endif

#endif
