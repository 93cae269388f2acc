/* config.c - config.json -> struct k3_model_config (see config.h).
 *
 * Approach: read the JSON with jansson, pick the language-model object (the
 * K3 wrapper's "text_config", or the top level for Kimi Linear), read every
 * field with a typed getter that knows the field's full path for messages,
 * then check the cross-field rules in one place (config_check). Required
 * fields are those that change shapes or math; fields with a published
 * default (moe_layer_freq 1, ...) may be absent. Unknown fields are ignored:
 * published configs carry dozens of transformers generation defaults. */
#include "model/config.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct reader {
    const char *file;      /* for messages */
    const char *scope;     /* "text_config." or "" */
    struct k3_err *err;
};

static int field_err(const struct reader *r, const char *key, const char *what)
{
    return k3_err_set(r->err, "%s: %s%s: %s", r->file, r->scope, key, what);
}

/* Integer field. Absent (or null, where null_ok) gives def; required fields
 * have no default. */
static int get_int(const struct reader *r, json_t *o, const char *key, int required,
                   long long def, long long min, long long max, int null_ok, long long *out)
{
    json_t *v = json_object_get(o, key);
    char msg[256];
    if (!v || (null_ok && json_is_null(v))) {
        if (required && !v) return field_err(r, key, "missing (required)");
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) {
        snprintf(msg, sizeof msg, "expected an integer in [%lld, %lld], got %s", min, max,
                 json_is_string(v) ? "a string" : json_is_real(v) ? "a real number"
                 : json_is_null(v) ? "null" : "another JSON type");
        return field_err(r, key, msg);
    }
    long long x = json_integer_value(v);
    if (x < min || x > max) {
        snprintf(msg, sizeof msg, "%lld is out of range [%lld, %lld]", x, min, max);
        return field_err(r, key, msg);
    }
    *out = x;
    return 0;
}

static int get_i32(const struct reader *r, json_t *o, const char *key, int required, int def,
                   int min, int max, int *out)
{
    long long x;
    if (get_int(r, o, key, required, def, min, max, 0, &x)) return -1;
    *out = (int)x;
    return 0;
}

static int get_i64(const struct reader *r, json_t *o, const char *key, int required,
                   int64_t def, int64_t min, int64_t max, int64_t *out)
{
    long long x;
    if (get_int(r, o, key, required, def, min, max, 0, &x)) return -1;
    *out = x;
    return 0;
}

static int get_real(const struct reader *r, json_t *o, const char *key, int required,
                    double def, double *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return field_err(r, key, v ? "must be a number, not null" : "missing (required)");
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return field_err(r, key, "expected a number");
    *out = json_number_value(v);
    if (!isfinite(*out)) return field_err(r, key, "must be finite");
    return 0;
}

static int get_bool(const struct reader *r, json_t *o, const char *key, int required, int def,
                    int *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) {
        if (required) return field_err(r, key, "missing (required)");
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return field_err(r, key, "expected true or false");
    *out = json_is_true(v);
    return 0;
}

static int get_str(const struct reader *r, json_t *o, const char *key, int required,
                   const char *def, char *out, size_t n)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return field_err(r, key, "missing (required)");
        snprintf(out, n, "%s", def);
        return 0;
    }
    if (!json_is_string(v)) return field_err(r, key, "expected a string");
    if (strlen(json_string_value(v)) >= n) return field_err(r, key, "string too long");
    snprintf(out, n, "%s", json_string_value(v));
    return 0;
}

/* A 1-based layer list. */
static int get_layer_list(const struct reader *r, json_t *lac, const char *key, int *out,
                          int *n_out)
{
    json_t *v = json_object_get(lac, key);
    char msg[256];
    if (!v) return field_err(r, key, "missing (required)");
    if (!json_is_array(v)) return field_err(r, key, "expected an array of 1-based layer numbers");
    if (json_array_size(v) > K3_MAX_LAYERS) return field_err(r, key, "too many layers");
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e)) {
            snprintf(msg, sizeof msg, "entry %zu is not an integer", i);
            return field_err(r, key, msg);
        }
        out[i] = (int)json_integer_value(e);
    }
    *n_out = (int)json_array_size(v);
    return 0;
}

