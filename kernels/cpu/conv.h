/* conv.h - KDA short causal depthwise conv + SiLU with a decode tail. */
#ifndef K3_KERNELS_CPU_CONV_H
#define K3_KERNELS_CPU_CONV_H

#include "kernels/ops.h"

void k3_cpu_conv(struct k3_backend *be, const struct k3_conv_params *p);

#endif
