/* embed.h - token embedding lookup (rows of a weight table as fp32). */
#ifndef K3_KERNELS_CPU_EMBED_H
#define K3_KERNELS_CPU_EMBED_H

#include "kernels/ops.h"

void k3_cpu_embed(struct k3_backend *be, const struct k3_embed_params *p);

#endif