static int read_quant(struct reader *r, json_t *q, struct k3_quant_config *qc)
{
    memset(qc, 0, sizeof *qc);
    if (!q || json_is_null(q)) return 0;
    if (!json_is_object(q)) return field_err(r, "quantization_config", "expected an object");
    qc->present = 1;
    struct reader rq = {r->file, "", r->err};
    char scope[64];
    snprintf(scope, sizeof scope, "%squantization_config.", r->scope);
    rq.scope = scope;
    if (get_str(&rq, q, "quant_method", 1, "", qc->quant_method, sizeof qc->quant_method))
        return -1;
    if (get_str(&rq, q, "format", 1, "", qc->format, sizeof qc->format)) return -1;
    if (strcmp(qc->quant_method, "compressed-tensors") != 0)
        return field_err(&rq, "quant_method", "unsupported (k3 reads \"compressed-tensors\")");
    if (strcmp(qc->format, "mxfp4-pack-quantized") != 0)
        return field_err(&rq, "format", "unsupported (k3 reads \"mxfp4-pack-quantized\")");
    json_t *groups = json_object_get(q, "config_groups");
    if (!json_is_object(groups) || json_object_size(groups) != 1)
        return field_err(&rq, "config_groups", "expected exactly one group");
    const char *gname = NULL;
    json_t *g = NULL;
    json_object_foreach(groups, gname, g) break;
    char gscope[128];
    snprintf(gscope, sizeof gscope, "%sconfig_groups.%s.", scope, gname);
    struct reader rg = {r->file, gscope, r->err};
    char gformat[32];
    if (get_str(&rg, g, "format", 0, qc->format, gformat, sizeof gformat)) return -1;
    if (strcmp(gformat, qc->format) != 0)
        return field_err(&rg, "format", "differs from quantization_config.format");
    json_t *in_act = json_object_get(g, "input_activations");
    if (in_act && !json_is_null(in_act))
        return field_err(&rg, "input_activations", "unsupported (weight-only MXFP4: null)");
    json_t *w = json_object_get(g, "weights");
    if (!json_is_object(w)) return field_err(&rg, "weights", "missing or not an object");
    char wscope[160];
    snprintf(wscope, sizeof wscope, "%sweights.", gscope);
    struct reader rw = {r->file, wscope, r->err};
    if (get_i32(&rw, w, "group_size", 1, 0, 1, 1 << 20, &qc->group_size)) return -1;
    if (get_i32(&rw, w, "num_bits", 1, 0, 1, 64, &qc->num_bits)) return -1;
    if (get_str(&rw, w, "type", 1, "", qc->type, sizeof qc->type)) return -1;
    if (get_bool(&rw, w, "symmetric", 0, 1, &qc->symmetric)) return -1;
    if (get_str(&rw, w, "strategy", 0, "group", qc->strategy, sizeof qc->strategy)) return -1;
    if (get_str(&rw, w, "scale_dtype", 0, "torch.uint8", qc->scale_dtype, sizeof qc->scale_dtype))
        return -1;
    if (qc->group_size != 32) return field_err(&rw, "group_size", "must be 32 for MXFP4");
    if (qc->num_bits != 4) return field_err(&rw, "num_bits", "must be 4 for MXFP4");
    if (strcmp(qc->type, "float") != 0)
        return field_err(&rw, "type", "must be \"float\" (E2M1) for MXFP4");
    if (!qc->symmetric) return field_err(&rw, "symmetric", "must be true for MXFP4");
    if (strcmp(qc->strategy, "group") != 0)
        return field_err(&rw, "strategy", "must be \"group\" for MXFP4");
    json_t *ign = json_object_get(q, "ignore");
    if (ign && !json_is_null(ign)) {
        if (!json_is_array(ign)) return field_err(&rq, "ignore", "expected an array of strings");
        size_t i;
        json_t *e;
        json_array_foreach(ign, i, e) {
            if (!json_is_string(e)) return field_err(&rq, "ignore", "expected strings");
            if (qc->n_ignore < K3_MAX_QUANT_IGNORE)
                snprintf(qc->ignore[qc->n_ignore++], sizeof qc->ignore[0], "%s",
                         json_string_value(e));
        }
    }
    return 0;
}

