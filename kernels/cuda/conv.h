/* conv.h - KDA short causal depthwise conv + SiLU on the GPU (ops.h, struct k3_conv_params). */
#ifndef K3_KERNELS_CUDA_CONV_H
#define K3_KERNELS_CUDA_CONV_H

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void k3_cuda_conv_launch(const struct k3_conv_params *p, cudaStream_t s);
void k3_cuda_conv(struct k3_backend *be, const struct k3_conv_params *p);

#ifdef __cplusplus
}
#endif

#endif
