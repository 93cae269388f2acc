/* weights.h - the immutable weights of one model, as the forward pass uses them.
 *
 * Large matrices are `struct k3_mat` views into the mapped shards (bf16, f32,
 * f16, f8 or MXFP4, used as stored). Small per-channel vectors (norm weights,
 * A_log, dt_bias, conv taps, router bias) are copied to fp32 (exact widening),
 * and each AttnRes pair (norm.weight, proj.weight) is folded into one fp32
 * query q = norm ⊙ proj (research/model-architecture.md §10.1). The weights
 * live as long as the checkpoint they view. Tensor names come from
 * model/tensors.h (k3_model_tensor_name), so the layout has one source. */
#ifndef K3_MODEL_WEIGHTS_H
#define K3_MODEL_WEIGHTS_H

#include "core/err.h"
#include "kernels/ops.h"
#include "model/checkpoint.h"
#include "model/config.h"

struct k3_kda_weights {
    struct k3_mat q, k, v;          /* [H·K, d] */
    float *q_conv, *k_conv, *v_conv;/* [H·K, W] */
    float *a_log;                   /* [H] (first H entries of the stored tensor) */
    float *dt_bias;                 /* [H·K] */
    struct k3_mat f_a, f_b;         /* [r_f, d], [H·K, r_f] */
    struct k3_mat b;                /* [H, d] */
    struct k3_mat g_a, g_b;         /* low-rank output gate (Kimi Linear) */
    struct k3_mat g;                /* full-rank output gate (K3); data NULL if absent */
    float *o_norm;                  /* [K] shared by heads */
    struct k3_mat o;                /* [d, H·K] */
};

struct k3_mla_weights {
    struct k3_mat q;                /* [H·(dn+dr), d] when q_lora_rank == 0 */
    struct k3_mat q_a, q_b;         /* [ql, d], [H·(dn+dr), ql] otherwise */
    float *q_a_norm;                /* [ql] */
    struct k3_mat kv_a;             /* [r + dr, d] */
    float *kv_a_norm;               /* [r] */
    struct k3_mat kv_b;             /* [H·(dn+dv), r]: per head [k_nope rows; v rows] */
    struct k3_mat g;                /* [H·dv, d] sigmoid output gate (K3); data NULL if absent */
    struct k3_mat o;                /* [d, H·dv] */
};

struct k3_mlp_weights {
    struct k3_mat gate, up, down;   /* [m, d], [m, d], [d, m] */
};

struct k3_moe_weights {
    struct k3_mat router;           /* [E, d] */
    float *router_bias;             /* [E] e_score_correction_bias, or NULL */
    struct k3_mat latent_down;      /* [l, d] (K3); data NULL without latent MoE */
    float *latent_norm;             /* [l] or NULL */
    struct k3_mat latent_up;        /* [d, l] */
    struct k3_mat *w1, *w3, *w2;    /* [E] each: [m, l], [m, l], [l, m] */
    int has_shared;
    struct k3_mlp_weights shared;   /* full-width shared experts */
};

struct k3_layer_weights {
    int is_mla, is_moe;
    float *attn_norm, *mlp_norm;    /* input_layernorm, post_attention_layernorm [d] */
    float *attn_res_q, *mlp_res_q;  /* folded AttnRes queries [d], NULL without AttnRes */
    struct k3_kda_weights kda;
    struct k3_mla_weights mla;
    struct k3_mlp_weights mlp;      /* dense layers */
    struct k3_moe_weights moe;
};

struct k3_weights {
    const struct k3_model_config *cfg;
    struct k3_mat embed;            /* [V, d] */
    struct k3_mat lm_head;          /* [V, d] */
    float *final_norm;              /* [d] */
    float *out_res_q;               /* [d] final AttnRes query, NULL without AttnRes */
    struct k3_layer_weights *layers;/* [n_layers] */
    /* fp32 copies owned by this struct. */
    void **owned;
    int n_owned, cap_owned;
};

/* Builds the views for every layer of cfg from ck. Returns 0 or -1 with err
 * naming the tensor. ck must outlive w. */
int k3_weights_load(const struct k3_model_config *cfg, const struct k3_checkpoint *ck,
                    struct k3_weights *w, struct k3_err *err);
void k3_weights_free(struct k3_weights *w);

#endif
