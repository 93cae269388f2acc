/* shard.h - cutting the weights to one rank's slice (see shard.c). */
#ifndef K3_MODEL_SHARD_H
#define K3_MODEL_SHARD_H

#include "core/err.h"
#include "model/parallel.h"
#include "model/weights.h"

/* Rows [r0, r0 + nr) of a matrix as a matrix of its own. */
struct k3_mat k3_mat_rows(const struct k3_mat *m, int64_t r0, int64_t nr);
/* Columns [c0, c0 + nc) (MXFP4: at multiples of 32). */
int k3_mat_cols(const struct k3_mat *m, int64_t c0, int64_t nc, struct k3_mat *out,
                struct k3_err *err);

/* Narrows w (loaded in full as views) to shard s. Call once, after
 * k3_weights_load. A no-op for tp = ep = 1. */
int k3_weights_shard(struct k3_weights *w, const struct k3_shard *s, struct k3_err *err);

/* Bytes of the weight views this rank holds: dense (attention, MLPs, shared
 * experts, embeddings, head) and routed experts. */
void k3_weights_shard_bytes(const struct k3_weights *w, int64_t *dense_bytes, int64_t *expert_bytes);

#endif
