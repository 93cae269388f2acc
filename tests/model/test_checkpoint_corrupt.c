/* test_checkpoint_corrupt.c - broken checkpoints fail cleanly, with a message
 * that names the file and the tensor.
 *
 * usage: test_checkpoint_corrupt CONFIG.json OUT_DIR
 *
 * Writes one good checkpoint (several shards), then for each case copies it,
 * breaks the copy in one way (truncated shard, bad header, missing tensor,
 * wrong dtype or shape, index out of step with the shards, ...) and checks that
 * open or validate returns -1 with the expected words. CTest also runs this
 * binary built with AddressSanitizer and UBSan (test_checkpoint_corrupt_asan),
 * so "cleanly" includes no out-of-bounds read and no leak. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "k3_test.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gen_weights.h"

static const char *out_dir;
static struct k3_model_config cfg;
static char good[4096];

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static int spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    return fclose(f) || w != len ? -1 : 0;
}

/* A fresh copy of the good checkpoint; returns its directory. */
static const char *fresh(const char *name, char *dir, size_t n)
{
    snprintf(dir, n, "%s/%s", out_dir, name);
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, good, dir);
    CHECK(system(cmd) == 0);
    return dir;
}

/* The shard file (full path) that holds tensor `name`, from the index. */
static void shard_of(const char *dir, const char *name, char *path, size_t n)
{
    char index[8192];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    json_t *root = json_load_file(index, 0, NULL);
    const char *file = json_string_value(json_object_get(json_object_get(root, "weight_map"), name));
    snprintf(path, n, "%s/%s", dir, file ? file : "?");
    json_decref(root);
}

typedef void (*header_edit)(json_t *header, const char *arg);

/* Rewrites a shard's header (its length may change; data offsets are relative
 * to the end of the header, so the data is kept as it is). */
static void rewrite_header(const char *path, header_edit edit, const char *arg)
{
    size_t len;
    char *buf = slurp(path, &len);
    CHECK(buf != NULL && len >= 8);
    if (!buf) return;
    uint64_t hlen;
    memcpy(&hlen, buf, 8);
    json_t *h = json_loadb(buf + 8, hlen, 0, NULL);
    CHECK(h != NULL);
    edit(h, arg);
    char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
    size_t data = len - 8 - hlen;
    char *out = malloc(8 + padded + data);
    uint64_t pl = padded;
    memcpy(out, &pl, 8);
    memcpy(out + 8, text, tl);
    memset(out + 8 + tl, ' ', padded - tl);
    memcpy(out + 8 + padded, buf + 8 + hlen, data);
    CHECK(spit(path, out, 8 + padded + data) == 0);
    free(out);
    free(text);
    json_decref(h);
    free(buf);
}

typedef void (*index_edit)(json_t *weight_map, const char *arg);

static void rewrite_index(const char *dir, index_edit edit, const char *arg)
{
    char index[8192];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    json_t *root = json_load_file(index, 0, NULL);
    CHECK(root != NULL);
    edit(json_object_get(root, "weight_map"), arg);
    CHECK(json_dump_file(root, index, JSON_INDENT(1)) == 0);
    json_decref(root);
}

/* Edits, with the tensor name in arg. */
static void h_dtype_i32(json_t *h, const char *n) { json_object_set_new(json_object_get(h, n), "dtype", json_string("I32")); }
static void h_dtype_f64(json_t *h, const char *n) { json_object_set_new(json_object_get(h, n), "dtype", json_string("F64")); }
static void h_transpose(json_t *h, const char *n)
{
    json_t *shape = json_object_get(json_object_get(h, n), "shape");
    json_t *a = json_incref(json_array_get(shape, 0)), *b = json_incref(json_array_get(shape, 1));
    json_array_set_new(shape, 0, b);
    json_array_set_new(shape, 1, a);
}
static void h_shrink(json_t *h, const char *n)
{
    json_t *shape = json_object_get(json_object_get(h, n), "shape");
    json_array_set_new(shape, 1, json_integer(json_integer_value(json_array_get(shape, 1)) - 1));
}
static void h_remove(json_t *h, const char *n) { json_object_del(h, n); }
static void h_rename(json_t *h, const char *n)
{
    char to[512];
    snprintf(to, sizeof to, "%s.renamed", n);
    json_object_set(h, to, json_object_get(h, n));
    json_object_del(h, n);
}
static void h_overlap(json_t *h, const char *n)
{
    /* n = "A|B": give A the data_offsets of B (same size). */
    char a[512];
    snprintf(a, sizeof a, "%s", n);
    char *bar = strchr(a, '|');
    *bar = 0;
    json_t *off = json_object_get(json_object_get(h, bar + 1), "data_offsets");
    json_object_set(json_object_get(h, a), "data_offsets", off);
}
static void h_past_end(json_t *h, const char *n)
{
    json_t *off = json_object_get(json_object_get(h, n), "data_offsets");
    json_int_t b = json_integer_value(json_array_get(off, 0)), e = json_integer_value(json_array_get(off, 1));
    json_array_set_new(off, 0, json_integer(b + ((json_int_t)1 << 30)));
    json_array_set_new(off, 1, json_integer(e + ((json_int_t)1 << 30)));
}
static void i_remove(json_t *m, const char *n) { json_object_del(m, n); }
static void i_bogus(json_t *m, const char *n)
{
    json_object_set(m, "language_model.model.bogus.weight", json_object_get(m, n));
}
static void i_missing_file(json_t *m, const char *n)
{
    json_object_set_new(m, n, json_string("model-00009-of-00009.safetensors"));
}
static void i_rename(json_t *m, const char *n)
{
    char to[512];
    snprintf(to, sizeof to, "%s.renamed", n);
    json_object_set(m, to, json_object_get(m, n));
    json_object_del(m, n);
}

