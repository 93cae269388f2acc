/* glu.h - gated linear unit activations: SiLU-GLU (Kimi Linear), SiTU-GLU (K3). */
#ifndef K3_KERNELS_CPU_GLU_H
#define K3_KERNELS_CPU_GLU_H

#include "kernels/ops.h"

void k3_cpu_glu(struct k3_backend *be, const struct k3_glu_params *p);
/* One element, shared with the MoE op. */
float k3_glu_value(enum k3_glu_act act, float g, float u, double beta, double beta_lin);

#endif
