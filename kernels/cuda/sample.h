/* sample.h - token sampling on the GPU: greedy, temperature, top-k, top-p,
 * min-p, one block per row of logits. A CUDA-side extension: ops.h has no
 * sampling op yet (proposed: move this params struct there with a CPU twin
 * in the engine's sampler). Penalties and constrained masks are applied to
 * the logits before this op (not yet on the GPU). */
#ifndef K3_KERNELS_CUDA_SAMPLE_H
#define K3_KERNELS_CUDA_SAMPLE_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per row r of logits [n, vocab] (row stride ld), all arrays device memory:
 *   temperature[r] <= 0 (or the array NULL): greedy, argmax with ties to
 *   the lower id. Otherwise p ∝ exp(logit / T) restricted to
 *     top-k (top_k[r] > 0; ties at the k-th value are all kept), then
 *     top-p on that set (top_p[r] < 1: the smallest set of the largest
 *     probabilities whose mass reaches top_p, ties kept), and
 *     min-p (min_p[r] > 0: p >= min_p · p_max);
 *   out[r] = the first id, in id order, at which the running sum of the kept
 *   probabilities exceeds u[r] · (their total), u[r] uniform in [0, 1) from
 *   the engine's seeded generator. Deterministic for given inputs.
 * NULL top_k / top_p / min_p arrays mean "off" for every row. */
struct k3_sample_params {
    const float *logits;
    int64_t ld;
    int64_t n, vocab;
    const float *temperature;
    const int32_t *top_k;
    const float *top_p;
    const float *min_p;
    const float *u;
    int32_t *out;
};

void k3_cuda_sample_launch(const struct k3_sample_params *p, cudaStream_t s);
void k3_cuda_sample(struct k3_backend *be, const struct k3_sample_params *p);

#ifdef __cplusplus
}
#endif

#endif
