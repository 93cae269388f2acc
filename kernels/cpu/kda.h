/* kda.h - the KDA gated delta rule: recurrent (decode) and chunked (prefill). */
#ifndef K3_KERNELS_CPU_KDA_H
#define K3_KERNELS_CPU_KDA_H

#include "kernels/ops.h"

void k3_cpu_kda(struct k3_backend *be, const struct k3_kda_params *p);

#endif
