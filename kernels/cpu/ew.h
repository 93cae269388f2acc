/* ew.h - elementwise ops (add, sigmoid, a·sigmoid(b)). */
#ifndef K3_KERNELS_CPU_EW_H
#define K3_KERNELS_CPU_EW_H

#include "kernels/ops.h"

void k3_cpu_ew(struct k3_backend *be, const struct k3_ew_params *p);

#endif
