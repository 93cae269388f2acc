/* embed.cu - out[i, :] = row ids[i] of the table as fp32, one block per token.
 * bf16/f16 -> fp32 is exact, so this matches the CPU twin bit for bit. An id
 * outside the vocabulary cannot be a host-side check (ids are on the device):
 * the kernel records it in the backend's error word and writes NaN, and
 * k3_cuda_backend_sync() turns that into a fatal error naming the id. */
#include "kernels/cuda/embed.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

static __global__ void embed_kernel(struct k3_embed_params p, enum k3_wfmt fmt, const void *data,
                                    int64_t rows, int64_t cols, int64_t ld, int vec4, int *err_word)
{
    int64_t i = blockIdx.x;
    int32_t id = p.ids[i];
    float *out = p.out + i * cols;
    if (id < 0 || id >= rows) {
        if (threadIdx.x == 0 && atomicCAS(err_word, 0, K3_CUDA_ERR_EMBED_ID) == 0)
            err_word[1] = id;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __int_as_float(0x7fc00000);
        return;
    }
    if (fmt == K3_WFMT_BF16 && vec4) {
        /* 4 bf16 (8 bytes) in, one float4 out */
        const uint2 *src = (const uint2 *)((const __nv_bfloat16 *)data + id * ld);
        for (int64_t c = threadIdx.x; c < cols / 4; c += blockDim.x) {
            uint2 v = src[c];
            ((float4 *)out)[c] = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                                             __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
        }
    } else if (fmt == K3_WFMT_BF16) {
        const __nv_bfloat16 *src = (const __nv_bfloat16 *)data + id * ld;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __bfloat162float(src[c]);
    } else if (fmt == K3_WFMT_F16) {
        const __half *src = (const __half *)data + id * ld;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __half2float(src[c]);
    } else {
        const float *src = (const float *)data + id * ld;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = src[c];
    }
}

extern "C" void k3_cuda_embed_launch(const struct k3_embed_params *p, int *err_word, cudaStream_t s)
{
    if (p->n <= 0) return;
    const struct k3_mat *w = p->w;
    K3_CHECK(w->fmt == K3_WFMT_BF16 || w->fmt == K3_WFMT_F16 || w->fmt == K3_WFMT_F32,
             "embed on the CUDA backend takes BF16, F16 or F32 tables, not format %d",
             (int)w->fmt);
    /* bf16 rows as 8-byte loads: every row start 8-byte aligned, whole groups of 4 */
    int vec4 = w->cols % 4 == 0 && w->ld % 4 == 0 && ((uintptr_t)w->data & 7) == 0 &&
               k3_aligned16(p->out);
    embed_kernel<<<k3_grid_rows(p->n), 256, 0, s>>>(*p, w->fmt, w->data, w->rows, w->cols, w->ld,
                                                    vec4, err_word);
    K3_CHECK_LAUNCH();
}

extern "C" void k3_cuda_embed(struct k3_backend *be, const struct k3_embed_params *p)
{
    struct k3_cuda_backend *cb = k3_cuda_impl(be);
    k3_cuda_embed_launch(p, cb->err_word, cb->stream);
}