/* The cross-field rules. r->scope is the text-config scope. */
static int config_check(const struct reader *r, struct k3_model_config *c)
{
    char msg[512];
    /* Layer pattern: the two 1-based lists partition 1..n_layers. */
    int seen[K3_MAX_LAYERS] = {0};
    const int *lists[2] = {c->kda_layers_1based, c->full_attn_layers_1based};
    const int counts[2] = {c->n_kda_layers, c->n_mla_layers};
    const char *names[2] = {"linear_attn_config.kda_layers", "linear_attn_config.full_attn_layers"};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < counts[k]; i++) {
            int l = lists[k][i];
            if (l < 1 || l > c->n_layers) {
                snprintf(msg, sizeof msg, "layer %d is out of range: the lists are 1-based, "
                         "1..num_hidden_layers (%d)", l, c->n_layers);
                return field_err(r, names[k], msg);
            }
            if (seen[l - 1]) {
                if (seen[l - 1] == k + 1)
                    snprintf(msg, sizeof msg, "layer %d is listed twice", l);
                else
                    snprintf(msg, sizeof msg, "layer %d is also in kda_layers (each layer is "
                             "either KDA or full attention)", l);
                return field_err(r, names[k], msg);
            }
            seen[l - 1] = k + 1;
            c->layer_attn[l - 1] = k == 0 ? K3_ATTN_KDA : K3_ATTN_MLA;
        }
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (!seen[l]) {
            snprintf(msg, sizeof msg, "layer %d (1-based) is in neither kda_layers nor "
                     "full_attn_layers", l + 1);
            return field_err(r, "linear_attn_config", msg);
        }
    }
    if (c->n_kv_heads != c->n_heads)
        return field_err(r, "num_key_value_heads", "must equal num_attention_heads (MLA)");
    if (!c->mla_use_nope)
        return field_err(r, "mla_use_nope", "false is unsupported (k3 implements NoPE MLA only)");
    if (c->tie_word_embeddings)
        return field_err(r, "tie_word_embeddings", "true is unsupported (lm_head is its own tensor)");
    if (c->num_nextn_predict_layers != 0)
        return field_err(r, "num_nextn_predict_layers", "must be 0 (no MTP layers in k3)");
    if (c->kda_n_heads > c->kda_head_dim && c->arch == K3_ARCH_KIMI_K3)
        return field_err(r, "linear_attn_config.num_heads",
                         "must not exceed head_dim (K3 stores A_log padded to head_dim)");
    if (c->kda_has_gate_lower_bound && !(c->kda_gate_lower_bound < 0))
        return field_err(r, "linear_attn_config.gate_lower_bound", "must be negative");
    if (c->first_k_dense_replace > c->n_layers)
        return field_err(r, "first_k_dense_replace", "exceeds num_hidden_layers");
    if (c->n_experts_per_token > c->n_experts)
        return field_err(r, "num_experts_per_token", "exceeds num_experts");
    if (strcmp(c->router_activation, "sigmoid") != 0)
        return field_err(r, "moe_router_activation_func", "unsupported (k3 implements \"sigmoid\")");
    if (c->n_expert_group != 1 || c->topk_group != 1) {
        if (c->n_expert_group != 1)
            return field_err(r, "num_expert_group", "must be 1 (grouped routing is not implemented)");
        return field_err(r, "topk_group", "must be 1 (grouped routing is not implemented)");
    }
    if (c->topk_method[0] && strcmp(c->topk_method, "noaux_tc") != 0)
        return field_err(r, "topk_method", "unsupported (k3 implements \"noaux_tc\")");
    if (c->attn_res_block_size && c->arch != K3_ARCH_KIMI_K3)
        return field_err(r, "attn_res_block_size", "AttnRes is only supported in kimi_k3 models");
    if (c->routed_expert_hidden_size && c->arch != K3_ARCH_KIMI_K3)
        return field_err(r, "routed_expert_hidden_size", "latent MoE is only supported in kimi_k3 models");
    if (c->arch == K3_ARCH_KIMI_K3) {
        if (!c->attn_res_block_size)
            return field_err(r, "attn_res_block_size", "missing (required for kimi_k3)");
        if (!c->routed_expert_hidden_size)
            return field_err(r, "routed_expert_hidden_size", "missing (required for kimi_k3)");
        if (!c->mla_use_output_gate)
            return field_err(r, "mla_use_output_gate", "must be true for kimi_k3");
        if (!c->kda_use_full_rank_gate)
            return field_err(r, "linear_attn_config.use_full_rank_gate", "must be true for kimi_k3");
    }
    if (c->hidden_act == K3_ACT_SITU && (c->situ_beta <= 0 || c->situ_linear_beta <= 0))
        return field_err(r, c->situ_beta <= 0 ? "activation_situ_beta" : "activation_situ_linear_beta",
                         "must be positive with hidden_act \"situ\"");
    int64_t ids[3] = {c->bos_token_id, c->eos_token_id, c->pad_token_id};
    const char *id_names[3] = {"bos_token_id", "eos_token_id", "pad_token_id"};
    for (int i = 0; i < 3; i++) {
        if (ids[i] >= c->vocab_size) {
            snprintf(msg, sizeof msg, "%lld is not below vocab_size (%lld)", (long long)ids[i],
                     (long long)c->vocab_size);
            return field_err(r, id_names[i], msg);
        }
    }
    if (c->experts_mxfp4) {
        int64_t lw = k3_model_config_expert_width(c);
        if (lw % 32)
            return field_err(r, c->routed_expert_hidden_size ? "routed_expert_hidden_size" : "hidden_size",
                             "must be a multiple of 32 (MXFP4 blocks of 32 along the expert input)");
        if (c->moe_intermediate_size % 32)
            return field_err(r, "moe_intermediate_size",
                             "must be a multiple of 32 (MXFP4 blocks of 32 along w2's input)");
    }
    return 0;
}

