/* mat.c - see mat.h. */
#include "kernels/cpu/mat.h"

#include <math.h>

#include "core/dtype.h"
#include "core/log.h"

float k3_mxfp4_value(uint8_t nibble, uint8_t scale)
{
    /* E8M0 0xFF is NaN; every other byte is the exact power 2^(e-127). ldexpf
     * keeps the product exact (E2M1 values have at most 2 significant bits). */
    if (scale == 0xFF) return NAN;
    return ldexpf(k3_e2m1_to_f32(nibble & 0xF), (int)scale - 127);
}

/* E2M1 codes 0..15 (model-architecture.md §5.1). */
static const float e2m1_values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* 2^(e-127) built from its bits: biased exponent e for e >= 1, the subnormal
 * 2^-127 for e = 0, NaN for 0xFF. Same value as ldexpf(1, e - 127). */
static float e8m0_pow2(uint8_t e)
{
    union { uint32_t u; float f; } v;
    if (e == 0xFF) return NAN;
    v.u = e ? (uint32_t)e << 23 : 0x00400000u;
    return v.f;
}

void k3_mat_row_f32(const struct k3_mat *w, int64_t r, int64_t c0, int64_t c1, float *out)
{
    switch (w->fmt) {
    case K3_WFMT_F32: {
        const float *src = (const float *)w->data + r * w->ld;
        for (int64_t c = c0; c < c1; c++) out[c - c0] = src[c];
        break;
    }
    case K3_WFMT_BF16: {
        const uint16_t *src = (const uint16_t *)w->data + r * w->ld;
        for (int64_t c = c0; c < c1; c++) out[c - c0] = k3_bf16_to_f32(src[c]);
        break;
    }
    case K3_WFMT_F16: {
        const uint16_t *src = (const uint16_t *)w->data + r * w->ld;
        for (int64_t c = c0; c < c1; c++) out[c - c0] = k3_f16_to_f32(src[c]);
        break;
    }
    case K3_WFMT_F8_E4M3: {
        const uint8_t *src = (const uint8_t *)w->data + r * w->ld;
        for (int64_t c = c0; c < c1; c++) out[c - c0] = k3_f8e4m3_to_f32(src[c]);
        break;
    }
    case K3_WFMT_MXFP4: {
        K3_CHECK(c0 % 2 == 0 && w->ld % 32 == 0, "MXFP4 row read at odd column %lld",
                 (long long)c0);
        const uint8_t *packed = (const uint8_t *)w->data + r * (w->ld / 2);
        const uint8_t *scale = w->scale + r * (w->ld / 32);
        /* Per 32-element block: the 16 E2M1 values times the block's power of
         * two, then a table lookup per element. E2M1 values have 2 significant
         * bits, so each product is exact (same bits as ldexpf per element). */
        float lut[16];
        int64_t lut_block = -1;
        for (int64_t c = c0; c < c1; c++) {
            if (c / 32 != lut_block) {
                lut_block = c / 32;
                float pow2 = e8m0_pow2(scale[lut_block]);
                for (int v = 0; v < 16; v++) lut[v] = e2m1_values[v] * pow2;
            }
            uint8_t byte = packed[c / 2];
            out[c - c0] = lut[(c & 1) ? (byte >> 4) : (byte & 0xF)];
        }
        break;
    }
    default:
        K3_FATAL("unknown weight format %d", (int)w->fmt);
    }
}
