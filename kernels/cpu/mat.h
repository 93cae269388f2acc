/* mat.h - reading rows of a weight matrix (struct k3_mat) as fp32.
 *
 * The one place that decodes stored weight formats: bf16/f16/f8 -> fp32 (exact) and
 * MXFP4 -> fp32 (exact: E2M1 value · 2^(e-127), research/model-architecture.md
 * §5.1/§5.3; element 2j is the low nibble of byte j). */
#ifndef K3_KERNELS_CPU_MAT_H
#define K3_KERNELS_CPU_MAT_H

#include <stdint.h>

#include "kernels/ops.h"

/* out[c - c0] = w[r, c] for c in [c0, c1). For MXFP4, c0 must be even. */
void k3_mat_row_f32(const struct k3_mat *w, int64_t r, int64_t c0, int64_t c1, float *out);

/* The exact value of one MXFP4 element (nibble) under an E8M0 scale byte. */
float k3_mxfp4_value(uint8_t nibble, uint8_t scale);

#endif
