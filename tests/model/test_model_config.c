/* test_model_config.c - config.json parsing: the two published configs, every
 * config the project ships, and broken configs that must each be rejected with
 * a message naming the field.
 *
 * Usage: test_model_config SHARED_DIR PROJECT_DIR (the test reads the published
 * K3 config from SHARED_DIR/data/kimi-k3/config.json, never a copy). Broken
 * configs are made by editing k3-tiny's JSON in memory, one field at a time. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k3_test.h"
#include "model/config.h"
#include "model/tensors.h"

static const char *shared_dir, *project_dir;

static void path_of(char *buf, size_t n, const char *dir, const char *rel)
{
    snprintf(buf, n, "%s/%s", dir, rel);
}

static void test_published_k3(void)
{
    char p[4096];
    path_of(p, sizeof p, shared_dir, "data/kimi-k3/config.json");
    struct k3_model_config c;
    struct k3_err err = {{0}};
    int rc = k3_model_config_load(p, &c, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(c.arch == K3_ARCH_KIMI_K3);
    CHECK(!strcmp(c.tensor_prefix, "language_model."));
    CHECK(c.hidden_size == 7168 && c.n_layers == 93 && c.vocab_size == 163840);
    CHECK(c.intermediate_size == 33792 && c.max_position_embeddings == 1048576);
    CHECK(c.n_heads == 96 && c.n_kv_heads == 96 && c.q_lora_rank == 1536 && c.kv_lora_rank == 512);
    CHECK(c.qk_nope_head_dim == 128 && c.qk_rope_head_dim == 64 && c.v_head_dim == 128);
    CHECK(c.mla_use_nope && c.mla_use_output_gate);
    CHECK(c.kda_n_heads == 96 && c.kda_head_dim == 128 && c.kda_conv_kernel == 4);
    CHECK(c.kda_has_gate_lower_bound && c.kda_gate_lower_bound == -5.0 && c.kda_use_full_rank_gate);
    CHECK(c.n_kda_layers == 69 && c.n_mla_layers == 24);
    /* research §2.2: MLA at 0-based 3, 7, ..., 91 and 92. */
    int pattern_ok = 1;
    for (int l = 0; l < 93; l++) {
        int mla = (l % 4 == 3) || l == 92;
        if (k3_model_config_layer_is_mla(&c, l) != mla) pattern_ok = 0;
    }
    CHECK(pattern_ok);
    CHECK(c.full_attn_layers_1based[0] == 4 && c.full_attn_layers_1based[23] == 93);
    CHECK(c.attn_res_block_size == 12);
    CHECK(c.first_k_dense_replace == 1 && c.moe_layer_freq == 1);
    CHECK(!k3_model_config_layer_is_moe(&c, 0) && k3_model_config_layer_is_moe(&c, 1) &&
          k3_model_config_layer_is_moe(&c, 92));
    CHECK(c.n_experts == 896 && c.n_experts_per_token == 16 && c.n_shared_experts == 2);
    CHECK(c.moe_intermediate_size == 3072 && c.routed_expert_hidden_size == 3584);
    CHECK(k3_model_config_expert_width(&c) == 3584);
    CHECK(c.latent_moe_use_norm && c.moe_renormalize && c.routed_scaling_factor == 1.0);
    CHECK(!strcmp(c.router_activation, "sigmoid") && !strcmp(c.topk_method, "noaux_tc"));
    CHECK(c.hidden_act == K3_ACT_SITU && c.situ_beta == 4.0 && c.situ_linear_beta == 25.0);
    CHECK(c.rms_norm_eps == 1e-5 && !strcmp(c.dtype, "bfloat16"));
    CHECK(c.bos_token_id == 163584 && c.eos_token_id == 163586 && c.pad_token_id == 163839);
    CHECK(c.media_placeholder_token_id == 163605);
    CHECK(c.quant.present && c.experts_mxfp4 && c.quant.group_size == 32 && c.quant.num_bits == 4);
    CHECK(!strcmp(c.quant.format, "mxfp4-pack-quantized"));
    CHECK(!strcmp(c.quant.quant_method, "compressed-tensors"));
    CHECK(c.quant.n_ignore == 6 && !strcmp(c.quant.ignore[0], "re:.*self_attn.*"));

    /* Counts: research §8.2 (2.8 T, 104 B active; 497,220 tensors including
     * 168 vision-tower tensors that k3 does not load). */
    struct k3_model_counts n;
    k3_model_counts_compute(&c, 0, c.n_layers - 1, &n);
    CHECK_MSG(n.params_total == 2779484478208ll, "params %lld", (long long)n.params_total);
    CHECK_MSG(n.n_tensors_total == 497220 - 168, "tensors %lld", (long long)n.n_tensors_total);
    CHECK_NEAR((double)n.params[K3_TK_EXPERT] / 1e12, 2.72, 0.01);
    CHECK_NEAR((double)(n.params_active - n.params[K3_TK_EMBED]) / 1e9, 104.0, 0.5);
    CHECK_NEAR((double)n.bytes[K3_TK_EXPERT] / 1e12, 1.45, 0.01);
    /* One expert: w1, w3 [3072, 3584] + w2 [3584, 3072] at 0.53125 B/param = 17.55 MB. */
    CHECK(n.bytes[K3_TK_EXPERT] == 92ull * 896 * 3 * 3072 * 3584 * 17 / 32);
}

