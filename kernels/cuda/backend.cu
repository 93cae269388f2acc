/* backend.cu - the CUDA backend's op table, its arenas and weight uploads
 * (see backend_cuda.h). */
#include "kernels/cuda/backend_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attn_res.h"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embed.h"
#include "kernels/cuda/ew.h"
#include "kernels/cuda/glu.h"
#include "kernels/cuda/kda_gate.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/router.h"

#define WORKSPACE_BYTES (32u << 20)       /* cuBLASLt workspace: enough for split-K on Hopper */
#define DEFAULT_SCRATCH_BYTES (64u << 20) /* bf16 copies of GEMM inputs: 4096 rows × 8192 */
#define OP_SCRATCH_BYTES (1u << 20)       /* per-op partials: AttnRes split, 32 tokens × 248 blocks */

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

extern "C" void *k3_cuda_arena_alloc(struct k3_cuda_arena *a, size_t bytes, const char *what)
{
    size_t off = round_up(a->used_bytes, K3_CUDA_ALIGN);
    if (off + bytes > a->size_bytes)
        K3_FATAL("the %s arena is full: %s needs %zu bytes, %zu of %zu are in use; raise %s "
                 "(sized at start-up, nothing is allocated per step)", a->name, what, bytes,
                 a->used_bytes, a->size_bytes, a->knob);
    a->used_bytes = off + bytes;
    if (a->used_bytes > a->peak_bytes) a->peak_bytes = a->used_bytes;
    return a->base + off;
}

/* Ops that have no kernel yet: fatal, never a silent CPU detour. */
#define NOT_YET(op, params, later)                                             \
    static void k3_cuda_##op(struct k3_backend *be, const struct params *p)    \
    {                                                                          \
        (void)be;                                                              \
        (void)p;                                                               \
        K3_FATAL("op '" #op "' is not on the CUDA backend yet (" later "); "  \
                 "run this model with backend.kind = \"cpu\" until then");     \
    }
NOT_YET(kda, k3_kda_params, "KDA kernels: a later issue")
NOT_YET(attn, k3_attn_params, "MLA attention kernels: a later issue")
NOT_YET(moe, k3_moe_params, "MXFP4 routed-expert kernels: a later issue")

static const struct k3_ops cuda_ops = {
    /* .name */ "cuda",
    /* .matmul */ k3_cuda_matmul,
    /* .embed */ k3_cuda_embed,
    /* .rmsnorm */ k3_cuda_rmsnorm,
    /* .l2norm */ k3_cuda_l2norm,
    /* .conv */ k3_cuda_conv,
    /* .kda_gate */ k3_cuda_kda_gate,
    /* .kda */ k3_cuda_kda,
    /* .attn */ k3_cuda_attn,
    /* .glu */ k3_cuda_glu,
    /* .router */ k3_cuda_router,
    /* .moe */ k3_cuda_moe,
    /* .attn_res */ k3_cuda_attn_res,
    /* .ew */ k3_cuda_ew,
};

extern "C" int k3_cuda_op_supported(const char *op)
{
    static const char *const yes[] = {"matmul", "embed", "rmsnorm", "l2norm", "conv",
                                       "kda_gate", "glu", "router", "attn_res", "ew"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!strcmp(op, yes[i])) return 1;
    return 0;
}

static void arena_carve(struct k3_cuda_arena *a, const char *name, const char *knob, char **cur,
                        size_t bytes)
{
    a->name = name;
    a->knob = knob;
    a->base = *cur;
    a->size_bytes = bytes;
    a->used_bytes = a->peak_bytes = 0;
    *cur += round_up(bytes, K3_CUDA_ALIGN);
}

