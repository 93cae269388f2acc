/* config.h - the model configuration, read from a checkpoint's config.json.
 *
 * Two published layouts are accepted (research/model-architecture.md §2.1, §8.1):
 *   Kimi K3      model_type "kimi_k3", a wrapper whose "text_config" holds the
 *                language model; tensors are prefixed "language_model.";
 *   Kimi Linear  model_type "kimi_linear", flat; tensors have no prefix.
 *
 * Guarantees (the API is settled; fields may be added, none renamed or removed):
 *   - After k3_model_config_load/parse returns 0 the struct is complete and
 *     consistent, and nothing in k3 modifies it: pass it as const.
 *   - Every field of the published configs that changes the math, the tensor
 *     names or the shapes is here, with the published meaning; fields the
 *     engine ignores (rope_theta, head_dim, vision_config) are read but not
 *     validated beyond their type.
 *   - Layer lists are stored as published (1-based) AND resolved into the
 *     0-based per-layer table layer_attn[]; use the helpers below rather than
 *     re-deriving the rule.
 *   - Anything inconsistent or not supported by k3 (RoPE MLA, grouped top-k with
 *     more than one group, tied embeddings, a quantization format other than
 *     mxfp4-pack-quantized, ...) is rejected with a message that names the file
 *     and the field and says what was expected.
 *   - Sizes that feed byte counts are int64_t. */
#ifndef K3_MODEL_CONFIG_H
#define K3_MODEL_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

#define K3_MAX_LAYERS 256
#define K3_MAX_QUANT_IGNORE 16

enum k3_arch {
    K3_ARCH_KIMI_K3 = 0,     /* AttnRes, latent MoE, gated MLA, bounded KDA gate */
    K3_ARCH_KIMI_LINEAR,     /* Kimi-Linear-48B-A3B: plain residuals, bf16 experts */
};

enum k3_attn_kind {
    K3_ATTN_KDA = 0,         /* Kimi Delta Attention (linear_attn_config.kda_layers) */
    K3_ATTN_MLA,             /* NoPE MLA (linear_attn_config.full_attn_layers) */
};

enum k3_act {
    K3_ACT_SILU = 0,         /* hidden_act "silu": SwiGLU */
    K3_ACT_SITU,             /* hidden_act "situ": SiTU-GLU with the two betas */
};

/* quantization_config (compressed-tensors). Only "mxfp4-pack-quantized" with
 * group 32, 4 bits, float, symmetric is accepted. The ignore list is kept for
 * display: which linears are MXFP4 is decided by the tensors present
 * (k3-tensors.md notes), and in the release only routed experts are. */
struct k3_quant_config {
    int present;                     /* 0: no quantization_config, all bf16 */
    char quant_method[32];           /* "compressed-tensors" */
    char format[32];                 /* "mxfp4-pack-quantized" */
    int group_size;                  /* 32 */
    int num_bits;                    /* 4 */
    char type[16];                   /* "float" (E2M1) */
    int symmetric;                   /* 1 */
    char strategy[16];               /* "group" */
    char scale_dtype[32];            /* "torch.uint8" (E8M0) */
    int n_ignore;
    char ignore[K3_MAX_QUANT_IGNORE][64];
};

struct k3_model_config {
    enum k3_arch arch;
    char model_type[32];             /* top-level model_type: "kimi_k3" or "kimi_linear" */
    char architecture[64];           /* architectures[0] of the top level */
    char tensor_prefix[32];          /* "language_model." (K3) or "" (Kimi Linear) */
    char dtype[16];                  /* "bfloat16" (dtype or torch_dtype); "" if absent */

    /* Vocabulary and special ids (wrapper level for K3, falling back to text_config). */
    int64_t vocab_size;
    int bos_token_id, eos_token_id, pad_token_id;
    int media_placeholder_token_id;  /* -1 if absent (Kimi Linear) */
    int tie_word_embeddings;         /* always 0 (1 is rejected) */

