/* router.h - MoE router: sigmoid scores, biased top-k selection, renormalised weights. */
#ifndef K3_KERNELS_CPU_ROUTER_H
#define K3_KERNELS_CPU_ROUTER_H

#include "kernels/ops.h"

void k3_cpu_router(struct k3_backend *be, const struct k3_router_params *p);

#endif
