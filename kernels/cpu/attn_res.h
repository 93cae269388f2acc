/* attn_res.h - Block Attention Residuals mixing over depth. */
#ifndef K3_KERNELS_CPU_ATTN_RES_H
#define K3_KERNELS_CPU_ATTN_RES_H

#include "kernels/ops.h"

void k3_cpu_attn_res(struct k3_backend *be, const struct k3_attn_res_params *p);

#endif
