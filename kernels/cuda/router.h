/* router.h - router scores, top-k and renormalisation on the GPU (ops.h, struct k3_router_params). */
#ifndef K3_KERNELS_CUDA_ROUTER_H
#define K3_KERNELS_CUDA_ROUTER_H

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void k3_cuda_router_launch(const struct k3_router_params *p, cudaStream_t s);
void k3_cuda_router(struct k3_backend *be, const struct k3_router_params *p);

#ifdef __cplusplus
}
#endif

#endif