    /* Trunk. */
    int64_t hidden_size;             /* d */
    int n_layers;                    /* num_hidden_layers */
    int64_t intermediate_size;       /* dense MLP of the first first_k_dense_replace layers */
    int64_t max_position_embeddings; /* or model_max_length */
    double rms_norm_eps;             /* input/post/final/AttnRes/latent/o_norm eps */
    double rope_theta;               /* present, unused (NoPE) */
    int head_dim_unused;             /* top-level head_dim, a leftover (72 / 74); 0 if absent */
    enum k3_act hidden_act;
    double situ_beta;                /* activation_situ_beta (gate branch), 0 for silu */
    double situ_linear_beta;         /* activation_situ_linear_beta (up branch), 0 for silu */
    int num_nextn_predict_layers;    /* must be 0 */

    /* MLA (full attention, NoPE). */
    int n_heads;                     /* num_attention_heads */
    int n_kv_heads;                  /* num_key_value_heads (== n_heads) */
    int q_lora_rank;                 /* 0 when null: q_proj instead of q_a/q_b */
    int kv_lora_rank;
    int qk_nope_head_dim;
    int qk_rope_head_dim;
    int v_head_dim;
    int mla_use_nope;                /* always 1 (0 is rejected) */
    int mla_use_output_gate;         /* K3: sigmoid gate g_proj before o_proj */

    /* KDA (linear_attn_config). */
    int kda_n_heads;                 /* num_heads */
    int kda_head_dim;                /* head_dim (128 in both models) */
    int kda_conv_kernel;             /* short_conv_kernel_size */
    int kda_has_gate_lower_bound;    /* K3: bounded-sigmoid decay; else softplus form */
    double kda_gate_lower_bound;     /* -5.0 for K3 */
    int kda_use_full_rank_gate;      /* K3: g_proj [H*Dh, d]; else g_a_proj/g_b_proj */
    int n_kda_layers, n_mla_layers;
    int kda_layers_1based[K3_MAX_LAYERS];        /* as published */
    int full_attn_layers_1based[K3_MAX_LAYERS];  /* as published */
    enum k3_attn_kind layer_attn[K3_MAX_LAYERS]; /* 0-based layer -> kind */

    /* Attention Residuals (K3). */
    int attn_res_block_size;         /* decoder layers per block; 0: no AttnRes */

    /* MoE. */
    int first_k_dense_replace;       /* layers [0, this) use the dense MLP */
    int moe_layer_freq;              /* layer l >= first_k_dense_replace is MoE iff l % freq == 0 */
    int n_experts;                   /* num_experts */
    int n_experts_per_token;         /* num_experts_per_token (top-k) */
    int n_shared_experts;            /* shared MLP intermediate = this * moe_intermediate_size */
    int64_t moe_intermediate_size;   /* m */
    int64_t routed_expert_hidden_size; /* latent width l; 0: no latent MoE (experts on d) */
    int latent_moe_use_norm;         /* routed_expert_norm on the latent combine */
    char router_activation[16];      /* "sigmoid" (only) */
    char topk_method[16];            /* "noaux_tc" (or "" if absent) */
    int use_grouped_topk;
    int n_expert_group, topk_group;  /* both 1 (more groups are rejected) */
    int moe_renormalize;
    double routed_scaling_factor;

    struct k3_quant_config quant;
    int experts_mxfp4;               /* gen-weights writes routed experts as MXFP4 */
};

/* Parses config.json at path (a file, or a checkpoint directory containing
 * config.json). Returns 0, or -1 with err naming the file and the field. */
int k3_model_config_load(const char *path, struct k3_model_config *cfg, struct k3_err *err);

/* Same from JSON text; name is used in messages (usually the file path). */
int k3_model_config_parse(const char *json_text, const char *name, struct k3_model_config *cfg,
                          struct k3_err *err);

/* Per-layer questions (0-based layer). */
static inline int k3_model_config_layer_is_mla(const struct k3_model_config *c, int layer)
{
    return c->layer_attn[layer] == K3_ATTN_MLA;
}
static inline int k3_model_config_layer_is_moe(const struct k3_model_config *c, int layer)
{
    return layer >= c->first_k_dense_replace && layer % c->moe_layer_freq == 0;
}
/* Width the routed experts work in: the latent width for K3, d for Kimi Linear. */
static inline int64_t k3_model_config_expert_width(const struct k3_model_config *c)
{
    return c->routed_expert_hidden_size ? c->routed_expert_hidden_size : c->hidden_size;
}

const char *k3_arch_name(enum k3_arch arch);

/* Human-readable summary (architecture, dimensions, layer pattern). */
void k3_model_config_print(const struct k3_model_config *cfg, FILE *f);

#endif
