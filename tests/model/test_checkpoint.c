/* test_checkpoint.c - gen-weights -> reader round trip for one model config.
 *
 * usage: test_checkpoint CONFIG.json OUT_DIR [--layers A-B] [--samples FILE] [--residency] [--keep]
 *
 * Writes a synthetic checkpoint (several shards), opens and validates it, and
 * checks: entries and bytes per kind against the config's counts; every value
 * finite and at the scale the generator promises; row, column and linear
 * (MXFP4) slices against whole-tensor reads; expert subsets; determinism across
 * shard sizes; varied router choices. --samples writes decoded MXFP4 rows for
 * the independent Python check; --residency checks with mincore() that slice
 * and expert-subset reads fault in only their own pages. The checkpoints are
 * removed when every check passed, unless --keep (the first one, OUT_DIR/a). */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "k3_test.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gen_weights.h"
#include "model/tensors.h"

static float elem(const struct k3_tensor *t, uint64_t i)
{
    const uint8_t *p = t->data;
    if (t->dtype == K3_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return k3_bf16_to_f32(h);
    }
    if (t->dtype == K3_DTYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    return NAN;
}

/* ---- every tensor: finite, and at the promised scale ---- */

struct scan {
    const struct k3_checkpoint *ck;
    const struct k3_model_config *cfg;
    int64_t n_bad, n_checked;
    int64_t n_entries;
    uint64_t bytes[K3_TK_COUNT];
    float *row;
};

static int scan_one(const struct k3_tensor_spec *s, void *ctx)
{
    struct scan *sc = ctx;
    struct k3_err err;
    sc->n_checked++;
    if (s->is_linear) {
        struct k3_linear lin;
        if (k3_checkpoint_linear(sc->ck, s->name, &lin, &err)) {
            sc->n_bad++;
            fprintf(stderr, "%s\n", err.msg);
            return 0;
        }
        sc->n_entries += lin.mxfp4 ? 2 : 1;
        sc->bytes[s->kind] += lin.mxfp4 ? lin.packed->n_bytes + lin.scale->n_bytes : lin.weight->n_bytes;
        /* RMS * sqrt(in) is the gain: 1, or 1/sqrt(2 n_layers) for projections into
         * the residual stream (gen_weights.c); MXFP4 rounding moves it by a few %. */
        double ss = 0;
        int finite = 1;
        int64_t rows = lin.out < 64 ? lin.out : 64; /* the first rows are enough for the scale */
        for (int64_t r = 0; r < rows; r++) {
            k3_linear_read_f32(&lin, r, r + 1, 0, lin.in, sc->row, &err);
            for (int64_t c = 0; c < lin.in; c++) {
                finite &= isfinite(sc->row[c]);
                ss += (double)sc->row[c] * sc->row[c];
            }
        }
        double gain = sqrt(ss / (double)(rows * lin.in)) * sqrt((double)lin.in);
        double gmin = 1.0 / sqrt(2.0 * sc->cfg->n_layers);
        int ok = finite && gain > 0.85 * gmin && gain < 1.15;
        if (!ok) {
            fprintf(stderr, "%s: finite %d, gain %.4f outside [%.4f, 1.15]\n", s->name, finite,
                    gain, 0.85 * gmin);
            sc->n_bad++;
        }
        return 0;
    }
    const struct k3_tensor *t = k3_checkpoint_find(sc->ck, s->name);
    if (!t) {
        sc->n_bad++;
        return 0;
    }
    sc->n_entries++;
    sc->bytes[s->kind] += t->n_bytes;
    uint64_t n = t->n_bytes / k3_dtype_bytes(t->dtype);
    double lo = INFINITY, hi = -INFINITY;
    for (uint64_t i = 0; i < n; i++) {
        float v = elem(t, i);
        if (!isfinite(v)) {
            lo = NAN;
            break;
        }
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    int ok = !isnan(lo);
    if (strstr(s->name, "norm.weight")) ok &= lo >= 0.89 && hi <= 1.11; /* 1 + U(-0.1, 0.1) */
    if (strstr(s->name, "A_log")) ok &= lo >= -0.7 && hi <= 0.7;      /* log U(0.5, 2), 0 pad */
    if (strstr(s->name, "dt_bias")) ok &= lo >= -2.0 && hi <= 0.0;
    if (s->kind == K3_TK_EMBED) ok &= lo >= -1.75 && hi <= 1.75 && hi - lo > 3.0; /* std 1 */
    if (!ok) {
        fprintf(stderr, "%s: values in [%g, %g]\n", s->name, lo, hi);
        sc->n_bad++;
    }
    return 0;
}

/* ---- slices against whole-tensor reads ---- */

static void check_slices(const struct k3_checkpoint *ck, const struct k3_model_config *cfg, int layer)
{
    char name[256];
    struct k3_err err;
    const struct k3_tensor *emb;
    CHECK(k3_checkpoint_get(ck, k3_model_tensor_name(cfg, name, sizeof name, "model.embed_tokens.weight"),
                            &emb, &err) == 0);
    if (!emb) return;
    /* Rows [5, 9) of the embedding. */
    size_t row_bytes = (size_t)emb->shape[1] * 2;
    uint8_t *buf = malloc(row_bytes * 8);
    CHECK(k3_tensor_read_rows(emb, 5, 9, buf, row_bytes * 8, &err) == 0);
    CHECK(memcmp(buf, (const uint8_t *)emb->data + 5 * row_bytes, 4 * row_bytes) == 0);
    CHECK(k3_tensor_read_rows(emb, 5, emb->shape[0] + 1, buf, row_bytes * 8, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "outside");
    CHECK(k3_tensor_read_rows(emb, 0, 9, buf, row_bytes * 8, &err) == -1); /* buffer too small */
    free(buf);
    /* Columns [32, 96) of the embedding: every row, 64 values. */
    size_t cols_bytes = (size_t)emb->shape[0] * 64 * 2;
    uint16_t *cols = malloc(cols_bytes);
    CHECK(k3_tensor_read_cols(emb, 32, 96, cols, cols_bytes, &err) == 0);
    int same = 1;
    for (int64_t r = 0; r < emb->shape[0]; r += 97)
        for (int c = 0; c < 64; c++)
            same &= k3_bf16_to_f32(cols[r * 64 + c]) == elem(emb, (uint64_t)(r * emb->shape[1] + 32 + c));
    CHECK(same);
    free(cols);

    /* A linear of the layer: rows/cols window of k3_linear_read_f32 == the full read. */
    const char *lin_name = k3_model_config_layer_is_moe(cfg, layer)
                               ? "model.layers.%d.block_sparse_moe.experts.1.w2"
                               : "model.layers.%d.mlp.down_proj";
    struct k3_linear lin;
    k3_model_tensor_name(cfg, name, sizeof name, lin_name, layer);
    CHECK_MSG(k3_checkpoint_linear(ck, name, &lin, &err) == 0, "%s", err.msg);
    if (!lin.out) return;
    CHECK(lin.mxfp4 == (cfg->experts_mxfp4 && k3_model_config_layer_is_moe(cfg, layer)));
    float *full = malloc((size_t)(lin.out * lin.in) * sizeof *full);
    int64_t r0 = 1, r1 = lin.out < 4 ? lin.out : 4, c0 = 32, c1 = lin.in >= 96 ? 96 : lin.in;
    float *win = malloc((size_t)((r1 - r0) * (c1 - c0)) * sizeof *win);
    CHECK(k3_linear_read_f32(&lin, 0, lin.out, 0, lin.in, full, &err) == 0);
    CHECK(k3_linear_read_f32(&lin, r0, r1, c0, c1, win, &err) == 0);
    same = 1;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++)
            same &= win[(r - r0) * (c1 - c0) + (c - c0)] == full[r * lin.in + c];
    CHECK(same);
    /* An odd window inside one MXFP4 block decodes the same elements. */
    CHECK(k3_linear_read_f32(&lin, 0, 1, 3, 7, win, &err) == 0);
    CHECK(win[0] == full[3] && win[3] == full[6]);
    CHECK(k3_linear_read_f32(&lin, 0, lin.out + 1, 0, 1, win, &err) == -1);
    if (lin.mxfp4) {
        /* By hand: element 2j low nibble, 2j+1 high nibble, scale per 32. */
        const uint8_t *pk = lin.packed->data, *sc = lin.scale->data;
        int hand = 1;
        for (int64_t c = 0; c < lin.in; c++) {
            uint8_t b = pk[c / 2], nib = (c & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15);
            float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
            float v = (nib & 8 ? -mag[nib & 7] : mag[nib & 7]) * ldexpf(1.0f, sc[c / 32] - 127);
            hand &= v == full[c];
        }
        CHECK(hand);
        /* OCP scale rule: the block maximum lands in [4, 6] after scaling. */
        int scale_ok = 1;
        for (int64_t b = 0; b < lin.in / 32; b++) {
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(full[b * 32 + i]));
            float q = amax / ldexpf(1.0f, sc[b] - 127);
            scale_ok &= q >= 4.0f && q <= 6.0f;
        }
        CHECK(scale_ok);
    }
    free(win);
    free(full);
}

/* ---- expert subsets ---- */

static void check_experts(const struct k3_checkpoint *ck, const struct k3_model_config *cfg, int layer)
{
    char fmt[256];
    struct k3_err err;
    int ids[3] = {cfg->n_experts - 1, 0, 3};
    struct k3_linear lin[3];
    k3_model_tensor_name(cfg, fmt, sizeof fmt, "model.layers.%d.block_sparse_moe.experts.%%d.w3", layer);
    CHECK_MSG(k3_checkpoint_experts(ck, fmt, ids, 3, lin, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, ".experts.%d.w3.", ids[i]);
        const struct k3_tensor *t = lin[i].mxfp4 ? lin[i].packed : lin[i].weight;
        CHECK(t && strstr(t->name, want));
        CHECK(lin[i].out == cfg->moe_intermediate_size && lin[i].in == k3_model_config_expert_width(cfg));
    }
    int bad[1] = {cfg->n_experts};
    CHECK(k3_checkpoint_experts(ck, fmt, bad, 1, lin, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "is missing");
}

/* ---- routers pick varied experts on unit-RMS inputs ---- */

static void check_router(const struct k3_checkpoint *ck, const struct k3_model_config *cfg, int layer)
{
    char name[256];
    const struct k3_tensor *w, *b;
    struct k3_err err;
    if (k3_checkpoint_get(ck, k3_model_tensor_name(cfg, name, sizeof name,
                          "model.layers.%d.block_sparse_moe.gate.weight", layer), &w, &err) ||
        k3_checkpoint_get(ck, k3_model_tensor_name(cfg, name, sizeof name,
                          "model.layers.%d.block_sparse_moe.gate.e_score_correction_bias", layer), &b, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    const int E = cfg->n_experts, K = cfg->n_experts_per_token, T = 64;
    const int64_t d = cfg->hidden_size;
    int *used = calloc((size_t)E, sizeof *used);
    float *x = malloc((size_t)d * sizeof *x), *score = malloc((size_t)E * sizeof *score);
    uint64_t s = 12345;
    for (int t = 0; t < T; t++) {
        for (int64_t i = 0; i < d; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = ((float)(s >> 40) / 16777216.0f - 0.5f) * 3.4641016f; /* unit RMS */
        }
        for (int e = 0; e < E; e++) {
            double acc = 0;
            for (int64_t i = 0; i < d; i++) acc += (double)elem(w, (uint64_t)(e * d + i)) * x[i];
            score[e] = 1.0f / (1.0f + expf(-(float)acc)) + elem(b, (uint64_t)e);
        }
        for (int k = 0; k < K; k++) {
            int best = 0;
            for (int e = 1; e < E; e++) if (score[e] > score[best]) best = e;
            used[best]++;
            score[best] = -INFINITY;
        }
    }
    int distinct = 0, busiest = 0;
    for (int e = 0; e < E; e++) {
        distinct += used[e] > 0;
        if (used[e] > busiest) busiest = used[e];
    }
    /* Unbiased uniform routing would reach E (1 - (1 - 1/E)^(T K)) experts: 610 of
     * K3's 896 for 64 tokens; at least half of them, or half the picks, are required. */
    int want = T * K < E ? T * K / 2 : E / 2;
    CHECK_MSG(distinct >= want, "layer %d: %d distinct experts in %d tokens (want >= %d)", layer,
              distinct, T, want);
    CHECK_MSG(busiest < T, "layer %d: one expert took every token", layer);
    printf("router layer %d: %d of %d experts used by %d tokens x top-%d, busiest %d\n", layer,
           distinct, E, T, K, busiest);
    free(used);
    free(x);
    free(score);
}

/* ---- determinism: same bytes whatever the sharding ---- */

static void check_same(const struct k3_checkpoint *a, const struct k3_checkpoint *b, int expect_same)
{
    int64_t differ = 0;
    for (int i = 0; i < k3_checkpoint_n_tensors(a); i++) {
        const struct k3_tensor *x = k3_checkpoint_tensor(a, i);
        const struct k3_tensor *y = k3_checkpoint_find(b, x->name);
        if (!y || y->n_bytes != x->n_bytes || memcmp(x->data, y->data, x->n_bytes)) differ++;
    }
    if (expect_same)
        CHECK_MSG(differ == 0 && k3_checkpoint_n_tensors(a) == k3_checkpoint_n_tensors(b),
                  "%lld tensors differ", (long long)differ);
    else
        CHECK_MSG(differ > k3_checkpoint_n_tensors(a) / 2, "only %lld tensors differ with another seed",
                  (long long)differ);
}

/* ---- decoded MXFP4 rows for the Python check ---- */

static void write_samples(const struct k3_checkpoint *ck, const struct k3_model_config *cfg,
                          const char *path, int layer_lo, int layer_hi)
{
    json_t *arr = json_array();
    struct k3_err err;
    for (int l = layer_lo; l <= layer_hi && json_array_size(arr) < 3; l++) {
        if (!k3_model_config_layer_is_moe(cfg, l)) continue;
        static const char *proj[3] = {"w1", "w3", "w2"};
        char base[256];
        int p = (int)json_array_size(arr);
        int e = (l * 7 + p) % cfg->n_experts;
        k3_model_tensor_name(cfg, base, sizeof base, "model.layers.%d.block_sparse_moe.experts.%d.%s",
                             l, e, proj[p]);
        struct k3_linear lin;
        if (k3_checkpoint_linear(ck, base, &lin, &err)) continue;
        int64_t r0 = 2, r1 = 4;
        float *v = malloc((size_t)((r1 - r0) * lin.in) * sizeof *v);
        k3_linear_read_f32(&lin, r0, r1, 0, lin.in, v, &err);
        json_t *vals = json_array();
        for (int64_t i = 0; i < (r1 - r0) * lin.in; i++) json_array_append_new(vals, json_real(v[i]));
        json_array_append_new(arr, json_pack("{s:s,s:[I,I],s:I,s:o}", "linear", base, "rows",
                                             (json_int_t)r0, (json_int_t)r1, "in",
                                             (json_int_t)lin.in, "values", vals));
        free(v);
    }
    CHECK(json_array_size(arr) > 0);
    CHECK(json_dump_file(arr, path, JSON_COMPACT) == 0);
    json_decref(arr);
}

/* ---- residency: reads fault in only their pages ---- */

static int64_t resident_pages(const void *base, uint64_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t n = (size_t)((size + (uint64_t)page - 1) / (uint64_t)page);
    unsigned char *vec = malloc(n);
    int64_t count = -1;
    if (vec && mincore((void *)base, size, vec) == 0) {
        count = 0;
        for (size_t i = 0; i < n; i++) count += vec[i] & 1;
    }
    free(vec);
    return count;
}

/* One shard of 64 MXFP4 "experts" [512, 2048]: 64 x (512 KiB + 32 KiB). */
static void check_residency(const char *dir)
{
    char path[8192];
    snprintf(path, sizeof path, "mkdir -p %s", dir);
    if (system(path)) return;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const int E = 64, out = 512, in = 2048;
    json_t *h = json_object();
    uint64_t off = 0;
    for (int e = 0; e < E; e++) {
        char name[128];
        uint64_t np = (uint64_t)out * in / 2, ns = (uint64_t)out * in / 32;
        snprintf(name, sizeof name, "experts.%d.w1.weight_packed", e);
        json_object_set_new(h, name, json_pack("{s:s,s:[i,i],s:[I,I]}", "dtype", "U8", "shape", out,
                                               in / 2, "data_offsets", (json_int_t)off,
                                               (json_int_t)(off + np)));
        off += np;
        snprintf(name, sizeof name, "experts.%d.w1.weight_scale", e);
        json_object_set_new(h, name, json_pack("{s:s,s:[i,i],s:[I,I]}", "dtype", "U8", "shape", out,
                                               in / 32, "data_offsets", (json_int_t)off,
                                               (json_int_t)(off + ns)));
        off += ns;
    }
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    size_t hl = strlen(text), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    uint64_t len = padded;
    fwrite(&len, 8, 1, f); /* little-endian host */
    fwrite(text, 1, hl, f);
    fwrite("        ", 1, padded - hl, f);
    uint8_t *chunk = malloc(1 << 20);
    for (int i = 0; i < (1 << 20); i++) chunk[i] = (uint8_t)(i * 37 + 11);
    for (uint64_t done = 0; done < off;) {
        uint64_t n = off - done < (1 << 20) ? off - done : (1 << 20);
        fwrite(chunk, 1, n, f);
        done += n;
    }
    free(chunk);
    free(text);
    fflush(f);
    fsync(fileno(f));
    fclose(f);
    int fd = open(path, O_RDONLY);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);

    struct k3_checkpoint *ck;
    struct k3_err err;
    CHECK_MSG(k3_checkpoint_open(dir, &ck, &err) == 0, "%s", err.msg);
    if (!ck) return;
    const struct k3_tensor *t0 = k3_checkpoint_tensor(ck, 0);
    const uint8_t *base = (const uint8_t *)t0->data - t0->offset;
    uint64_t size = k3_checkpoint_shard_bytes(ck, 0);
    int64_t before = resident_pages(base, size), total = (int64_t)(size / 4096);
    if (before < 0 || before > total / 10) {
        printf("SKIP residency: the page cache could not be dropped here (%lld of %lld pages "
               "resident after POSIX_FADV_DONTNEED)\n", (long long)before, (long long)total);
        k3_checkpoint_free(ck);
        return;
    }
    /* Two experts of 64, fully decoded. */
    int ids[2] = {5, 40};
    struct k3_linear lin[2];
    CHECK(k3_checkpoint_experts(ck, "experts.%d.w1", ids, 2, lin, &err) == 0);
    float *row = malloc((size_t)in * sizeof *row);
    double sum = 0;
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < out; r++) {
            k3_linear_read_f32(&lin[i], r, r + 1, 0, in, row, &err);
            sum += row[0];
        }
    int64_t after = resident_pages(base, size);
    int64_t need = 2 * (int64_t)((uint64_t)out * in / 2 + (uint64_t)out * in / 32) / 4096;
    printf("residency: 2 of %d experts read: %lld pages faulted in, %lld needed, file %lld pages "
           "(checksum %g)\n", E, (long long)(after - before), (long long)need, (long long)total, sum);
    CHECK_MSG(after - before <= need + need / 8 + 16, "%lld pages for %lld needed",
              (long long)(after - before), (long long)need);
    CHECK(after - before >= need);
    free(row);
    k3_checkpoint_free(ck);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s CONFIG.json OUT_DIR [--layers A-B] [--samples FILE] [--residency] [--keep]\n",
                argv[0]);
        return 2;
    }
    const char *config = argv[1], *out = argv[2], *samples = NULL;
    int lo = -1, hi = -1, residency = 0, keep = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc) sscanf(argv[++i], "%d-%d", &lo, &hi);
        else if (!strcmp(argv[i], "--samples") && i + 1 < argc) samples = argv[++i];
        else if (!strcmp(argv[i], "--residency")) residency = 1;
        else if (!strcmp(argv[i], "--keep")) keep = 1;
    }
    struct k3_model_config cfg;
    struct k3_err err;
    if (k3_model_config_load(config, &cfg, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (lo < 0) {
        lo = 0;
        hi = cfg.n_layers - 1;
    }
    struct k3_model_counts counts;
    k3_model_counts_compute(&cfg, lo, hi, &counts);

    /* A: about three shards, seed 7. B: one shard, seed 7. C: seed 8. */
    char dir_a[4096], dir_b[4096], dir_c[4096];
    snprintf(dir_a, sizeof dir_a, "%s/a", out);
    snprintf(dir_b, sizeof dir_b, "%s/b", out);
    snprintf(dir_c, sizeof dir_c, "%s/c", out);
    struct k3_gen_opts o = {.config_path = config, .out_dir = dir_a, .seed = 7,
                            .shard_bytes = counts.bytes_total / 3 + 1, .layer_lo = lo, .layer_hi = hi};
    struct k3_gen_stats st;
    CHECK_MSG(k3_gen_weights(&o, &st, &err) == 0, "%s", err.msg);
    CHECK(st.n_shards >= 3 && st.n_tensors == counts.n_tensors_total);
    CHECK(st.tensor_bytes == counts.bytes_total && st.n_params == counts.params_total);

    struct k3_checkpoint *ck = NULL;
    CHECK_MSG(k3_checkpoint_open(dir_a, &ck, &err) == 0, "%s", err.msg);
    if (!ck) return k3_test_summary();
    CHECK(k3_checkpoint_n_shards(ck) == st.n_shards);
    CHECK(k3_checkpoint_n_tensors(ck) == counts.n_tensors_total);
    int n_extra = -1;
    CHECK_MSG(k3_checkpoint_validate(ck, &cfg, lo, hi, &n_extra, &err) == 0, "%s", err.msg);
    CHECK(n_extra == 0);
    uint64_t file_bytes = 0;
    for (int i = 0; i < k3_checkpoint_n_shards(ck); i++) file_bytes += k3_checkpoint_shard_bytes(ck, i);
    CHECK(file_bytes == st.file_bytes);

    struct scan sc = {.ck = ck, .cfg = &cfg};
    /* The widest input of any linear. */
    int64_t ins[] = {cfg.hidden_size, cfg.intermediate_size,
                     cfg.n_shared_experts * cfg.moe_intermediate_size, cfg.moe_intermediate_size,
                     (int64_t)cfg.n_heads * cfg.v_head_dim, (int64_t)cfg.kda_n_heads * cfg.kda_head_dim,
                     cfg.q_lora_rank, cfg.kv_lora_rank, cfg.kda_head_dim,
                     k3_model_config_expert_width(&cfg)};
    int64_t widest = 0;
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) if (ins[i] > widest) widest = ins[i];
    sc.row = malloc((size_t)widest * sizeof *sc.row);
    k3_model_tensors_foreach(&cfg, lo, hi, scan_one, &sc);
    free(sc.row);
    CHECK_MSG(sc.n_bad == 0, "%lld of %lld tensors bad", (long long)sc.n_bad, (long long)sc.n_checked);
    CHECK(sc.n_entries == counts.n_tensors_total);
    CHECK(memcmp(sc.bytes, counts.bytes, sizeof sc.bytes) == 0);

    check_slices(ck, &cfg, lo);
    for (int l = lo; l <= hi; l++) {
        if (!k3_model_config_layer_is_moe(&cfg, l)) continue;
        check_experts(ck, &cfg, l);
        check_slices(ck, &cfg, l);
        check_router(ck, &cfg, l);
    }
    if (samples) write_samples(ck, &cfg, samples, lo, hi);

    /* Only small checkpoints are written twice more (determinism). */
    if (counts.bytes_total < (256ull << 20)) {
        o.out_dir = dir_b;
        o.shard_bytes = 0;
        CHECK_MSG(k3_gen_weights(&o, &st, &err) == 0, "%s", err.msg);
        CHECK(st.n_shards == 1);
        o.out_dir = dir_c;
        o.seed = 8;
        CHECK_MSG(k3_gen_weights(&o, &st, &err) == 0, "%s", err.msg);
        struct k3_checkpoint *b = NULL, *c = NULL;
        CHECK(k3_checkpoint_open(dir_b, &b, &err) == 0);
        CHECK(k3_checkpoint_open(dir_c, &c, &err) == 0);
        if (b) check_same(ck, b, 1);
        if (c) check_same(ck, c, 0);
        k3_checkpoint_free(b);
        k3_checkpoint_free(c);
    }
    k3_checkpoint_free(ck);
    if (residency) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/residency", out);
        check_residency(dir);
    }
    /* Multi-GB outputs are not left behind when everything passed. */
    if (!k3_test_failed) {
        char cmd[16384];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s/residency'%s%s%s", dir_b, dir_c, out,
                 keep ? "" : " '", keep ? "" : dir_a, keep ? "" : "'");
        if (system(cmd)) fprintf(stderr, "warning: could not remove %s/*\n", out);
    }
    return k3_test_summary();
}
