/* attn.h - causal softmax attention (MLA prefill, and absorbed MLA decode). */
#ifndef K3_KERNELS_CPU_ATTN_H
#define K3_KERNELS_CPU_ATTN_H

#include "kernels/ops.h"

void k3_cpu_attn(struct k3_backend *be, const struct k3_attn_params *p);

#endif