/* Opens (and validates, if open works) dir; expects failure with every word. */
static void expect_fail(const char *what, const char *dir, const char *w1, const char *w2,
                        const char *w3)
{
    struct k3_checkpoint *ck = NULL;
    struct k3_err err = {{0}};
    int rc = k3_checkpoint_open(dir, &ck, &err);
    if (rc == 0) {
        rc = k3_checkpoint_validate(ck, &cfg, 0, cfg.n_layers - 1, NULL, &err);
        k3_checkpoint_free(ck);
    } else {
        CHECK_MSG(ck == NULL, "%s: open failed but returned a checkpoint", what);
    }
    CHECK_MSG(rc == -1, "%s: accepted", what);
    printf("%-22s -> %s\n", what, err.msg);
    const char *words[3] = {w1, w2, w3};
    for (int i = 0; i < 3; i++)
        if (words[i]) CHECK_MSG(strstr(err.msg, words[i]) != NULL, "%s: '%s' lacks '%s'", what, err.msg, words[i]);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s CONFIG.json OUT_DIR\n", argv[0]);
        return 2;
    }
    out_dir = argv[2];
    struct k3_err err;
    if (k3_model_config_load(argv[1], &cfg, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    snprintf(good, sizeof good, "%s/good", out_dir);
    struct k3_gen_opts o = {.config_path = argv[1], .out_dir = good, .seed = 3,
                            .shard_bytes = 3000000, .layer_lo = -1, .layer_hi = -1};
    struct k3_gen_stats st;
    CHECK_MSG(k3_gen_weights(&o, &st, &err) == 0, "%s", err.msg);
    CHECK(st.n_shards >= 3);
    struct k3_checkpoint *ck = NULL;
    CHECK_MSG(k3_checkpoint_open(good, &ck, &err) == 0, "%s", err.msg);
    CHECK(k3_checkpoint_validate(ck, &cfg, 0, cfg.n_layers - 1, NULL, &err) == 0);
    k3_checkpoint_free(ck);

    char dir[8192], shard[16384], cmd[32768];
    const char *a_log = "language_model.model.layers.1.self_attn.A_log";
    const char *q_proj = "language_model.model.layers.1.self_attn.q_proj.weight";
    const char *scale = "language_model.model.layers.2.block_sparse_moe.experts.5.w2.weight_scale";

    /* Truncated shard: the last tensor of shard 2 runs past the end. */
    fresh("truncated", dir, sizeof dir);
    snprintf(shard, sizeof shard, "%s/model-00002-of-%05d.safetensors", dir, st.n_shards);
    snprintf(cmd, sizeof cmd, "truncate -s -4096 '%s'", shard);
    CHECK(system(cmd) == 0);
    expect_fail("truncated shard", dir, "model-00002-of-", "truncated shard: tensor language_model.",
                "only");

    /* A shard shorter than its 8-byte length field. */
    fresh("tiny-file", dir, sizeof dir);
    snprintf(shard, sizeof shard, "%s/model-00003-of-%05d.safetensors", dir, st.n_shards);
    snprintf(cmd, sizeof cmd, "truncate -s 5 '%s'", shard);
    CHECK(system(cmd) == 0);
    expect_fail("5-byte shard", dir, "model-00003-of-", "too short", NULL);

    /* Header JSON broken in place. */
    fresh("bad-json", dir, sizeof dir);
    snprintf(shard, sizeof shard, "%s/model-00001-of-%05d.safetensors", dir, st.n_shards);
    size_t len;
    char *buf = slurp(shard, &len);
    CHECK(buf && buf[8] == '{');
    if (buf) {
        buf[8] = '[';
        buf[20] = '}';
        spit(shard, buf, len);
        free(buf);
    }
    expect_fail("bad header JSON", dir, "model-00001-of-", "bad safetensors header: not valid JSON",
                NULL);

    /* Header length beyond the file. */
    fresh("bad-length", dir, sizeof dir);
    snprintf(shard, sizeof shard, "%s/model-00001-of-%05d.safetensors", dir, st.n_shards);
    buf = slurp(shard, &len);
    if (buf) {
        uint64_t huge = 1ull << 40;
        memcpy(buf, &huge, 8);
        spit(shard, buf, len);
        free(buf);
    }
    expect_fail("header length", dir, "model-00001-of-", "bad safetensors header: it claims", NULL);

    /* Missing tensor (gone from the shard and the index). */
    fresh("missing", dir, sizeof dir);
    shard_of(dir, a_log, shard, sizeof shard);
    rewrite_header(shard, h_rename, a_log);
    rewrite_index(dir, i_rename, a_log);
    expect_fail("missing tensor", dir, a_log, "is missing", "model.safetensors.index.json");

    /* Wrong dtype (same size, so the header itself is consistent). */
    fresh("dtype", dir, sizeof dir);
    shard_of(dir, a_log, shard, sizeof shard);
    rewrite_header(shard, h_dtype_i32, a_log);
    expect_fail("wrong dtype", dir, a_log, "has dtype I32, but the model config implies F32",
                ".safetensors");

    /* A dtype k3 does not read at all. */
    fresh("dtype-f64", dir, sizeof dir);
    shard_of(dir, a_log, shard, sizeof shard);
    rewrite_header(shard, h_dtype_f64, a_log);
    expect_fail("unknown dtype", dir, a_log, "has dtype F64, which k3 does not read", ".safetensors");

    /* Wrong shape (transposed, same size). */
    fresh("shape", dir, sizeof dir);
    shard_of(dir, q_proj, shard, sizeof shard);
    rewrite_header(shard, h_transpose, q_proj);
    expect_fail("wrong shape", dir, q_proj, "has shape [256, 128], but the model config implies [128, 256]",
                ".safetensors");

    /* Shape and data_offsets disagree. */
    fresh("offsets", dir, sizeof dir);
    shard_of(dir, q_proj, shard, sizeof shard);
    rewrite_header(shard, h_shrink, q_proj);
    expect_fail("offsets vs shape", dir, q_proj, "data_offsets span", ".safetensors");

    /* Two tensors on the same bytes. */
    fresh("overlap", dir, sizeof dir);
    const char *n1 = "language_model.model.layers.1.input_layernorm.weight";
    const char *n2 = "language_model.model.layers.1.post_attention_layernorm.weight";
    shard_of(dir, n1, shard, sizeof shard);
    char pair[512];
    snprintf(pair, sizeof pair, "%s|%s", n1, n2);
    rewrite_header(shard, h_overlap, pair);
    expect_fail("overlap", dir, "overlap", "layers.1.", ".safetensors");

    /* data_offsets far past the end. */
    fresh("past-end", dir, sizeof dir);
    shard_of(dir, q_proj, shard, sizeof shard);
    rewrite_header(shard, h_past_end, q_proj);
    expect_fail("offsets past end", dir, q_proj, "truncated shard", ".safetensors");

    /* MXFP4 pair without its scale. */
    fresh("no-scale", dir, sizeof dir);
    shard_of(dir, scale, shard, sizeof shard);
    rewrite_header(shard, h_remove, scale);
    rewrite_index(dir, i_remove, scale);
    expect_fail("MXFP4 without scale", dir, scale, "is missing", "needs both weight_packed and weight_scale");

    /* The index and the shards out of step. */
    fresh("not-in-index", dir, sizeof dir);
    rewrite_index(dir, i_remove, q_proj);
    expect_fail("not in index", dir, q_proj, "not listed in the index", ".safetensors");
    fresh("bogus-in-index", dir, sizeof dir);
    rewrite_index(dir, i_bogus, q_proj);
    expect_fail("index names bogus", dir, "language_model.model.bogus.weight", "no such tensor",
                "model.safetensors.index.json");
    fresh("missing-file", dir, sizeof dir);
    rewrite_index(dir, i_missing_file, q_proj);
    expect_fail("missing shard file", dir, "model-00009-of-00009.safetensors", "cannot open",
                "model.safetensors.index.json");

    /* The index itself broken, or absent. */
    fresh("bad-index", dir, sizeof dir);
    snprintf(shard, sizeof shard, "%s/model.safetensors.index.json", dir);
    buf = slurp(shard, &len);
    if (buf) {
        spit(shard, buf, len / 2);
        free(buf);
    }
    expect_fail("truncated index", dir, "model.safetensors.index.json", "bad index", NULL);
    fresh("no-index", dir, sizeof dir);
    snprintf(shard, sizeof shard, "%s/model.safetensors.index.json", dir);
    unlink(shard);
    expect_fail("no index", dir, "no model.safetensors.index.json", "gen-weights", NULL);
    expect_fail("not a directory", "/nonexistent/k3-ckpt", "/nonexistent/k3-ckpt",
                "not a checkpoint directory", NULL);

    if (!k3_test_failed) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out_dir);
        if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", out_dir);
    }
    return k3_test_summary();
}
