/* norm.h - RMSNorm (plain, weighted, sigmoid-gated) and L2 norm over rows on
 * the GPU (see ops.h, struct k3_rmsnorm_params / k3_l2norm_params). */
#ifndef K3_KERNELS_CUDA_NORM_H
#define K3_KERNELS_CUDA_NORM_H

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void k3_cuda_rmsnorm_launch(const struct k3_rmsnorm_params *p, cudaStream_t s);
void k3_cuda_l2norm_launch(const struct k3_l2norm_params *p, cudaStream_t s);
void k3_cuda_rmsnorm(struct k3_backend *be, const struct k3_rmsnorm_params *p);
void k3_cuda_l2norm(struct k3_backend *be, const struct k3_l2norm_params *p);

#ifdef __cplusplus
}
#endif

#endif