int k3_model_config_parse(const char *json_text, const char *name, struct k3_model_config *cfg,
                          struct k3_err *err)
{
    struct k3_model_config c;
    memset(&c, 0, sizeof c);
    json_error_t jerr;
    json_t *root = json_loads(json_text, 0, &jerr);
    if (!root) {
        return k3_err_set(err, "%s:%d:%d: not valid JSON: %s", name, jerr.line, jerr.column,
                          jerr.text);
    }
    int rc = -1;
    struct reader top = {name, "", err};
    if (!json_is_object(root)) {
        k3_err_set(err, "%s: expected a JSON object at the top level", name);
        goto out;
    }
    if (get_str(&top, root, "model_type", 1, "", c.model_type, sizeof c.model_type)) goto out;
    json_t *arch = json_object_get(root, "architectures");
    if (json_is_array(arch) && json_is_string(json_array_get(arch, 0)))
        snprintf(c.architecture, sizeof c.architecture, "%s",
                 json_string_value(json_array_get(arch, 0)));
    json_t *tc = root;
    struct reader r = {name, "", err};
    if (!strcmp(c.model_type, "kimi_k3")) {
        c.arch = K3_ARCH_KIMI_K3;
        snprintf(c.tensor_prefix, sizeof c.tensor_prefix, "language_model.");
        tc = json_object_get(root, "text_config");
        if (!json_is_object(tc)) {
            field_err(&top, "text_config", "missing or not an object (kimi_k3 wraps the language "
                      "model config in text_config)");
            goto out;
        }
        r.scope = "text_config.";
        char inner[32];
        if (get_str(&r, tc, "model_type", 0, "kimi_linear", inner, sizeof inner)) goto out;
        if (strcmp(inner, "kimi_linear") != 0) {
            field_err(&r, "model_type", "expected \"kimi_linear\" inside a kimi_k3 wrapper");
            goto out;
        }
    } else if (!strcmp(c.model_type, "kimi_linear")) {
        c.arch = K3_ARCH_KIMI_LINEAR;
    } else {
        field_err(&top, "model_type", "unsupported (k3 reads \"kimi_k3\" and \"kimi_linear\")");
        goto out;
    }

