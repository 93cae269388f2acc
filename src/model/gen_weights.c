/* gen_weights.c - synthetic checkpoints (see gen_weights.h).
 *
 * Plan: list the tensors (model/tensors.h), assign them in order to shards of
 * at most shard_bytes (an MXFP4 pair stays in one shard), then write each
 * shard: 8-byte header length, the JSON header padded with spaces to a
 * multiple of 8 (as the safetensors library does), and the data, generated
 * row by row so that multi-GB tensors need no multi-GB buffers.
 *
 * Initialisation. The values are chosen so that a forward pass stays O(1)
 * through every layer and the router spreads tokens over experts:
 *   - linears: uniform with std gain/sqrt(in), so a unit-RMS input (what the
 *     RMSNorms produce) gives unit-RMS outputs; the projections that write
 *     into the residual stream (o_proj, down_proj, w2, routed_expert_up_proj)
 *     use gain 1/sqrt(2 n_layers) so the stream grows slowly, not with depth;
 *   - the embedding: std 1 (K3 does not scale embeddings);
 *   - norm weights: 1 + U(-0.1, 0.1) (near 1, but not trivially 1, so a wrong
 *     or transposed norm shows in a comparison);
 *   - AttnRes pseudo-queries [1, d]: std 1/sqrt(d), so depth-softmax scores
 *     are O(1) and the mix is neither uniform (training's zero init) nor one-hot;
 *   - router: std 1/sqrt(d), so the logits are N(0, 1) per expert and top-k
 *     differs from token to token; e_score_correction_bias U(-0.02, 0.02):
 *     enough to change some selections (selection uses the biased score, the
 *     weights the unbiased one), small enough that a top-16 of 896 still
 *     spreads like an unbiased one (with U(-0.1, 0.1) 64 tokens reached only
 *     ~420 of K3's 896 experts instead of ~610);
 *   - KDA: conv taps U(+-1/sqrt(W)) (PyTorch's conv default); A_log =
 *     log U(0.5, 2) on the heads (zero padding after them, as ports report for
 *     K3) and dt_bias U(-2, 0), which keeps decays exp(g) spread over about
 *     (0.03, 0.9) for both the bounded-sigmoid (K3) and softplus (Kimi Linear)
 *     gates instead of saturating at 0 or 1;
 *   - MXFP4 experts: floats as for a linear, quantized with the OCP rule
 *     (research §5.2): scale 2^(floor(log2 amax) - 2) per 32 inputs, elements
 *     rounded to nearest even on the E2M1 grid, saturating at 6.
 * Every tensor has its own random stream, seeded from (seed, name), so values
 * do not depend on sharding or on --layers. */
#include "model/gen_weights.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "model/config.h"
#include "model/tensors.h"

/* ---- random numbers: splitmix64 seeding, xoshiro256** ---- */