static void test_published_kimi_linear(void)
{
    char p[4096];
    path_of(p, sizeof p, project_dir, "configs/models/kimi-linear-48b/config.json");
    struct k3_model_config c;
    struct k3_err err = {{0}};
    int rc = k3_model_config_load(p, &c, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(c.arch == K3_ARCH_KIMI_LINEAR && c.tensor_prefix[0] == 0);
    CHECK(c.hidden_size == 2304 && c.n_layers == 27 && c.intermediate_size == 9216);
    CHECK(c.q_lora_rank == 0 && c.kv_lora_rank == 512 && c.n_heads == 32);
    CHECK(!c.mla_use_output_gate && !c.kda_use_full_rank_gate && !c.kda_has_gate_lower_bound);
    CHECK(c.attn_res_block_size == 0 && c.routed_expert_hidden_size == 0);
    CHECK(k3_model_config_expert_width(&c) == 2304);
    CHECK(c.n_experts == 256 && c.n_experts_per_token == 8 && c.n_shared_experts == 1);
    CHECK(c.routed_scaling_factor == 2.446 && c.hidden_act == K3_ACT_SILU);
    CHECK(c.max_position_embeddings == 1048576 && c.head_dim_unused == 72);
    CHECK(!c.quant.present && !c.experts_mxfp4);
    /* MLA at 0-based 3, 7, 11, 15, 19, 23 and 26 (research §2.2). */
    int mla[] = {3, 7, 11, 15, 19, 23, 26}, ok = c.n_mla_layers == 7 && c.n_kda_layers == 20;
    for (int i = 0; i < 7; i++) ok &= k3_model_config_layer_is_mla(&c, mla[i]);
    CHECK(ok);
    struct k3_model_counts n;
    k3_model_counts_compute(&c, 0, c.n_layers - 1, &n);
    /* "48B total, 3B active" as published; the exact figures are k3's count. */
    CHECK_NEAR((double)n.params_total / 1e9, 49.1, 0.1);
    CHECK_NEAR((double)n.params_active / 1e9, 3.5, 0.1);
}

/* Spot checks of the Kimi-Linear-48B layout against research §1.7, §2.4, §2.5. */
struct spot {
    const char *name;
    int is_linear;
    enum k3_dtype dtype;
    int n_dims;
    int64_t shape[4];
    int found;
};

static int spot_one(const struct k3_tensor_spec *s, void *ctx)
{
    for (struct spot *sp = ctx; sp->name; sp++) {
        if (strcmp(sp->name, s->name) != 0) continue;
        sp->found = 1;
        int ok = s->is_linear == sp->is_linear && s->n_dims == sp->n_dims &&
                 (s->is_linear || s->dtype == sp->dtype) && !s->mxfp4;
        for (int i = 0; i < sp->n_dims; i++) ok &= s->shape[i] == sp->shape[i];
        CHECK_MSG(ok, "%s", s->name);
    }
    return 0;
}

static void test_kimi_linear_layout(void)
{
    char p[4096];
    path_of(p, sizeof p, project_dir, "configs/models/kimi-linear-48b/config.json");
    struct k3_model_config c;
    struct k3_err err;
    if (k3_model_config_load(p, &c, &err)) return;
    struct spot spots[] = {
        {"model.layers.1.self_attn.q_proj", 1, K3_DTYPE_BF16, 2, {4096, 2304}, 0},
        {"model.layers.1.self_attn.q_conv1d.weight", 0, K3_DTYPE_F32, 3, {4096, 1, 4}, 0},
        {"model.layers.1.self_attn.A_log", 0, K3_DTYPE_F32, 4, {1, 1, 32, 1}, 0},
        {"model.layers.1.self_attn.f_a_proj", 1, K3_DTYPE_BF16, 2, {128, 2304}, 0},
        {"model.layers.1.self_attn.f_b_proj", 1, K3_DTYPE_BF16, 2, {4096, 128}, 0},
        {"model.layers.1.self_attn.b_proj", 1, K3_DTYPE_BF16, 2, {32, 2304}, 0},
        {"model.layers.1.self_attn.g_a_proj", 1, K3_DTYPE_BF16, 2, {128, 2304}, 0},
        {"model.layers.1.self_attn.g_b_proj", 1, K3_DTYPE_BF16, 2, {4096, 128}, 0},
        {"model.layers.1.self_attn.o_norm.weight", 0, K3_DTYPE_F32, 1, {128}, 0},
        {"model.layers.1.self_attn.o_proj", 1, K3_DTYPE_BF16, 2, {2304, 4096}, 0},
        {"model.layers.3.self_attn.q_proj", 1, K3_DTYPE_BF16, 2, {6144, 2304}, 0},
        {"model.layers.3.self_attn.kv_a_proj_with_mqa", 1, K3_DTYPE_BF16, 2, {576, 2304}, 0},
        {"model.layers.3.self_attn.kv_a_layernorm.weight", 0, K3_DTYPE_BF16, 1, {512}, 0},
        {"model.layers.3.self_attn.kv_b_proj", 1, K3_DTYPE_BF16, 2, {8192, 512}, 0},
        {"model.layers.26.self_attn.o_proj", 1, K3_DTYPE_BF16, 2, {2304, 4096}, 0},
        {"model.layers.1.block_sparse_moe.gate.weight", 0, K3_DTYPE_BF16, 2, {256, 2304}, 0},
        {"model.layers.1.block_sparse_moe.gate.e_score_correction_bias", 0, K3_DTYPE_F32, 1, {256}, 0},
        {"model.layers.1.block_sparse_moe.experts.255.w1", 1, K3_DTYPE_BF16, 2, {1024, 2304}, 0},
        {"model.layers.1.block_sparse_moe.experts.0.w2", 1, K3_DTYPE_BF16, 2, {2304, 1024}, 0},
        {"model.layers.1.block_sparse_moe.shared_experts.up_proj", 1, K3_DTYPE_BF16, 2, {1024, 2304}, 0},
        {"model.layers.0.mlp.gate_proj", 1, K3_DTYPE_BF16, 2, {9216, 2304}, 0},
        {"model.layers.0.mlp.down_proj", 1, K3_DTYPE_BF16, 2, {2304, 9216}, 0},
        {"model.embed_tokens.weight", 0, K3_DTYPE_BF16, 2, {163840, 2304}, 0},
        {"model.norm.weight", 0, K3_DTYPE_BF16, 1, {2304}, 0},
        {"lm_head", 1, K3_DTYPE_BF16, 2, {163840, 2304}, 0},
        {NULL, 0, 0, 0, {0}, 0},
    };
    k3_model_tensors_foreach(&c, 0, c.n_layers - 1, spot_one, spots);
    for (struct spot *sp = spots; sp->name; sp++) CHECK_MSG(sp->found, "%s not listed", sp->name);
}

static void test_shipped(void)
{
    static const char *names[] = {"k3-tiny", "kimi-linear-tiny", "k3-tiny-chat", "k3-small",
                                  "kimi-k3", "kimi-linear-48b"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/configs/models/%s", project_dir, names[i]); /* a directory */
        struct k3_model_config c;
        struct k3_err err = {{0}};
        int rc = k3_model_config_load(p, &c, &err);
        CHECK_MSG(rc == 0, "%s: %s", names[i], err.msg);
    }
    /* The project's kimi-k3 config has the published values, field for field. */
    char a[4096], b[4096];
    path_of(a, sizeof a, shared_dir, "data/kimi-k3/config.json");
    path_of(b, sizeof b, project_dir, "configs/models/kimi-k3/config.json");
    struct k3_model_config ca, cb;
    struct k3_err err;
    if (!k3_model_config_load(a, &ca, &err) && !k3_model_config_load(b, &cb, &err)) {
        char *sa = NULL, *sb = NULL;
        size_t na = 0, nb = 0;
        FILE *fa = open_memstream(&sa, &na), *fb = open_memstream(&sb, &nb);
        k3_model_config_print(&ca, fa);
        k3_model_config_print(&cb, fb);
        fclose(fa);
        fclose(fb);
        CHECK(na == nb && !strcmp(sa, sb));
        free(sa);
        free(sb);
        struct k3_model_counts x, y;
        k3_model_counts_compute(&ca, 0, ca.n_layers - 1, &x);
        k3_model_counts_compute(&cb, 0, cb.n_layers - 1, &y);
        CHECK(memcmp(&x, &y, sizeof x) == 0 && !memcmp(ca.layer_attn, cb.layer_attn, sizeof ca.layer_attn));
    }
    /* The tiny configs have every feature: KDA and MLA, >= 3 AttnRes snapshots,
     * latent MoE, shared experts, MXFP4, dense layer 0, vocabulary 1024. */
    path_of(a, sizeof a, project_dir, "configs/models/k3-tiny/config.json");
    if (!k3_model_config_load(a, &ca, &err)) {
        CHECK(ca.vocab_size == 1024 && ca.n_kda_layers > 0 && ca.n_mla_layers > 0);
        CHECK(ca.attn_res_block_size && (ca.n_layers + ca.attn_res_block_size - 1) /
                                                ca.attn_res_block_size >= 3);
        CHECK(ca.routed_expert_hidden_size && ca.n_shared_experts && ca.experts_mxfp4);
        CHECK(!k3_model_config_layer_is_moe(&ca, 0) && k3_model_config_layer_is_mla(&ca, 3) &&
              k3_model_config_layer_is_mla(&ca, ca.n_layers - 1));
    }
}

/* ---- broken configs: k3-tiny with one edit each ---- */

typedef void (*edit_fn)(json_t *root, json_t *text);

static void e_model_type(json_t *r, json_t *t) { (void)t; json_object_set_new(r, "model_type", json_string("llama")); }
static void e_no_text_config(json_t *r, json_t *t) { (void)t; json_object_del(r, "text_config"); }
static void e_no_hidden(json_t *r, json_t *t) { (void)r; json_object_del(t, "hidden_size"); }
static void e_hidden_string(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "hidden_size", json_string("256")); }
static void e_zero_based(json_t *r, json_t *t)
{
    (void)r;
    json_t *l = json_object_get(json_object_get(t, "linear_attn_config"), "kda_layers");
    json_array_set_new(l, 0, json_integer(0));
}
static void e_twice(json_t *r, json_t *t)
{
    (void)r;
    json_t *l = json_object_get(json_object_get(t, "linear_attn_config"), "kda_layers");
    json_array_append_new(l, json_integer(4));
}
static void e_dup(json_t *r, json_t *t)
{
    (void)r;
    json_t *l = json_object_get(json_object_get(t, "linear_attn_config"), "kda_layers");
    json_array_append_new(l, json_integer(1));
}
static void e_neither(json_t *r, json_t *t)
{
    (void)r;
    json_t *l = json_object_get(json_object_get(t, "linear_attn_config"), "kda_layers");
    json_array_remove(l, 1); /* layer 2 (1-based) */
}
static void e_topk(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "num_experts_per_token", json_integer(17)); }
static void e_rope(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "mla_use_nope", json_false()); }
static void e_quant_format(json_t *r, json_t *t)
{
    (void)r;
    json_object_set_new(json_object_get(t, "quantization_config"), "format",
                        json_string("nvfp4-pack-quantized"));
}
static void e_group(json_t *r, json_t *t)
{
    (void)r;
    json_t *w = json_object_get(json_object_get(json_object_get(json_object_get(t,
                "quantization_config"), "config_groups"), "group_0"), "weights");
    json_object_set_new(w, "group_size", json_integer(16));
}
static void e_act(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "hidden_act", json_string("gelu")); }
static void e_groups(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "num_expert_group", json_integer(8)); }
static void e_latent32(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "routed_expert_hidden_size", json_integer(100)); }
static void e_tied(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "tie_word_embeddings", json_true()); }
static void e_bos(json_t *r, json_t *t) { (void)t; json_object_set_new(r, "bos_token_id", json_integer(5000)); }
static void e_kv_heads(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "num_key_value_heads", json_integer(1)); }
static void e_lower_bound(json_t *r, json_t *t)
{
    (void)r;
    json_object_set_new(json_object_get(t, "linear_attn_config"), "gate_lower_bound", json_real(1.0));
}
static void e_eps(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "rms_norm_eps", json_real(0.0)); }
static void e_mtp(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "num_nextn_predict_layers", json_integer(1)); }
static void e_inner_type(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "model_type", json_string("deepseek_v3")); }
static void e_dtype(json_t *r, json_t *t) { (void)r; json_object_set_new(t, "dtype", json_string("float32")); }
static void e_no_block(json_t *r, json_t *t) { (void)r; json_object_del(t, "attn_res_block_size"); }

