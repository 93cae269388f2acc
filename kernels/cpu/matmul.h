/* matmul.h - y = x·wᵀ (linear layer) or y = x·w, weights f32/bf16/MXFP4. */
#ifndef K3_KERNELS_CPU_MATMUL_H
#define K3_KERNELS_CPU_MATMUL_H

#include "kernels/ops.h"

void k3_cpu_matmul(struct k3_backend *be, const struct k3_matmul_params *p);

#endif
