/* norm.h - RMSNorm (optionally sigmoid-gated, per head) and L2 norm. */
#ifndef K3_KERNELS_CPU_NORM_H
#define K3_KERNELS_CPU_NORM_H

#include "kernels/ops.h"

void k3_cpu_rmsnorm(struct k3_backend *be, const struct k3_rmsnorm_params *p);
void k3_cpu_l2norm(struct k3_backend *be, const struct k3_l2norm_params *p);

#endif