    /* Ids: the wrapper's values win for K3; text_config carries the same. */
    long long x;
    json_t *ids = json_object_get(root, "bos_token_id") ? root : tc;
    struct reader *rid = ids == root ? &top : &r;
    if (get_i64(&r, tc, "vocab_size", 1, 0, 1, INT32_MAX, &c.vocab_size)) goto out;
    if (get_int(rid, ids, "bos_token_id", 1, 0, 0, INT32_MAX, 0, &x)) goto out;
    c.bos_token_id = (int)x;
    if (get_int(rid, ids, "eos_token_id", 1, 0, 0, INT32_MAX, 0, &x)) goto out;
    c.eos_token_id = (int)x;
    if (get_int(rid, ids, "pad_token_id", 0, 0, 0, INT32_MAX, 0, &x)) goto out;
    c.pad_token_id = (int)x;
    if (get_int(&top, root, "media_placeholder_token_id", 0, -1, 0, INT32_MAX, 0, &x)) goto out;
    c.media_placeholder_token_id = (int)x;
    int tie_top = 0;
    if (get_bool(&top, root, "tie_word_embeddings", 0, 0, &tie_top)) goto out;
    if (get_bool(&r, tc, "tie_word_embeddings", 0, 0, &c.tie_word_embeddings)) goto out;
    if (tie_top && !c.tie_word_embeddings) {
        field_err(&top, "tie_word_embeddings", "true is unsupported (lm_head is its own tensor)");
        goto out;
    }

    /* The dtype of the unquantized tensors: the layout (model/tensors.h) is bf16/fp32. */
    json_t *dt_obj = json_object_get(tc, "dtype") ? tc : json_object_get(root, "dtype") ? root : tc;
    const char *dt_key = json_object_get(dt_obj, "dtype") ? "dtype" : "torch_dtype";
    struct reader *rdt = dt_obj == root && tc != root ? &top : &r;
    if (get_str(rdt, dt_obj, dt_key, 0, "", c.dtype, sizeof c.dtype)) goto out;
    if (c.dtype[0] && strcmp(c.dtype, "bfloat16") != 0) {
        field_err(rdt, dt_key, "unsupported (k3 reads bfloat16 checkpoints)");
        goto out;
    }