extern "C" int k3_cuda_backend_init(struct k3_backend *be, const struct k3_cuda_config *cfg)
{
    memset(be, 0, sizeof *be);
    struct k3_cuda_backend *cb =
        (struct k3_cuda_backend *)calloc(1, sizeof(struct k3_cuda_backend));
    if (!cb) return -1;
    k3_cuda_device_init(&cb->dev, cfg->local_rank);
    K3_CHECK_CUDA(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
    size_t scratch = cfg->scratch_bytes ? cfg->scratch_bytes : DEFAULT_SCRATCH_BYTES;
    size_t total = round_up(cfg->weights_bytes, K3_CUDA_ALIGN) +
                   round_up(cfg->act_bytes, K3_CUDA_ALIGN) +
                   round_up(cfg->cache_bytes, K3_CUDA_ALIGN) + round_up(scratch, K3_CUDA_ALIGN) +
                   WORKSPACE_BYTES + OP_SCRATCH_BYTES + K3_CUDA_ALIGN;
    cudaError_t rc = cudaMalloc(&cb->device_mem, total);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        K3_FATAL("cannot allocate the device arenas: %zu MiB asked (weights %zu, activations "
                 "%zu, caches %zu, scratch %zu MiB), %zu MiB free on %s: %s", total >> 20,
                 cfg->weights_bytes >> 20, cfg->act_bytes >> 20, cfg->cache_bytes >> 20,
                 scratch >> 20, cb->dev.mem_free_bytes >> 20, cb->dev.name,
                 cudaGetErrorString(rc));
    }
    cb->device_mem_bytes = total;
    char *cur = (char *)cb->device_mem;
    arena_carve(&cb->weights, "weights", "weights_bytes", &cur, cfg->weights_bytes);
    arena_carve(&cb->act, "activations", "act_bytes", &cur, cfg->act_bytes);
    arena_carve(&cb->cache, "cache", "cache_bytes", &cur, cfg->cache_bytes);
    arena_carve(&cb->scratch, "scratch", "scratch_bytes", &cur, scratch);
    void *ws = cur;
    cur += WORKSPACE_BYTES;
    cb->op_scratch = (float *)cur;
    cb->op_scratch_floats = OP_SCRATCH_BYTES / sizeof(float);
    cur += OP_SCRATCH_BYTES;
    cb->err_word = (int *)cur;
    K3_CHECK_CUDA(cudaMemsetAsync(cb->err_word, 0, 2 * sizeof(int), cb->stream));
    K3_CHECK_CUDA(cudaStreamSynchronize(cb->stream));
    void *xconv = k3_cuda_arena_alloc(&cb->scratch, scratch, "GEMM input copies");
    cb->mm = k3_cuda_matmul_ctx_init(ws, WORKSPACE_BYTES, xconv, scratch);
    be->ops = &cuda_ops;
    be->impl = cb;
    be->n_threads = 1;
    K3_INFO("CUDA backend on %s (sm_%d%d, %d SMs): %zu MiB of arenas", cb->dev.name,
            cb->dev.sm_major, cb->dev.sm_minor, cb->dev.n_sms, total >> 20);
    return 0;
}

extern "C" void k3_cuda_backend_free(struct k3_backend *be)
{
    struct k3_cuda_backend *cb = k3_cuda_impl(be);
    if (!cb) return;
    K3_CHECK_CUDA(cudaStreamSynchronize(cb->stream));
    k3_cuda_matmul_ctx_free(cb->mm);
    K3_CHECK_CUDA(cudaFree(cb->device_mem));
    K3_CHECK_CUDA(cudaStreamDestroy(cb->stream));
    free(cb);
    be->impl = NULL;
    be->ops = NULL;
}

extern "C" void k3_cuda_backend_sync(struct k3_backend *be)
{
    struct k3_cuda_backend *cb = k3_cuda_impl(be);
    K3_CHECK_CUDA(cudaStreamSynchronize(cb->stream));
    int err[2];
    K3_CHECK_CUDA(cudaMemcpyAsync(err, cb->err_word, sizeof err, cudaMemcpyDeviceToHost,
                                  cb->stream));
    K3_CHECK_CUDA(cudaStreamSynchronize(cb->stream));
    if (err[0] == K3_CUDA_ERR_EMBED_ID)
        K3_FATAL("embed: token id %d is outside the vocabulary (found on the device)", err[1]);
    K3_CHECK(err[0] == 0, "device-side error code %d (value %d)", err[0], err[1]);
}

