/* embed.h - embedding rows to fp32 on the GPU (ops.h, struct k3_embed_params). */
#ifndef K3_KERNELS_CUDA_EMBED_H
#define K3_KERNELS_CUDA_EMBED_H

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* err_word: device int[2]; a bad id sets {K3_CUDA_ERR_EMBED_ID, id} (first one
 * wins) and its output row becomes NaN. */
void k3_cuda_embed_launch(const struct k3_embed_params *p, int *err_word, cudaStream_t s);
void k3_cuda_embed(struct k3_backend *be, const struct k3_embed_params *p);

#ifdef __cplusplus
}
#endif

#endif
