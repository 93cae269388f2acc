/* kda_gate.h - the KDA decay gate on the GPU (ops.h, struct k3_kda_gate_params). */
#ifndef K3_KERNELS_CUDA_KDA_GATE_H
#define K3_KERNELS_CUDA_KDA_GATE_H

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void k3_cuda_kda_gate_launch(const struct k3_kda_gate_params *p, cudaStream_t s);
void k3_cuda_kda_gate(struct k3_backend *be, const struct k3_kda_gate_params *p);

#ifdef __cplusplus
}
#endif

#endif
