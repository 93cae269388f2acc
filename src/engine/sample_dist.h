/* sample_dist.h - picking tokens from vocabulary-parallel logits.
 *
 * With lm_head split by vocabulary rows over the `tp` ranks of a group, each
 * rank holds logits [v0, v1) of every token. Instead of gathering whole rows
 * (vocab x 4 bytes per token), ranks exchange a few numbers:
 *   greedy: (local max, its global id, local sum of exp(x - local max)) per
 *           rank -> the global argmax (lowest id among equal maxima, as on one
 *           rank) and its log-probability;
 *   top-k:  each rank's k best (value, id) -> the group's k best, in order.
 * Both are collective over the group's communicator (every member calls). */
#ifndef K3_ENGINE_SAMPLE_DIST_H
#define K3_ENGINE_SAMPLE_DIST_H

#include <stdint.h>

#include "mpi/comm.h"

/* x: this rank's logits of one token, ids v0 .. v0 + nv - 1. comm may be NULL
 * (one rank holds the whole vocabulary). */
void k3_dist_greedy(const float *x, int64_t nv, int64_t v0, struct k3_comm *comm, int32_t *token,
                    float *logprob);

/* The k largest logits of the whole vocabulary, descending (ties: lower id
 * first), with their log-probabilities. k <= 64. */
void k3_dist_topk(const float *x, int64_t nv, int64_t v0, int k, struct k3_comm *comm, int32_t *ids,
                  float *logprobs);

#endif
