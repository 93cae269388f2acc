/* ew.h - elementwise add / sigmoid / mul-sigmoid on the GPU (ops.h, struct k3_ew_params). */
#ifndef K3_KERNELS_CUDA_EW_H
#define K3_KERNELS_CUDA_EW_H

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void k3_cuda_ew_launch(const struct k3_ew_params *p, cudaStream_t s);
void k3_cuda_ew(struct k3_backend *be, const struct k3_ew_params *p);

#ifdef __cplusplus
}
#endif

#endif
