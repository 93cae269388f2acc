/* cmd_inspect.c - `k3 inspect`: a model's architecture, layer pattern, and
 * parameter and byte counts per kind of tensor.
 *
 * With --model-config alone the counts come from the config (the tensor list
 * of model/tensors.h). With --model DIR the checkpoint is opened and validated
 * against its config.json, and the bytes actually stored are counted next to
 * the expected ones (a --layers slice written by gen-weights holds fewer
 * layers: they are taken from the checkpoint's k3 metadata). --json prints one
 * JSON object instead of the table. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/tensors.h"

/* 2.7795 T, 49.12 B, 6.93 M: decimal units, as model sizes are quoted. */
static const char *human(double x, char *buf, size_t n)
{
    if (x >= 1e12) snprintf(buf, n, "%.4f T", x / 1e12);
    else if (x >= 1e9) snprintf(buf, n, "%.2f B", x / 1e9);
    else if (x >= 1e6) snprintf(buf, n, "%.2f M", x / 1e6);
    else snprintf(buf, n, "%.0f", x);
    return buf;
}

static const char *human_bytes(double x, char *buf, size_t n)
{
    if (x >= 1e12) snprintf(buf, n, "%.4f TB", x / 1e12);
    else if (x >= 1e9) snprintf(buf, n, "%.2f GB", x / 1e9);
    else if (x >= 1e6) snprintf(buf, n, "%.2f MB", x / 1e6);
    else snprintf(buf, n, "%.0f bytes", x);
    return buf;
}

static void print_table(const struct k3_model_config *cfg, const struct k3_model_counts *c,
                        int layer_lo, int layer_hi, const uint64_t *stored_bytes,
                        uint64_t stored_total)
{
    k3_model_config_print(cfg, stdout);
    if (layer_lo != 0 || layer_hi != cfg->n_layers - 1)
        printf("layers          %d-%d only (a slice; counts below are for the slice)\n", layer_lo,
               layer_hi);
    printf("\n# %-15s %10s %18s %10s %20s%s\n", "kind", "tensors", "params", "share", "bytes",
           stored_bytes ? "         stored bytes" : "");
    for (int k = 0; k < K3_TK_COUNT; k++) {
        if (!c->n_tensors[k]) continue;
        printf("  %-15s %10lld %18lld %9.3f%% %20llu", k3_tensor_kind_name((enum k3_tensor_kind)k),
               (long long)c->n_tensors[k], (long long)c->params[k],
               100.0 * (double)c->params[k] / (double)c->params_total,
               (unsigned long long)c->bytes[k]);
        if (stored_bytes) printf(" %20llu", (unsigned long long)stored_bytes[k]);
        putchar('\n');
    }
    printf("  %-15s %10lld %18lld %9.3f%% %20llu", "total", (long long)c->n_tensors_total,
           (long long)c->params_total, 100.0, (unsigned long long)c->bytes_total);
    if (stored_bytes) printf(" %20llu", (unsigned long long)stored_total);
    putchar('\n');
    char h1[32], h2[32];
    printf("\nparameters      %s total (%lld)\n", human((double)c->params_total, h1, sizeof h1),
           (long long)c->params_total);
    printf("active          %s per token (%lld: all but routed experts, plus %d of %d); "
           "%s without the embedding table (a lookup, not a matmul)\n",
           human((double)c->params_active, h1, sizeof h1), (long long)c->params_active,
           cfg->n_experts_per_token, cfg->n_experts,
           human((double)(c->params_active - c->params[K3_TK_EMBED]), h2, sizeof h2));
    printf("on disk         %s = %.4f TiB (%llu bytes)%s\n",
           human_bytes((double)c->bytes_total, h1, sizeof h1),
           (double)c->bytes_total / (double)(1ull << 40), (unsigned long long)c->bytes_total,
           cfg->experts_mxfp4 ? "; routed experts MXFP4 (4.25 bits), rest bf16/fp32" : "");
    printf("routed experts  %s (%llu bytes), %.1f%% of the bytes\n",
           human_bytes((double)c->bytes[K3_TK_EXPERT], h1, sizeof h1),
           (unsigned long long)c->bytes[K3_TK_EXPERT],
           100.0 * (double)c->bytes[K3_TK_EXPERT] / (double)c->bytes_total);
    printf("active bytes    %s of weights read per token\n", human_bytes(c->bytes_active, h1, sizeof h1));
}

static json_t *counts_json(const struct k3_model_config *cfg, const struct k3_model_counts *c,
                           int layer_lo, int layer_hi, const uint64_t *stored_bytes,
                           uint64_t stored_total)
{
    json_t *kinds = json_object();
    for (int k = 0; k < K3_TK_COUNT; k++) {
        if (!c->n_tensors[k]) continue;
        json_t *o = json_pack("{s:I,s:I,s:I}", "tensors", (json_int_t)c->n_tensors[k], "params",
                              (json_int_t)c->params[k], "bytes", (json_int_t)c->bytes[k]);
        if (stored_bytes) json_object_set_new(o, "stored_bytes", json_integer((json_int_t)stored_bytes[k]));
        json_object_set_new(kinds, k3_tensor_kind_name((enum k3_tensor_kind)k), o);
    }
    char pattern[K3_MAX_LAYERS + 1];
    for (int l = 0; l < cfg->n_layers; l++) pattern[l] = k3_model_config_layer_is_mla(cfg, l) ? 'M' : 'K';
    pattern[cfg->n_layers] = 0;
    json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:I,s:I,s:s,s:i,s:i,s:i,s:i,s:i,s:o,s:I,s:I,s:I,s:f,s:s}",
                          "model_type", cfg->model_type, "arch", k3_arch_name(cfg->arch),
                          "layer_lo", layer_lo, "layer_hi", layer_hi, "hidden_size",
                          (json_int_t)cfg->hidden_size, "vocab_size", (json_int_t)cfg->vocab_size,
                          "layer_pattern", pattern, "n_layers", cfg->n_layers, "n_kda_layers",
                          cfg->n_kda_layers, "n_mla_layers", cfg->n_mla_layers, "n_experts",
                          cfg->n_experts, "n_experts_per_token", cfg->n_experts_per_token,
                          "kinds", kinds, "tensors", (json_int_t)c->n_tensors_total, "params",
                          (json_int_t)c->params_total, "params_active",
                          (json_int_t)c->params_active, "bytes_active", c->bytes_active,
                          "quantization", cfg->quant.present ? cfg->quant.format : "none");
    json_object_set_new(o, "bytes", json_integer((json_int_t)c->bytes_total));
    json_object_set_new(o, "params_active_without_embedding",
                        json_integer((json_int_t)(c->params_active - c->params[K3_TK_EMBED])));
    if (stored_bytes) json_object_set_new(o, "stored_bytes", json_integer((json_int_t)stored_total));
    return o;
}