    /* Trunk. */
    const int64_t big = (int64_t)1 << 24;
    if (get_i64(&r, tc, "hidden_size", 1, 0, 1, big, &c.hidden_size)) goto out;
    if (get_i32(&r, tc, "num_hidden_layers", 1, 0, 1, K3_MAX_LAYERS, &c.n_layers)) goto out;
    if (get_i64(&r, tc, "intermediate_size", 1, 0, 1, big, &c.intermediate_size)) goto out;
    if (json_object_get(tc, "max_position_embeddings")) {
        if (get_i64(&r, tc, "max_position_embeddings", 1, 0, 1, INT64_MAX, &c.max_position_embeddings))
            goto out;
    } else if (get_i64(&r, tc, "model_max_length", 0, 0, 0, INT64_MAX, &c.max_position_embeddings)) {
        goto out;
    }
    if (get_real(&r, tc, "rms_norm_eps", 1, 0, &c.rms_norm_eps)) goto out;
    if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) {
        field_err(&r, "rms_norm_eps", "must be in (0, 1)");
        goto out;
    }
    if (get_real(&r, tc, "rope_theta", 0, 0, &c.rope_theta)) goto out;
    if (get_i32(&r, tc, "head_dim", 0, 0, 0, 1 << 16, &c.head_dim_unused)) goto out;
    char act[16];
    if (get_str(&r, tc, "hidden_act", 1, "", act, sizeof act)) goto out;
    if (!strcmp(act, "silu")) {
        c.hidden_act = K3_ACT_SILU;
    } else if (!strcmp(act, "situ")) {
        c.hidden_act = K3_ACT_SITU;
        if (get_real(&r, tc, "activation_situ_beta", 1, 0, &c.situ_beta)) goto out;
        if (get_real(&r, tc, "activation_situ_linear_beta", 1, 0, &c.situ_linear_beta)) goto out;
    } else {
        field_err(&r, "hidden_act", "unsupported (k3 implements \"silu\" and \"situ\")");
        goto out;
    }
    if (get_i32(&r, tc, "num_nextn_predict_layers", 0, 0, 0, 64, &c.num_nextn_predict_layers))
        goto out;

    /* MLA. */
    if (get_i32(&r, tc, "num_attention_heads", 1, 0, 1, 1 << 12, &c.n_heads)) goto out;
    if (get_i32(&r, tc, "num_key_value_heads", 0, c.n_heads, 1, 1 << 12, &c.n_kv_heads)) goto out;
    if (get_int(&r, tc, "q_lora_rank", 1, 0, 1, 1 << 20, 1, &x)) goto out;
    c.q_lora_rank = (int)x;
    if (get_i32(&r, tc, "kv_lora_rank", 1, 0, 1, 1 << 20, &c.kv_lora_rank)) goto out;
    if (get_i32(&r, tc, "qk_nope_head_dim", 1, 0, 1, 1 << 12, &c.qk_nope_head_dim)) goto out;
    if (get_i32(&r, tc, "qk_rope_head_dim", 1, 0, 0, 1 << 12, &c.qk_rope_head_dim)) goto out;
    if (get_i32(&r, tc, "v_head_dim", 1, 0, 1, 1 << 12, &c.v_head_dim)) goto out;
    if (get_bool(&r, tc, "mla_use_nope", 1, 0, &c.mla_use_nope)) goto out;
    if (get_bool(&r, tc, "mla_use_output_gate", 0, 0, &c.mla_use_output_gate)) goto out;

    /* KDA. */
    json_t *lac = json_object_get(tc, "linear_attn_config");
    if (!json_is_object(lac)) {
        field_err(&r, "linear_attn_config", "missing or not an object");
        goto out;
    }
    char lscope[64];
    snprintf(lscope, sizeof lscope, "%slinear_attn_config.", r.scope);
    struct reader rl = {name, lscope, err};
    if (get_i32(&rl, lac, "num_heads", 1, 0, 1, 1 << 12, &c.kda_n_heads)) goto out;
    if (get_i32(&rl, lac, "head_dim", 1, 0, 1, 1 << 12, &c.kda_head_dim)) goto out;
    if (get_i32(&rl, lac, "short_conv_kernel_size", 1, 0, 1, 64, &c.kda_conv_kernel)) goto out;
    if (json_object_get(lac, "gate_lower_bound") && !json_is_null(json_object_get(lac, "gate_lower_bound"))) {
        c.kda_has_gate_lower_bound = 1;
        if (get_real(&rl, lac, "gate_lower_bound", 1, 0, &c.kda_gate_lower_bound)) goto out;
    }
    if (get_bool(&rl, lac, "use_full_rank_gate", 0, 0, &c.kda_use_full_rank_gate)) goto out;
    if (get_layer_list(&rl, lac, "kda_layers", c.kda_layers_1based, &c.n_kda_layers)) goto out;
    if (get_layer_list(&rl, lac, "full_attn_layers", c.full_attn_layers_1based, &c.n_mla_layers))
        goto out;

    /* AttnRes. */
    if (get_i32(&r, tc, "attn_res_block_size", 0, 0, 1, K3_MAX_LAYERS, &c.attn_res_block_size))
        goto out;

    /* MoE. */
    if (get_i32(&r, tc, "first_k_dense_replace", 0, 1, 0, K3_MAX_LAYERS, &c.first_k_dense_replace))
        goto out;
    if (get_i32(&r, tc, "moe_layer_freq", 0, 1, 1, K3_MAX_LAYERS, &c.moe_layer_freq)) goto out;
    if (get_i32(&r, tc, "num_experts", 1, 0, 1, 1 << 16, &c.n_experts)) goto out;
    if (get_i32(&r, tc, "num_experts_per_token", 1, 0, 1, 1 << 16, &c.n_experts_per_token)) goto out;
    if (get_i32(&r, tc, "num_shared_experts", 0, 0, 0, 64, &c.n_shared_experts)) goto out;
    if (get_i64(&r, tc, "moe_intermediate_size", 1, 0, 1, big, &c.moe_intermediate_size)) goto out;
    if (get_i64(&r, tc, "routed_expert_hidden_size", 0, 0, 1, big, &c.routed_expert_hidden_size))
        goto out;
    if (get_bool(&r, tc, "latent_moe_use_norm", 0, 0, &c.latent_moe_use_norm)) goto out;
    if (get_str(&r, tc, "moe_router_activation_func", 0, "sigmoid", c.router_activation,
                sizeof c.router_activation))
        goto out;
    if (get_str(&r, tc, "topk_method", 0, "", c.topk_method, sizeof c.topk_method)) goto out;
    if (get_bool(&r, tc, "use_grouped_topk", 0, 1, &c.use_grouped_topk)) goto out;
    if (get_i32(&r, tc, "num_expert_group", 0, 1, 1, 1 << 16, &c.n_expert_group)) goto out;
    if (get_i32(&r, tc, "topk_group", 0, 1, 1, 1 << 16, &c.topk_group)) goto out;
    if (get_bool(&r, tc, "moe_renormalize", 0, 1, &c.moe_renormalize)) goto out;
    if (get_real(&r, tc, "routed_scaling_factor", 0, 1.0, &c.routed_scaling_factor)) goto out;
    if (!(c.routed_scaling_factor > 0)) {
        field_err(&r, "routed_scaling_factor", "must be positive");
        goto out;
    }

    /* Quantization: K3 puts it in text_config; accept the top level too. */
    json_t *q = json_object_get(tc, "quantization_config");
    if (!q && tc != root) {
        q = json_object_get(root, "quantization_config");
        if (read_quant(&top, q, &c.quant)) goto out;
    } else if (read_quant(&r, q, &c.quant)) {
        goto out;
    }
    c.experts_mxfp4 = c.quant.present;

    if (config_check(&r, &c)) goto out;
    *cfg = c;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int k3_model_config_load(const char *path, struct k3_model_config *cfg, struct k3_err *err)
{
    char file[4096];
    size_t n = strlen(path);
    FILE *f = fopen(path, "rb");
    snprintf(file, sizeof file, "%s", path);
    if (f) {
        /* A directory opens but cannot be read: try DIR/config.json. */
        char probe;
        if (fread(&probe, 1, 1, f) != 1 && ferror(f)) {
            fclose(f);
            f = NULL;
            snprintf(file, sizeof file, "%s%sconfig.json", path,
                     n && path[n - 1] == '/' ? "" : "/");
            f = fopen(file, "rb");
        } else {
            rewind(f);
        }
    }
    if (!f) return k3_err_set(err, "%s: cannot open (give a config.json or a checkpoint directory "
                              "that contains one)", file);
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                return k3_err_set(err, "%s: out of memory", file);
            }
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(text);
        return k3_err_set(err, "%s: read error", file);
    }
    text[len] = 0;
    int rc = k3_model_config_parse(text, file, cfg, err);
    free(text);
    return rc;
}

