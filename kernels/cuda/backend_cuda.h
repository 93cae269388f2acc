/* backend_cuda.h - the CUDA backend: the same `struct k3_backend` op table as
 * the CPU backend (kernels/ops.h), run on one GPU, one stream.
 *
 * Pointers. Every data pointer in an op's params (activations, weights'
 * `data`/`scale`, ids, norm weights, biases, outputs) is a device pointer.
 * Arrays of descriptors that the params point at (`struct k3_mat`, the
 * AttnRes candidate list) live in host memory and hold device pointers: they
 * are read on the host when the op is enqueued. Ops are asynchronous on the
 * backend's stream; k3_cuda_backend_sync() waits and reports device-side
 * errors (a token id outside the vocabulary, for example) as a fatal error.
 * The stream is non-blocking: it does not wait for the legacy default stream,
 * so host code that fills or reads buffers with plain cudaMemcpy/cudaMemset
 * must synchronise (cudaDeviceSynchronize) before and after the ops touch
 * them, or use the backend's stream. Uploads below are on the stream and
 * complete before they return.
 *
 * Memory. One cudaMalloc at start-up, carved into four arenas sized by the
 * caller (weights, activations, caches, scratch). Nothing is allocated per
 * step: the activation arena is a stack (mark/reset per step) and the op
 * scratch (bf16 copies of GEMM inputs, the cuBLASLt workspace) is owned by the
 * backend. Running out of an arena is fatal, naming the arena, the request and
 * the setting to raise.
 *
 * Ops that have no CUDA kernel yet (KDA, attention, routed MoE experts, FP8
 * and MXFP4 matmuls) are fatal with a message naming the op: no silent CPU
 * detour. k3_cuda_op_supported() says which is which.
 *
 * What should move into kernels/ops.h (an interface change for the owner of
 * ops.h): the arena/upload hooks (be->alloc, be->upload, be->sync) so that
 * model code can place weights and activations without knowing the backend. */
#ifndef K3_KERNELS_CUDA_BACKEND_CUDA_H
#define K3_KERNELS_CUDA_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/ops.h"
#include "kernels/cuda/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A bump allocator over one slice of the device allocation. */
struct k3_cuda_arena {
    const char *name;       /* "weights", "activations", ... (for messages) */
    const char *knob;       /* the k3_cuda_config field that sizes it */
    char *base;
    size_t size_bytes, used_bytes, peak_bytes;
};

/* Sizes of the arenas, decided at start-up from the model and deployment. */
struct k3_cuda_config {
    int local_rank;                 /* picks the device (device.h) */
    size_t weights_bytes;           /* this rank's weight slice, as stored */
    size_t act_bytes;               /* activations of the largest step */
    size_t cache_bytes;             /* MLA blocks, KDA states */
    size_t scratch_bytes;           /* op scratch: bf16 GEMM inputs (0: 64 MiB) */
};

/* All arena allocations are aligned to this (cuBLASLt's preferred alignment). */
#define K3_CUDA_ALIGN 256

void *k3_cuda_arena_alloc(struct k3_cuda_arena *a, size_t bytes, const char *what);
static inline size_t k3_cuda_arena_mark(const struct k3_cuda_arena *a) { return a->used_bytes; }
static inline void k3_cuda_arena_reset(struct k3_cuda_arena *a, size_t mark) { a->used_bytes = mark; }

/* The backend's private state (be->impl). */
struct k3_cuda_matmul_ctx;
struct k3_cuda_backend {
    struct k3_cuda_device dev;
    cudaStream_t stream;
    void *device_mem;               /* the one allocation all arenas live in */
    size_t device_mem_bytes;
    struct k3_cuda_arena weights, act, cache, scratch;
    int *err_word;                  /* device: first device-side error code (0: none) */
    struct k3_cuda_matmul_ctx *mm;  /* cuBLASLt handle, workspace, plan cache */
    float *op_scratch;              /* small per-op partial sums (AttnRes split path) */
    size_t op_scratch_floats;
};

/* Device-side error codes written to err_word by kernels. */
enum k3_cuda_err {
    K3_CUDA_ERR_NONE = 0,
    K3_CUDA_ERR_EMBED_ID = 1,       /* token id outside [0, vocab) */
};

int k3_cuda_backend_init(struct k3_backend *be, const struct k3_cuda_config *cfg);
void k3_cuda_backend_free(struct k3_backend *be);

static inline struct k3_cuda_backend *k3_cuda_impl(struct k3_backend *be)
{
    return (struct k3_cuda_backend *)be->impl;
}

/* Waits for the stream; fatal on a CUDA error or a device-side error. */
void k3_cuda_backend_sync(struct k3_backend *be);

/* 1 if the op (a field name of struct k3_ops: "matmul", "kda", ...) runs on
 * the GPU, 0 if calling it is a fatal "not on the GPU yet". For matmul this is
 * about the BF16/F16/F32 formats; FP8 and MXFP4 are not yet. */
int k3_cuda_op_supported(const char *op);

/* Weight upload into the weights arena (synchronous: the host copy may be an
 * mmap that goes away). The device copy keeps the stored format (MXFP4 stays
 * packed, with its scales); rows are re-strided so that each row starts
 * 16-byte aligned (bf16/f16/f32) or on a 32-element block (MXFP4).
 * `dev` gets device pointers; `host` may have ld > cols (a TP slice). */
void k3_cuda_upload_mat(struct k3_backend *be, const struct k3_mat *host, struct k3_mat *dev,
                        const char *what);
/* bytes from host into the weights arena; returns the device pointer. */
void *k3_cuda_upload(struct k3_backend *be, const void *host, size_t bytes, const char *what);

#ifdef __cplusplus
}
#endif

#endif
