/* moe.h - routed experts: weighted sum of gated-MLP experts per token. */
#ifndef K3_KERNELS_CPU_MOE_H
#define K3_KERNELS_CPU_MOE_H

#include "kernels/ops.h"

void k3_cpu_moe(struct k3_backend *be, const struct k3_moe_params *p);

#endif
