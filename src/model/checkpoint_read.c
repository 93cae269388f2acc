/* checkpoint_read.c - slices of mapped tensors (see checkpoint.h): rows, columns,
 * and a linear's window dequantized to f32.
 *
 * Each function reads only the bytes of its slice through the mapping, so a
 * rank that asks for its rows or its experts faults in only those pages (the
 * shards are mapped with MADV_RANDOM: no readahead). Decoding is exact: bf16,
 * f16 and f8 widen to f32; MXFP4 is E2M1 times the block's E8M0 scale
 * (research/model-architecture.md §5.3). Written element by element for
 * clarity: this is the reference the fast paths are checked against. */
#include <string.h>

#include "model/checkpoint.h"

int k3_tensor_read_rows(const struct k3_tensor *t, int64_t r0, int64_t r1, void *dst,
                        size_t dst_bytes, struct k3_err *err)
{
    if (t->n_dims < 1 || r0 < 0 || r1 < r0 || r1 > t->shape[0])
        return k3_err_set(err, "tensor %s: rows [%lld, %lld) are outside its %lld rows", t->name,
                          (long long)r0, (long long)r1, t->n_dims ? (long long)t->shape[0] : 0);
    uint64_t row_bytes = t->shape[0] ? t->n_bytes / (uint64_t)t->shape[0] : 0;
    uint64_t n = row_bytes * (uint64_t)(r1 - r0);
    if (dst_bytes < n)
        return k3_err_set(err, "tensor %s: rows [%lld, %lld) need %llu bytes, the buffer has %zu",
                          t->name, (long long)r0, (long long)r1, (unsigned long long)n, dst_bytes);
    memcpy(dst, (const uint8_t *)t->data + row_bytes * (uint64_t)r0, n);
    return 0;
}

int k3_tensor_read_cols(const struct k3_tensor *t, int64_t c0, int64_t c1, void *dst,
                        size_t dst_bytes, struct k3_err *err)
{
    int64_t cols = t->n_dims ? t->shape[t->n_dims - 1] : 0;
    if (t->n_dims < 1 || c0 < 0 || c1 < c0 || c1 > cols)
        return k3_err_set(err, "tensor %s: columns [%lld, %lld) are outside its %lld columns",
                          t->name, (long long)c0, (long long)c1, (long long)cols);
    uint64_t es = k3_dtype_bytes(t->dtype);
    uint64_t rows = 1;
    for (int i = 0; i < t->n_dims - 1; i++) rows *= (uint64_t)t->shape[i];
    uint64_t w = (uint64_t)(c1 - c0) * es;
    if (dst_bytes < rows * w)
        return k3_err_set(err, "tensor %s: columns [%lld, %lld) need %llu bytes, the buffer has "
                          "%zu", t->name, (long long)c0, (long long)c1,
                          (unsigned long long)(rows * w), dst_bytes);
    const uint8_t *src = (const uint8_t *)t->data + (uint64_t)c0 * es;
    for (uint64_t r = 0; r < rows; r++)
        memcpy((uint8_t *)dst + r * w, src + r * (uint64_t)cols * es, w);
    return 0;
}

static float plain_at(const struct k3_tensor *t, uint64_t i)
{
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case K3_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return k3_bf16_to_f32(h);
    }
    case K3_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return k3_f16_to_f32(h);
    }
    case K3_DTYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case K3_DTYPE_F8_E4M3: return k3_f8e4m3_to_f32(p[i]);
    default: return 0.0f; /* excluded by k3_checkpoint_linear */
    }
}

int k3_linear_read_f32(const struct k3_linear *lin, int64_t r0, int64_t r1, int64_t c0,
                       int64_t c1, float *dst, struct k3_err *err)
{
    const struct k3_tensor *t = lin->mxfp4 ? lin->packed : lin->weight;
    if (r0 < 0 || r1 < r0 || r1 > lin->out || c0 < 0 || c1 < c0 || c1 > lin->in)
        return k3_err_set(err, "linear %s: [%lld:%lld, %lld:%lld] is outside its shape [%lld, %lld]",
                          t ? t->name : "?", (long long)r0, (long long)r1, (long long)c0,
                          (long long)c1, (long long)lin->out, (long long)lin->in);
    const int64_t n = c1 - c0;
    for (int64_t r = r0; r < r1; r++) {
        float *row = dst + (r - r0) * n;
        if (!lin->mxfp4) {
            for (int64_t c = c0; c < c1; c++) row[c - c0] = plain_at(t, (uint64_t)(r * lin->in + c));
            continue;
        }
        /* research §5.3: element 2j in the low nibble, 2j+1 in the high one;
         * one E8M0 scale per 32 consecutive inputs. */
        const uint8_t *packed = (const uint8_t *)lin->packed->data + (uint64_t)r * (uint64_t)(lin->in / 2);
        const uint8_t *scale = (const uint8_t *)lin->scale->data + (uint64_t)r * (uint64_t)(lin->in / 32);
        for (int64_t c = c0; c < c1; c++) {
            uint8_t byte = packed[c / 2];
            uint8_t nib = (c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 0xf);
            row[c - c0] = k3_e2m1_to_f32(nib) * k3_e8m0_to_f32(scale[c / 32]);
        }
    }
    return 0;
}