extern "C" void *k3_cuda_upload(struct k3_backend *be, const void *host, size_t bytes,
                                const char *what)
{
    struct k3_cuda_backend *cb = k3_cuda_impl(be);
    void *d = k3_cuda_arena_alloc(&cb->weights, bytes, what);
    K3_CHECK_CUDA(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, cb->stream));
    K3_CHECK_CUDA(cudaStreamSynchronize(cb->stream));
    return d;
}

static size_t fmt_bytes(enum k3_wfmt f)
{
    switch (f) {
    case K3_WFMT_F32: return 4;
    case K3_WFMT_BF16:
    case K3_WFMT_F16: return 2;
    case K3_WFMT_F8_E4M3: return 1;
    default: return 0;
    }
}

extern "C" void k3_cuda_upload_mat(struct k3_backend *be, const struct k3_mat *host,
                                   struct k3_mat *dev, const char *what)
{
    struct k3_cuda_backend *cb = k3_cuda_impl(be);
    *dev = *host;
    size_t rows = (size_t)host->rows, cols = (size_t)host->cols;
    if (host->fmt == K3_WFMT_MXFP4) {
        /* Packed nibbles and E8M0 scales stay as stored; rows padded to 32 elements. */
        K3_CHECK(host->ld % 32 == 0 && cols % 2 == 0, "%s: MXFP4 with ld %lld, cols %zu", what,
                 (long long)host->ld, cols);
        size_t ld = round_up(cols, 32);
        char *packed = (char *)k3_cuda_arena_alloc(&cb->weights, rows * ld / 2, what);
        uint8_t *scale = (uint8_t *)k3_cuda_arena_alloc(&cb->weights, rows * ld / 32, what);
        K3_CHECK_CUDA(cudaMemsetAsync(packed, 0, rows * ld / 2, cb->stream));
        K3_CHECK_CUDA(cudaMemsetAsync(scale, 0, rows * ld / 32, cb->stream));
        K3_CHECK_CUDA(cudaMemcpy2DAsync(packed, ld / 2, host->data, (size_t)host->ld / 2,
                                        cols / 2, rows, cudaMemcpyHostToDevice, cb->stream));
        K3_CHECK_CUDA(cudaMemcpy2DAsync(scale, ld / 32, host->scale, (size_t)host->ld / 32,
                                        (cols + 31) / 32, rows, cudaMemcpyHostToDevice,
                                        cb->stream));
        K3_CHECK_CUDA(cudaStreamSynchronize(cb->stream));
        dev->data = packed;
        dev->scale = scale;
        dev->ld = (int64_t)ld;
        return;
    }
    size_t es = fmt_bytes(host->fmt);
    K3_CHECK(es > 0, "%s: unknown weight format %d", what, (int)host->fmt);
    size_t ld = round_up(cols, 16 / es);   /* every row starts 16-byte aligned */
    char *d = (char *)k3_cuda_arena_alloc(&cb->weights, rows * ld * es, what);
    if (ld != cols) K3_CHECK_CUDA(cudaMemsetAsync(d, 0, rows * ld * es, cb->stream));
    K3_CHECK_CUDA(cudaMemcpy2DAsync(d, ld * es, host->data, (size_t)host->ld * es, cols * es, rows,
                                    cudaMemcpyHostToDevice, cb->stream));
    K3_CHECK_CUDA(cudaStreamSynchronize(cb->stream));
    dev->data = d;
    dev->scale = NULL;
    dev->ld = (int64_t)ld;
}
