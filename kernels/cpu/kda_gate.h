/* kda_gate.h - KDA decay gate in log space, both forms (softplus, lower bound). */
#ifndef K3_KERNELS_CPU_KDA_GATE_H
#define K3_KERNELS_CPU_KDA_GATE_H

#include "kernels/ops.h"

void k3_cpu_kda_gate(struct k3_backend *be, const struct k3_kda_gate_params *p);

#endif
