/* dtype.h - element types of checkpoint tensors and their scalar conversions.
 *
 * The conversions are the exact ones (no rounding shortcuts on decode):
 *   bf16 -> f32: the top 16 bits of an IEEE float;
 *   f32 -> bf16: round to nearest even, NaN kept quiet;
 *   E2M1 (MXFP4 element, 4 bits): sign, 2 exponent bits (bias 1), 1 mantissa bit,
 *     values {0, 0.5, 1, 1.5, 2, 3, 4, 6} and their negatives;
 *   E8M0 (MX block scale, 8 bits): 2^(e-127); 0xFF is NaN;
 *   F8 E4M3 (fn variant, no infinities): bias 7, 0x7F/0xFF are NaN, max 448.
 * research/model-architecture.md §5.3 gives the MXFP4 layout. */
#ifndef K3_CORE_DTYPE_H
#define K3_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum k3_dtype {
    K3_DTYPE_F32 = 0,
    K3_DTYPE_BF16,
    K3_DTYPE_F16,
    K3_DTYPE_F8_E4M3,
    K3_DTYPE_U8,
    K3_DTYPE_I32,
    K3_DTYPE_I64,
    K3_DTYPE_COUNT
};

size_t k3_dtype_bytes(enum k3_dtype t);
/* The safetensors name ("F32", "BF16", "F8_E4M3", ...). */
const char *k3_dtype_name(enum k3_dtype t);
/* Parses a safetensors dtype name; returns -1 if unknown. */
int k3_dtype_parse(const char *name, enum k3_dtype *out);

static inline float k3_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}

static inline uint16_t k3_f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + rounding) >> 16);
}

float k3_f16_to_f32(uint16_t h);
float k3_e2m1_to_f32(uint8_t nibble);
float k3_e8m0_to_f32(uint8_t e);
float k3_f8e4m3_to_f32(uint8_t b);

#ifdef __cplusplus
}
#endif

#endif