const char *k3_arch_name(enum k3_arch arch)
{
    return arch == K3_ARCH_KIMI_K3 ? "kimi_k3" : "kimi_linear";
}

void k3_model_config_print(const struct k3_model_config *c, FILE *f)
{
    fprintf(f, "architecture    %s (%s)%s\n", k3_arch_name(c->arch),
            c->architecture[0] ? c->architecture : "?",
            c->tensor_prefix[0] ? ", tensors prefixed language_model." : "");
    fprintf(f, "hidden          %lld, %d layers, vocab %lld, rms_norm_eps %g, act %s",
            (long long)c->hidden_size, c->n_layers, (long long)c->vocab_size, c->rms_norm_eps,
            c->hidden_act == K3_ACT_SITU ? "situ" : "silu");
    if (c->hidden_act == K3_ACT_SITU)
        fprintf(f, " (beta %g, linear beta %g)", c->situ_beta, c->situ_linear_beta);
    fputc('\n', f);
    fprintf(f, "layer pattern   ");
    for (int l = 0; l < c->n_layers; l++) {
        int block_start = c->attn_res_block_size && l % c->attn_res_block_size == 0;
        fputc(block_start && l ? '|' : ' ', f);
        fputc(k3_model_config_layer_is_mla(c, l) ? 'M' : 'K', f);
        fputc(k3_model_config_layer_is_moe(c, l) ? 'e' : 'd', f);
    }
    fprintf(f, "\n                (K = KDA, M = MLA; e = MoE, d = dense MLP%s)\n",
            c->attn_res_block_size ? "; | = AttnRes block start" : "");
    fprintf(f, "KDA             %d layers, %d heads x %d, conv %d, gate %s, %s output gate\n",
            c->n_kda_layers, c->kda_n_heads, c->kda_head_dim, c->kda_conv_kernel,
            c->kda_has_gate_lower_bound ? "bounded sigmoid" : "softplus",
            c->kda_use_full_rank_gate ? "full-rank" : "low-rank");
    if (c->kda_has_gate_lower_bound)
        fprintf(f, "                gate_lower_bound %g\n", c->kda_gate_lower_bound);
    fprintf(f, "MLA             %d layers, %d heads, q_lora %d, kv_lora %d, nope %d + rope %d "
               "(NoPE), v %d%s\n",
            c->n_mla_layers, c->n_heads, c->q_lora_rank, c->kv_lora_rank, c->qk_nope_head_dim,
            c->qk_rope_head_dim, c->v_head_dim, c->mla_use_output_gate ? ", sigmoid output gate" : "");
    if (c->attn_res_block_size)
        fprintf(f, "AttnRes         blocks of %d layers (%d snapshots)\n", c->attn_res_block_size,
                (c->n_layers + c->attn_res_block_size - 1) / c->attn_res_block_size);
    else
        fprintf(f, "AttnRes         none (plain residuals)\n");
    fprintf(f, "dense MLP       layers 0..%d, intermediate %lld\n", c->first_k_dense_replace - 1,
            (long long)c->intermediate_size);
    fprintf(f, "MoE             %d experts, top %d, %d shared, intermediate %lld",
            c->n_experts, c->n_experts_per_token, c->n_shared_experts,
            (long long)c->moe_intermediate_size);
    if (c->routed_expert_hidden_size)
        fprintf(f, ", latent %lld%s", (long long)c->routed_expert_hidden_size,
                c->latent_moe_use_norm ? " (normed)" : "");
    fprintf(f, "\n                router %s, %s, renormalize %d, scaling %g\n", c->router_activation,
            c->topk_method[0] ? c->topk_method : "topk", c->moe_renormalize,
            c->routed_scaling_factor);
    if (c->quant.present)
        fprintf(f, "quantization    %s %s, group %d, %d-bit %s; routed experts MXFP4\n",
                c->quant.quant_method, c->quant.format, c->quant.group_size, c->quant.num_bits,
                c->quant.type);
    else
        fprintf(f, "quantization    none (bf16)\n");
}