struct rng {
    uint64_t s[4];
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_init(struct rng *r, uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    uint64_t x = seed ^ h;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [lo, hi). */
static inline float rng_uniform(struct rng *r, float lo, float hi)
{
    float u = (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
    return lo + (hi - lo) * u;
}

/* ---- what each tensor is filled with ---- */

enum fill { FILL_UNIFORM, FILL_NORM, FILL_A_LOG, FILL_DT_BIAS };

struct init {
    enum fill fill;
    float half_width;               /* FILL_UNIFORM: U(-hw, hw) */
};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static struct init init_for(const struct k3_model_config *cfg, const struct k3_tensor_spec *s)
{
    const float sqrt3 = 1.7320508f;
    struct init in = {FILL_UNIFORM, 0};
    if (s->is_linear) {
        float gain = 1.0f;
        if (ends_with(s->name, "o_proj") || ends_with(s->name, "down_proj") ||
            ends_with(s->name, ".w2") || ends_with(s->name, "routed_expert_up_proj"))
            gain = 1.0f / sqrtf(2.0f * (float)cfg->n_layers);
        /* The latent down-projection feeds experts, not the stream. */
        if (ends_with(s->name, "routed_expert_down_proj")) gain = 1.0f;
        in.half_width = sqrt3 * gain / sqrtf((float)s->shape[1]);
        return in;
    }
    if (s->kind == K3_TK_EMBED) {
        in.half_width = sqrt3;
    } else if (ends_with(s->name, "A_log")) {
        in.fill = FILL_A_LOG;
    } else if (ends_with(s->name, "dt_bias")) {
        in.fill = FILL_DT_BIAS;
    } else if (strstr(s->name, "conv1d")) {
        in.half_width = 1.0f / sqrtf((float)s->shape[s->n_dims - 1]);
    } else if (ends_with(s->name, "e_score_correction_bias")) {
        in.half_width = 0.02f;
    } else if (ends_with(s->name, "gate.weight") || ends_with(s->name, "_res_proj.weight")) {
        in.half_width = sqrt3 / sqrtf((float)s->shape[1]); /* router, AttnRes queries */
    } else {
        in.fill = FILL_NORM;                                 /* every other 1-D weight */
    }
    return in;
}

static float init_value(struct rng *r, const struct init *in, const struct k3_model_config *cfg,
                        uint64_t i)
{
    switch (in->fill) {
    case FILL_UNIFORM: return rng_uniform(r, -in->half_width, in->half_width);
    case FILL_NORM: return 1.0f + rng_uniform(r, -0.1f, 0.1f);
    case FILL_A_LOG: {
        float v = logf(rng_uniform(r, 0.5f, 2.0f));
        /* K3 pads A_log [head_dim] after the heads; Kimi Linear's [1,1,H,1] has none. */
        return i < (uint64_t)cfg->kda_n_heads ? v : 0.0f;
    }
    case FILL_DT_BIAS: return rng_uniform(r, -2.0f, 0.0f);
    }
    return 0.0f;
}

/* ---- MXFP4 quantization (OCP, research §5.2) ---- */

static uint8_t e2m1_encode(float x)
{
    uint8_t sign = x < 0 ? 8 : 0;
    float a = fabsf(x);
    uint8_t code;
    /* Midpoints of {0, .5, 1, 1.5, 2, 3, 4, 6}; ties go to the even code. */
    if (a <= 0.25f) code = 0;
    else if (a < 0.75f) code = 1;
    else if (a <= 1.25f) code = 2;
    else if (a < 1.75f) code = 3;
    else if (a <= 2.5f) code = 4;
    else if (a < 3.5f) code = 5;
    else if (a <= 5.0f) code = 6;
    else code = 7;
    return sign | code;
}

/* One row of `in` floats -> in/2 packed bytes and in/32 scale bytes. */
static void mxfp4_quantize_row(const float *v, int64_t in, uint8_t *packed, uint8_t *scale)
{
    for (int64_t b = 0; b < in / 32; b++) {
        const float *blk = v + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(blk[i]));
        int e = amax > 0 ? (int)floorf(log2f(amax)) - 2 : -127; /* emax of E2M1 is 2 */
        if (e < -127) e = -127;
        if (e > 127) e = 127;
        scale[b] = (uint8_t)(e + 127);
        float inv = ldexpf(1.0f, -e);
        for (int i = 0; i < 32; i += 2) {
            uint8_t lo = e2m1_encode(blk[i] * inv), hi = e2m1_encode(blk[i + 1] * inv);
            packed[b * 16 + i / 2] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* ---- the plan: entries (safetensors tensors) grouped into shards ---- */

struct entry {
    struct k3_tensor_spec spec;
    int part;                       /* 0: whole tensor or .weight; 1: weight_packed; 2: weight_scale */
    char name[K3_TENSOR_NAME_BYTES + 16];
    enum k3_dtype dtype;
    int n_dims;
    int64_t shape[4];
    uint64_t n_bytes;
    int shard;
    uint64_t offset;                /* within the shard's data section */
};

struct plan {
    struct entry *e;
    int64_t n, cap;
    int64_t n_params;
};

static int plan_push(struct plan *p, const struct entry *e)
{
    if (p->n == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 256;
        struct entry *n = realloc(p->e, (size_t)cap * sizeof *n);
        if (!n) return -1;
        p->e = n;
        p->cap = cap;
    }
    p->e[p->n++] = *e;
    return 0;
}

static int plan_add(const struct k3_tensor_spec *s, void *ctx)
{
    struct plan *p = ctx;
    struct entry e;
    memset(&e, 0, sizeof e);
    e.spec = *s;
    p->n_params += k3_tensor_spec_numel(s);
    if (s->is_linear && s->mxfp4) {
        e.part = 1;
        snprintf(e.name, sizeof e.name, "%s.weight_packed", s->name);
        e.dtype = K3_DTYPE_U8;
        e.n_dims = 2;
        e.shape[0] = s->shape[0];
        e.shape[1] = s->shape[1] / 2;
        e.n_bytes = (uint64_t)(e.shape[0] * e.shape[1]);
        if (plan_push(p, &e)) return -1;
        e.part = 2;
        snprintf(e.name, sizeof e.name, "%s.weight_scale", s->name);
        e.shape[1] = s->shape[1] / 32;
        e.n_bytes = (uint64_t)(e.shape[0] * e.shape[1]);
        return plan_push(p, &e);
    }
    snprintf(e.name, sizeof e.name, "%s%s", s->name, s->is_linear ? ".weight" : "");
    e.dtype = s->dtype;
    e.n_dims = s->n_dims;
    memcpy(e.shape, s->shape, sizeof e.shape);
    e.n_bytes = k3_tensor_spec_bytes(s);
    return plan_push(p, &e);
}

static void shard_name(char *buf, size_t n, int i, int n_shards)
{
    snprintf(buf, n, "model-%05d-of-%05d.safetensors", i + 1, n_shards);
}

/* ---- writing ---- */

static int write_all(FILE *f, const void *p, size_t n, const char *path, struct k3_err *err)
{
    if (n && fwrite(p, 1, n, f) != n)
        return k3_err_set(err, "%s: write failed (%s; disk full?)", path, strerror(errno));
    return 0;
}

static int store(float v, enum k3_dtype dt, uint8_t *dst)
{
    if (dt == K3_DTYPE_BF16) {
        uint16_t h = k3_f32_to_bf16(v);
        memcpy(dst, &h, 2);
        return 2;
    }
    memcpy(dst, &v, 4); /* F32: every non-bf16 tensor the layout has */
    return 4;
}

/* Writes one plain tensor, generated in row chunks. */
static int write_plain(FILE *f, const struct entry *e, const struct k3_model_config *cfg,
                       uint64_t seed, uint8_t *buf, size_t buf_bytes, const char *path,
                       struct k3_err *err)
{
    struct rng r;
    rng_init(&r, seed, e->name);
    struct init in = init_for(cfg, &e->spec);
    size_t es = k3_dtype_bytes(e->dtype);
    uint64_t numel = e->n_bytes / es, done = 0;
    while (done < numel) {
        uint64_t chunk = numel - done;
        if (chunk > buf_bytes / es) chunk = buf_bytes / es;
        for (uint64_t i = 0; i < chunk; i++)
            store(init_value(&r, &in, cfg, done + i), e->dtype, buf + i * es);
        if (write_all(f, buf, chunk * es, path, err)) return -1;
        done += chunk;
    }
    return 0;
}

/* Writes weight_packed and then weight_scale (adjacent entries) of one MXFP4 linear. */
static int write_mxfp4(FILE *f, const struct entry *packed_e, const struct k3_model_config *cfg,
                       uint64_t seed, const char *path, struct k3_err *err)
{
    const int64_t out = packed_e->spec.shape[0], in = packed_e->spec.shape[1];
    struct rng r;
    rng_init(&r, seed, packed_e->spec.name);
    struct init ini = init_for(cfg, &packed_e->spec);
    float *row = malloc((size_t)in * sizeof *row);
    uint8_t *packed = malloc((size_t)(out * in / 2));
    uint8_t *scale = malloc((size_t)(out * in / 32));
    int rc = -1;
    if (!row || !packed || !scale) {
        k3_err_set(err, "out of memory");
        goto out;
    }
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) row[i] = init_value(&r, &ini, cfg, (uint64_t)i);
        mxfp4_quantize_row(row, in, packed + o * (in / 2), scale + o * (in / 32));
    }
    if (write_all(f, packed, (size_t)(out * in / 2), path, err)) goto out;
    if (write_all(f, scale, (size_t)(out * in / 32), path, err)) goto out;
    rc = 0;
out:
    free(row);
    free(packed);
    free(scale);
    return rc;
}

static int write_shard(const struct plan *p, int64_t first, int64_t last, int si, int n_shards,
                       const struct k3_model_config *cfg, const struct k3_gen_opts *o,
                       uint64_t *file_bytes, struct k3_err *err)
{
    char name[64], *path = NULL;
    shard_name(name, sizeof name, si, n_shards);
    if (asprintf(&path, "%s/%s", o->out_dir, name) < 0) return k3_err_set(err, "out of memory");
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    for (int64_t i = first; i < last; i++) {
        const struct entry *e = &p->e[i];
        json_t *shape = json_array();
        for (int d = 0; d < e->n_dims; d++) json_array_append_new(shape, json_integer(e->shape[d]));
        json_object_set_new(h, e->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", k3_dtype_name(e->dtype),
                                      "shape", shape, "data_offsets", (json_int_t)e->offset,
                                      (json_int_t)(e->offset + e->n_bytes)));
    }
    char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    uint8_t *buf = malloc(1 << 22);
    FILE *f = fopen(path, "wb");
    int rc = -1;
    if (!text || !buf) {
        k3_err_set(err, "out of memory");
        goto out;
    }
    if (!f) {
        k3_err_set(err, "%s: cannot create (%s)", path, strerror(errno));
        goto out;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 22);
    size_t hlen = strlen(text), padded = (hlen + 7) / 8 * 8;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    if (write_all(f, len8, 8, path, err) || write_all(f, text, hlen, path, err) ||
        write_all(f, "        ", padded - hlen, path, err))
        goto out;
    *file_bytes += 8 + padded;
    for (int64_t i = first; i < last; i++) {
        const struct entry *e = &p->e[i];
        if (e->part == 2) continue; /* written with its weight_packed */
        if (e->part == 1) {
            if (write_mxfp4(f, e, cfg, o->seed, path, err)) goto out;
        } else if (write_plain(f, e, cfg, o->seed, buf, 1 << 22, path, err)) {
            goto out;
        }
        *file_bytes += e->n_bytes + (e->part == 1 ? p->e[i + 1].n_bytes : 0);
    }
    if (fclose(f)) {
        f = NULL;
        k3_err_set(err, "%s: write failed at close (%s)", path, strerror(errno));
        goto out;
    }
    f = NULL;
    rc = 0;
out:
    if (f) fclose(f);
    free(buf);
    free(text);
    free(path);
    return rc;
}

static int copy_file(const char *from, const char *to, struct k3_err *err)
{
    /* Regenerating in place (--model-config DIR/config.json --out DIR): nothing to copy,
     * and opening `to` for writing would truncate the source. */
    struct stat a, b;
    if (stat(from, &a) == 0 && stat(to, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return 0;
    FILE *in = fopen(from, "rb");
    if (!in) return k3_err_set(err, "%s: cannot open (%s)", from, strerror(errno));
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return k3_err_set(err, "%s: cannot create (%s)", to, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    int rc = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) rc = k3_err_set(err, "%s: write failed", to);
    if (ferror(in)) rc = k3_err_set(err, "%s: read error", from);
    fclose(in);
    if (fclose(out) && !rc) rc = k3_err_set(err, "%s: write failed", to);
    return rc;
}

static const char *tokenizer_files[2] = {"tiktoken.model", "tokenizer_config.json"};

/* Path of a tokenizer file in the first listed directory that has it (malloc'd). */
static char *tokenizer_find(const char *dirs, const char *file, struct k3_err *err)
{
    char *list = strdup(dirs), *save = NULL, *found = NULL;
    if (!list) {
        k3_err_set(err, "out of memory");
        return NULL;
    }
    for (char *d = strtok_r(list, ",", &save); d && !found; d = strtok_r(NULL, ",", &save)) {
        char *p = NULL;
        struct stat st;
        if (asprintf(&p, "%s/%s", d, file) < 0) break;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) found = p;
        else free(p);
    }
    free(list);
    if (!found)
        k3_err_set(err, "--tokenizer %s: no %s there (give the directory that holds "
                   "tiktoken.model and tokenizer_config.json, or DIR1,DIR2)", dirs, file);
    return found;
}

static int copy_tokenizer(const char *dirs, const char *out_dir, struct k3_err *err)
{
    for (int k = 0; k < 2; k++) {
        char *found = tokenizer_find(dirs, tokenizer_files[k], err), *to = NULL;
        if (!found) return -1;
        int rc = asprintf(&to, "%s/%s", out_dir, tokenizer_files[k]) < 0
                     ? k3_err_set(err, "out of memory")
                     : copy_file(found, to, err);
        free(found);
        free(to);
        if (rc) return -1;
    }
    return 0;
}

/* Shards of an earlier run into the same directory that this run does not
 * rewrite (another shard count) would otherwise stay behind, unused. Only
 * files named like our shards are removed. */
static void remove_stale_shards(const char *dir, int n_shards)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int i, n, len = 0;
        if (sscanf(e->d_name, "model-%5d-of-%5d.safetensors%n", &i, &n, &len) == 2 &&
            e->d_name[len] == 0 && n != n_shards) {
            char *p = NULL;
            if (asprintf(&p, "%s/%s", dir, e->d_name) >= 0) unlink(p);
            free(p);
        }
    }
    closedir(d);
}

static int make_dirs(const char *path, struct k3_err *err)
{
    char *p = strdup(path);
    if (!p) return k3_err_set(err, "out of memory");
    for (char *s = p + 1; ; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0777) && errno != EEXIST) {
                k3_err_set(err, "%s: cannot create directory (%s)", p, strerror(errno));
                free(p);
                return -1;
            }
            *s = c;
            if (!c) break;
        }
    }
    free(p);
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode))
        return k3_err_set(err, "%s: not a directory", path);
    return 0;
}

