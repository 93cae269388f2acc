/* tensors.h - every tensor a model config implies: name, dtype, shape, kind.
 *
 * One enumeration (tensors.c) is the single source of the checkpoint layout
 * (research/k3-tensors.md for K3, model-architecture.md §1.7, §2.4, §2.5 for
 * Kimi Linear). gen-weights writes it, k3_checkpoint_validate() checks against
 * it, inspect counts it, and the forward pass can use k3_model_tensor_name() to
 * build the same names.
 *
 * Guarantees (the API is settled):
 *   - Order: global input tensors (embed_tokens), then layers in order, then the
 *     output tensors (AttnRes output mix, norm, lm_head). Within a layer, the
 *     order is fixed but not meaningful.
 *   - Linears are reported once each, by base name (no ".weight" suffix),
 *     with is_linear = 1, shape [out, in] and mxfp4 = 1 when gen-weights writes
 *     them as weight_packed + weight_scale (routed experts of a config with an
 *     mxfp4-pack-quantized quantization_config); otherwise ".weight" in dtype.
 *   - Non-linears (norms, A_log, conv weights, biases) are reported by their
 *     full name with is_linear = 0. */
#ifndef K3_MODEL_TENSORS_H
#define K3_MODEL_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "model/config.h"

#define K3_TENSOR_NAME_BYTES 160

enum k3_tensor_kind {
    K3_TK_EMBED = 0,     /* embed_tokens */
    K3_TK_HEAD,          /* lm_head */
    K3_TK_NORM,          /* input/post/final RMSNorm weights */
    K3_TK_ATTN_RES,      /* AttnRes norm + projection vectors */
    K3_TK_KDA,           /* KDA layers' self_attn tensors */
    K3_TK_MLA,           /* MLA layers' self_attn tensors */
    K3_TK_DENSE_MLP,     /* layer 0 mlp */
    K3_TK_ROUTER,        /* gate.weight, gate.e_score_correction_bias */
    K3_TK_LATENT,        /* routed_expert_down/up_proj, routed_expert_norm */
    K3_TK_EXPERT,        /* routed experts */
    K3_TK_SHARED_EXPERT, /* shared_experts */
    K3_TK_COUNT
};

struct k3_tensor_spec {
    char name[K3_TENSOR_NAME_BYTES]; /* full name with prefix; base name for linears */
    int is_linear;
    int mxfp4;                       /* linears only */
    enum k3_dtype dtype;             /* non-linears, and plain linears (BF16) */
    int n_dims;
    int64_t shape[4];                /* [out, in] for linears */
    enum k3_tensor_kind kind;
    int layer;                       /* 0-based, -1 for global tensors */
    int expert;                      /* global expert id, -1 otherwise */
};

/* Called once per tensor; a nonzero return stops the walk and is returned. */
typedef int (*k3_tensor_spec_fn)(const struct k3_tensor_spec *spec, void *ctx);

/* Walks the global tensors and those of layers [layer_lo, layer_hi] (0-based,
 * inclusive; pass 0, n_layers-1 for the whole model). */
int k3_model_tensors_foreach(const struct k3_model_config *cfg, int layer_lo, int layer_hi,
                             k3_tensor_spec_fn fn, void *ctx);

/* Writes cfg->tensor_prefix followed by the formatted name into buf; returns
 * buf. Example: k3_model_tensor_name(cfg, b, sizeof b, "model.layers.%d.mlp.up_proj", 0). */
char *k3_model_tensor_name(const struct k3_model_config *cfg, char *buf, size_t n,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

const char *k3_tensor_kind_name(enum k3_tensor_kind kind);

/* Elements of a spec (product of its shape). */
int64_t k3_tensor_spec_numel(const struct k3_tensor_spec *spec);
/* Bytes on disk: MXFP4 linears count packed (out*in/2) + scale (out*in/32). */
uint64_t k3_tensor_spec_bytes(const struct k3_tensor_spec *spec);

/* Totals per kind, as `k3 inspect` prints them. Active = what one token uses:
 * everything except routed experts, plus n_experts_per_token / n_experts of them. */
struct k3_model_counts {
    int64_t n_tensors[K3_TK_COUNT];   /* safetensors entries (a MXFP4 linear is 2) */
    int64_t params[K3_TK_COUNT];
    uint64_t bytes[K3_TK_COUNT];
    int64_t n_tensors_total, params_total, params_active;
    uint64_t bytes_total;
    double bytes_active;              /* fractional: expert share */
};
int k3_model_counts_compute(const struct k3_model_config *cfg, int layer_lo, int layer_hi,
                            struct k3_model_counts *out);

#endif
