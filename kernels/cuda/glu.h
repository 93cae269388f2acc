/* glu.h - SiLU-GLU and SiTU-GLU on the GPU (see ops.h, struct k3_glu_params). */
#ifndef K3_KERNELS_CUDA_GLU_H
#define K3_KERNELS_CUDA_GLU_H

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void k3_cuda_glu_launch(const struct k3_glu_params *p, cudaStream_t s);
void k3_cuda_glu(struct k3_backend *be, const struct k3_glu_params *p);

#ifdef __cplusplus
}
#endif

#endif