int k3_gen_weights_check(const struct k3_gen_opts *o, struct k3_err *err)
{
    struct k3_model_config cfg;
    if (k3_model_config_load(o->config_path, &cfg, err)) return -1;
    int lo = o->layer_lo, hi = o->layer_hi;
    if (!(lo < 0 && hi < 0) && (lo < 0 || hi < lo || hi >= cfg.n_layers))
        return k3_err_set(err, "layers %d-%d: outside 0-%d (num_hidden_layers of %s)", lo, hi,
                          cfg.n_layers - 1, o->config_path);
    for (int k = 0; o->tokenizer_dirs && k < 2; k++) {
        char *found = tokenizer_find(o->tokenizer_dirs, tokenizer_files[k], err);
        if (!found) return -1;
        free(found);
    }
    return 0;
}

int k3_gen_weights(const struct k3_gen_opts *o, struct k3_gen_stats *stats, struct k3_err *err)
{
    struct k3_model_config cfg;
    struct plan p = {0};
    json_t *index = NULL;
    char *path = NULL;
    int rc = -1;
    memset(stats, 0, sizeof *stats);
    if (k3_gen_weights_check(o, err)) return -1;
    if (k3_model_config_load(o->config_path, &cfg, err)) return -1;
    int lo = o->layer_lo, hi = o->layer_hi;
    if (lo < 0 && hi < 0) {
        lo = 0;
        hi = cfg.n_layers - 1;
    }
    uint64_t shard_bytes = o->shard_bytes ? o->shard_bytes : K3_GEN_DEFAULT_SHARD_BYTES;
    if (make_dirs(o->out_dir, err)) return -1;

    if (k3_model_tensors_foreach(&cfg, lo, hi, plan_add, &p)) {
        k3_err_set(err, "out of memory while listing tensors");
        goto out;
    }
    /* Shards: in order, an MXFP4 pair never split. */
    int shard = 0;
    uint64_t used = 0;
    for (int64_t i = 0; i < p.n; i++) {
        uint64_t unit = p.e[i].n_bytes + (p.e[i].part == 1 ? p.e[i + 1].n_bytes : 0);
        if (p.e[i].part != 2) {
            if (used && used + unit > shard_bytes) {
                shard++;
                used = 0;
            }
        }
        p.e[i].shard = shard;
        p.e[i].offset = used;
        used += p.e[i].n_bytes;
    }
    int n_shards = shard + 1;
    remove_stale_shards(o->out_dir, n_shards);

    /* config.json, byte for byte. */
    if (asprintf(&path, "%s/config.json", o->out_dir) < 0) {
        k3_err_set(err, "out of memory");
        goto out;
    }
    if (copy_file(o->config_path, path, err)) goto out;

    int64_t first = 0;
    for (int s = 0; s < n_shards; s++) {
        int64_t last = first;
        while (last < p.n && p.e[last].shard == s) last++;
        if (write_shard(&p, first, last, s, n_shards, &cfg, o, &stats->file_bytes, err)) goto out;
        first = last;
    }

    /* The index: metadata.total_size and weight_map, as Hugging Face writes them. */
    json_t *map = json_object();
    char name[64];
    for (int64_t i = 0; i < p.n; i++) {
        shard_name(name, sizeof name, p.e[i].shard, n_shards);
        json_object_set_new(map, p.e[i].name, json_string(name));
        stats->tensor_bytes += p.e[i].n_bytes;
    }
    char layers[32];
    snprintf(layers, sizeof layers, "%d-%d", lo, hi);
    index = json_pack("{s:{s:I,s:{s:I,s:s}},s:o}", "metadata", "total_size",
                      (json_int_t)stats->tensor_bytes, "k3_gen_weights", "seed",
                      (json_int_t)o->seed, "layers", layers, "weight_map", map);
    free(path);
    path = NULL;
    if (!index || asprintf(&path, "%s/model.safetensors.index.json", o->out_dir) < 0) {
        k3_err_set(err, "out of memory");
        goto out;
    }
    if (json_dump_file(index, path, JSON_INDENT(2) | JSON_SORT_KEYS)) {
        k3_err_set(err, "%s: cannot write (%s)", path, strerror(errno));
        goto out;
    }
    if (o->tokenizer_dirs && copy_tokenizer(o->tokenizer_dirs, o->out_dir, err)) goto out;
    stats->n_shards = n_shards;
    stats->n_tensors = p.n;
    stats->n_params = p.n_params;
    rc = 0;
out:
    json_decref(index);
    free(path);
    free(p.e);
    return rc;
}