/* gen-weights records the layer range of a slice in the index metadata. */
static void slice_from_checkpoint(const struct k3_checkpoint *ck, const struct k3_model_config *cfg,
                                  int *lo, int *hi)
{
    *lo = 0;
    *hi = cfg->n_layers - 1;
    int seen_lo = K3_MAX_LAYERS, seen_hi = -1;
    for (int i = 0; i < k3_checkpoint_n_tensors(ck); i++) {
        const char *name = k3_checkpoint_tensor(ck, i)->name;
        const char *p = strstr(name, "model.layers.");
        if (!p) continue;
        int l = 0;
        if (sscanf(p, "model.layers.%d.", &l) != 1) continue;
        if (l < seen_lo) seen_lo = l;
        if (l > seen_hi) seen_hi = l;
    }
    if (seen_hi >= 0) {
        *lo = seen_lo;
        *hi = seen_hi;
    }
}

struct stored_ctx {
    const struct k3_checkpoint *ck;
    uint64_t bytes[K3_TK_COUNT];
};

static int add_stored(const struct k3_tensor_spec *s, void *vctx)
{
    struct stored_ctx *ctx = vctx;
    char name[K3_TENSOR_NAME_BYTES + 16];
    static const char *suffixes[3] = {".weight", ".weight_packed", ".weight_scale"};
    if (!s->is_linear) {
        const struct k3_tensor *t = k3_checkpoint_find(ctx->ck, s->name);
        if (t) ctx->bytes[s->kind] += t->n_bytes;
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s%s", s->name, suffixes[i]);
        const struct k3_tensor *t = k3_checkpoint_find(ctx->ck, name);
        if (t) ctx->bytes[s->kind] += t->n_bytes;
    }
    return 0;
}

int k3_cmd_inspect(struct k3_cli *cli)
{
    const char *model = k3_arg(&cli->args, "model");
    const char *cfg_path = k3_arg(&cli->args, "model-config");
    int as_json = k3_arg_flag(&cli->args, "json");
    if (!model == !cfg_path) {
        fprintf(stderr, "k3 inspect: give --model DIR or --model-config CONFIG.json (one of them)\n");
        return K3_EXIT_USAGE;
    }
    struct k3_err err;
    struct k3_model_config cfg;
    if (k3_model_config_load(model ? model : cfg_path, &cfg, &err)) {
        fprintf(stderr, "k3 inspect: %s\n", err.msg);
        return K3_EXIT_USAGE;
    }
    int lo = 0, hi = cfg.n_layers - 1;
    struct k3_checkpoint *ck = NULL;
    struct stored_ctx stored = {0};
    uint64_t stored_total = 0;
    int n_extra = 0;
    if (model) {
        if (k3_checkpoint_open(model, &ck, &err)) {
            fprintf(stderr, "k3 inspect: %s\n", err.msg);
            return K3_EXIT_USAGE;
        }
        slice_from_checkpoint(ck, &cfg, &lo, &hi);
        if (k3_checkpoint_validate(ck, &cfg, lo, hi, &n_extra, &err)) {
            fprintf(stderr, "k3 inspect: %s\n", err.msg);
            k3_checkpoint_free(ck);
            return K3_EXIT_USAGE;
        }
        stored.ck = ck;
        k3_model_tensors_foreach(&cfg, lo, hi, add_stored, &stored);
        for (int k = 0; k < K3_TK_COUNT; k++) stored_total += stored.bytes[k];
    }
    struct k3_model_counts counts;
    k3_model_counts_compute(&cfg, lo, hi, &counts);
    if (as_json) {
        json_t *o = counts_json(&cfg, &counts, lo, hi, ck ? stored.bytes : NULL, stored_total);
        if (ck) {
            json_object_set_new(o, "shards", json_integer(k3_checkpoint_n_shards(ck)));
            json_object_set_new(o, "extra_tensors", json_integer(n_extra));
        }
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        print_table(&cfg, &counts, lo, hi, ck ? stored.bytes : NULL, stored_total);
        if (ck) {
            uint64_t file_bytes = 0;
            for (int i = 0; i < k3_checkpoint_n_shards(ck); i++)
                file_bytes += k3_checkpoint_shard_bytes(ck, i);
            printf("checkpoint      %s: %d shards, %d tensors, %llu bytes in files; every tensor "
                   "the config implies is present with the right dtype and shape%s\n",
                   model, k3_checkpoint_n_shards(ck), k3_checkpoint_n_tensors(ck),
                   (unsigned long long)file_bytes, n_extra ? " (plus extra tensors)" : "");
        }
    }
    k3_checkpoint_free(ck);
    return K3_EXIT_OK;
}