static void test_broken(void)
{
    char p[4096];
    path_of(p, sizeof p, project_dir, "configs/models/k3-tiny/config.json");
    json_error_t jerr;
    json_t *base = json_load_file(p, 0, &jerr);
    CHECK_MSG(base != NULL, "%s: %s", p, jerr.text);
    if (!base) return;
    static const struct {
        edit_fn edit;
        const char *field, *what;
    } cases[] = {
        {e_model_type, ": model_type:", "unsupported"},
        {e_no_text_config, ": text_config:", "missing"},
        {e_no_hidden, "text_config.hidden_size:", "missing"},
        {e_hidden_string, "text_config.hidden_size:", "expected an integer"},
        {e_zero_based, "linear_attn_config.kda_layers:", "1-based"},
        {e_twice, "linear_attn_config.full_attn_layers:", "layer 4 is also in kda_layers"},
        {e_dup, "linear_attn_config.kda_layers:", "layer 1 is listed twice"},
        {e_neither, "text_config.linear_attn_config:", "layer 2 (1-based) is in neither"},
        {e_topk, "text_config.num_experts_per_token:", "exceeds num_experts"},
        {e_rope, "text_config.mla_use_nope:", "unsupported"},
        {e_quant_format, "quantization_config.format:", "unsupported"},
        {e_group, "weights.group_size:", "must be 32"},
        {e_act, "text_config.hidden_act:", "unsupported"},
        {e_groups, "text_config.num_expert_group:", "must be 1"},
        {e_latent32, "text_config.routed_expert_hidden_size:", "multiple of 32"},
        {e_tied, "text_config.tie_word_embeddings:", "unsupported"},
        {e_bos, "bos_token_id:", "not below vocab_size"},
        {e_kv_heads, "text_config.num_key_value_heads:", "must equal"},
        {e_lower_bound, "gate_lower_bound:", "must be negative"},
        {e_eps, "text_config.rms_norm_eps:", "must be in (0, 1)"},
        {e_mtp, "text_config.num_nextn_predict_layers:", "must be 0"},
        {e_inner_type, "text_config.model_type:", "kimi_linear"},
        {e_no_block, "text_config.attn_res_block_size:", "required for kimi_k3"},
        {e_dtype, "text_config.dtype:", "unsupported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *root = json_deep_copy(base);
        cases[i].edit(root, json_object_get(root, "text_config"));
        char *text = json_dumps(root, 0);
        struct k3_model_config c;
        struct k3_err err = {{0}};
        int rc = k3_model_config_parse(text, "broken.json", &c, &err);
        CHECK_MSG(rc == -1, "case %zu (%s) was accepted", i, cases[i].field);
        CHECK_STR_CONTAINS(err.msg, "broken.json");
        CHECK_STR_CONTAINS(err.msg, cases[i].field);
        CHECK_STR_CONTAINS(err.msg, cases[i].what);
        free(text);
        json_decref(root);
    }
    json_decref(base);

    struct k3_model_config c;
    struct k3_err err = {{0}};
    CHECK(k3_model_config_parse("{\"model_type\": \"kimi_k3\",", "trunc.json", &c, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "trunc.json:1:");
    CHECK_STR_CONTAINS(err.msg, "not valid JSON");
    CHECK(k3_model_config_load("/nonexistent/k3/config.json", &c, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/k3/config.json: cannot open");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SHARED_DIR PROJECT_DIR\n", argv[0]);
        return 2;
    }
    shared_dir = argv[1];
    project_dir = argv[2];
    test_published_k3();
    test_published_kimi_linear();
    test_kimi_linear_layout();
    test_shipped();
    test_broken();
    return k3_test_summary();
}
