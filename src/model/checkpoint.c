/* checkpoint.c - safetensors checkpoints, memory-mapped (see checkpoint.h).
 *
 * safetensors file: u64 little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
 * then the data; offsets are relative to the end of the header.
 *
 * Open reads model.safetensors.index.json (weight_map: tensor -> shard file)
 * or, without an index, a lone model.safetensors; maps every shard read-only
 * with MADV_RANDOM (no readahead: a rank that reads 1/72 of the experts should
 * fault in 1/72 of the bytes); parses each header; and checks every extent:
 * inside the file (else the shard is truncated), sized numel * dtype bytes, and
 * not overlapping another tensor. Names go into an open-addressing hash table
 * (K3 has about half a million tensors).
 *
 * Rejected alternative: pread() into owned buffers. It copies every byte a rank
 * needs once more and makes "views into mapped shards" (STYLE.md) impossible. */
#include "model/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/tensors.h"

/* The safetensors reference implementation refuses headers above 100 MB. */
#define HEADER_MAX_BYTES (100ull << 20)

struct shard {
    char *path;
    int fd;
    uint8_t *map;
    uint64_t size;
    uint64_t data_start;            /* 8 + header length */
};

struct k3_checkpoint {
    char *dir;
    char *index_path;               /* NULL without an index */
    struct shard *shards;
    int n_shards;
    struct k3_tensor *tensors;
    int n_tensors, cap_tensors;
    int *table;                     /* hash slots: tensor index or -1 */
    uint64_t table_mask;
};

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

const struct k3_tensor *k3_checkpoint_find(const struct k3_checkpoint *ck, const char *name)
{
    if (!ck->table) return NULL;
    for (uint64_t i = name_hash(name) & ck->table_mask;; i = (i + 1) & ck->table_mask) {
        int t = ck->table[i];
        if (t < 0) return NULL;
        if (!strcmp(ck->tensors[t].name, name)) return &ck->tensors[t];
    }
}

static int table_build(struct k3_checkpoint *ck, struct k3_err *err)
{
    uint64_t n = 1024;
    while (n < (uint64_t)ck->n_tensors * 2) n *= 2;
    ck->table = malloc(n * sizeof *ck->table);
    if (!ck->table) return k3_err_set(err, "%s: out of memory for the tensor table", ck->dir);
    memset(ck->table, 0xff, n * sizeof *ck->table);
    ck->table_mask = n - 1;
    for (int t = 0; t < ck->n_tensors; t++) {
        const char *name = ck->tensors[t].name;
        uint64_t i = name_hash(name) & ck->table_mask;
        for (; ck->table[i] >= 0; i = (i + 1) & ck->table_mask) {
            const struct k3_tensor *o = &ck->tensors[ck->table[i]];
            if (!strcmp(o->name, name))
                return k3_err_set(err, "tensor %s is stored twice: in %s and in %s (a checkpoint "
                                  "holds each tensor once)", name, ck->shards[o->shard].path,
                                  ck->shards[ck->tensors[t].shard].path);
        }
        ck->table[i] = t;
    }
    return 0;
}

static char *path_join(const char *dir, const char *file)
{
    size_t n = strlen(dir);
    char *p = malloc(n + strlen(file) + 2);
    if (p) sprintf(p, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", file);
    return p;
}

static int shard_find_or_add(struct k3_checkpoint *ck, const char *file, struct k3_err *err)
{
    for (int i = 0; i < ck->n_shards; i++)
        if (!strcmp(strrchr(ck->shards[i].path, '/') + 1, file)) return i;
    if (strchr(file, '/') || !strcmp(file, "..") || !file[0])
        return k3_err_set(err, "%s: shard name '%s' is not a plain file name", ck->index_path, file);
    struct shard *s = realloc(ck->shards, (size_t)(ck->n_shards + 1) * sizeof *s);
    if (!s) return k3_err_set(err, "out of memory");
    ck->shards = s;
    memset(&s[ck->n_shards], 0, sizeof *s);
    s[ck->n_shards].fd = -1;
    s[ck->n_shards].path = path_join(ck->dir, file);
    if (!s[ck->n_shards].path) return k3_err_set(err, "out of memory");
    return ck->n_shards++;
}

static int add_tensor(struct k3_checkpoint *ck, struct k3_tensor *t, struct k3_err *err)
{
    if (ck->n_tensors == ck->cap_tensors) {
        int cap = ck->cap_tensors ? ck->cap_tensors * 2 : 1024;
        struct k3_tensor *n = realloc(ck->tensors, (size_t)cap * sizeof *n);
        if (!n) return k3_err_set(err, "out of memory");
        ck->tensors = n;
        ck->cap_tensors = cap;
    }
    ck->tensors[ck->n_tensors++] = *t;
    return 0;
}

struct extent {
    uint64_t begin, end;
    int tensor;
};

static int extent_cmp(const void *a, const void *b)
{
    const struct extent *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* Maps one shard and registers its tensors. */
static int shard_load(struct k3_checkpoint *ck, int si, struct k3_err *err)
{
    struct shard *s = &ck->shards[si];
    s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0)
        return k3_err_set(err, "%s: cannot open (%s)%s%s", s->path, strerror(errno),
                          ck->index_path ? "; it is named in " : "",
                          ck->index_path ? ck->index_path : "");
    struct stat st;
    if (fstat(s->fd, &st) || !S_ISREG(st.st_mode))
        return k3_err_set(err, "%s: not a regular file", s->path);
    s->size = (uint64_t)st.st_size;
    if (s->size < 8)
        return k3_err_set(err, "%s: %llu bytes is too short for a safetensors header (truncated "
                          "shard? re-download or regenerate it)", s->path,
                          (unsigned long long)s->size);
    s->map = mmap(NULL, s->size, PROT_READ, MAP_SHARED, s->fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        return k3_err_set(err, "%s: mmap failed (%s)", s->path, strerror(errno));
    }
    madvise(s->map, s->size, MADV_RANDOM);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | s->map[i];
    if (hlen > HEADER_MAX_BYTES || hlen > s->size - 8)
        return k3_err_set(err, "%s: bad safetensors header: it claims %llu bytes but the file has "
                          "%llu (truncated or not a safetensors file)", s->path,
                          (unsigned long long)hlen, (unsigned long long)s->size);
    s->data_start = 8 + hlen;
    uint64_t data_bytes = s->size - s->data_start;
    json_error_t jerr;
    json_t *h = json_loadb((const char *)s->map + 8, hlen, 0, &jerr);
    if (!h)
        return k3_err_set(err, "%s: bad safetensors header: not valid JSON at byte %d: %s",
                          s->path, jerr.position, jerr.text);
    int rc = -1;
    struct extent *ext = NULL;
    int n_ext = 0;
    if (!json_is_object(h)) {
        k3_err_set(err, "%s: bad safetensors header: not a JSON object", s->path);
        goto out;
    }
    ext = malloc((json_object_size(h) + 1) * sizeof *ext);
    if (!ext) {
        k3_err_set(err, "out of memory");
        goto out;
    }
    const char *name;
    json_t *v;
    json_object_foreach(h, name, v) {
        if (!strcmp(name, "__metadata__")) continue;
        struct k3_tensor t;
        memset(&t, 0, sizeof t);
        json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
        json_t *off = json_object_get(v, "data_offsets");
        if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) ||
            !json_is_array(off) || json_array_size(off) != 2) {
            k3_err_set(err, "%s: bad safetensors header: tensor %s needs dtype, shape and "
                       "data_offsets [begin, end]", s->path, name);
            goto out;
        }
        if (k3_dtype_parse(json_string_value(dt), &t.dtype)) {
            k3_err_set(err, "%s: tensor %s has dtype %s, which k3 does not read (BF16, F32, F16, "
                       "F8_E4M3, U8, I32, I64)", s->path, name, json_string_value(dt));
            goto out;
        }
        if (json_array_size(shape) > K3_TENSOR_MAX_DIMS) {
            k3_err_set(err, "%s: tensor %s has %zu dimensions (at most %d)", s->path, name,
                       json_array_size(shape), K3_TENSOR_MAX_DIMS);
            goto out;
        }
        t.n_dims = (int)json_array_size(shape);
        uint64_t numel = 1;
        for (int d = 0; d < t.n_dims; d++) {
            json_t *e = json_array_get(shape, (size_t)d);
            if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                json_integer_value(e) > (json_int_t)1 << 40) {
                k3_err_set(err, "%s: bad safetensors header: tensor %s has a bad shape", s->path,
                           name);
                goto out;
            }
            t.shape[d] = json_integer_value(e);
            numel *= (uint64_t)t.shape[d];
        }
        json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
        if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
            json_integer_value(e) < json_integer_value(b)) {
            k3_err_set(err, "%s: bad safetensors header: tensor %s has bad data_offsets", s->path,
                       name);
            goto out;
        }
        uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
        t.n_bytes = numel * k3_dtype_bytes(t.dtype);
        if (end - begin != t.n_bytes) {
            k3_err_set(err, "%s: bad safetensors header: tensor %s is %s with %llu elements "
                       "(%llu bytes) but data_offsets span %llu bytes", s->path, name,
                       k3_dtype_name(t.dtype), (unsigned long long)numel,
                       (unsigned long long)t.n_bytes, (unsigned long long)(end - begin));
            goto out;
        }
        if (end > data_bytes) {
            k3_err_set(err, "%s: truncated shard: tensor %s ends at byte %llu but the file has "
                       "only %llu (re-download or regenerate the shard)", s->path, name,
                       (unsigned long long)(s->data_start + end),
                       (unsigned long long)s->size);
            goto out;
        }
        t.name = strdup(name);
        if (!t.name) {
            k3_err_set(err, "out of memory");
            goto out;
        }
        t.shard = si;
        t.offset = s->data_start + begin;
        t.data = s->map + t.offset;
        ext[n_ext].begin = begin;
        ext[n_ext].end = end;
        ext[n_ext].tensor = ck->n_tensors;
        n_ext++;
        if (add_tensor(ck, &t, err)) {
            free((char *)t.name);
            goto out;
        }
    }
    qsort(ext, (size_t)n_ext, sizeof *ext, extent_cmp);
    for (int i = 1; i < n_ext; i++) {
        if (ext[i].begin < ext[i - 1].end && ext[i].end > ext[i].begin) {
            k3_err_set(err, "%s: bad safetensors header: tensors %s and %s overlap", s->path,
                       ck->tensors[ext[i - 1].tensor].name, ck->tensors[ext[i].tensor].name);
            goto out;
        }
    }
    rc = 0;
out:
    free(ext);
    json_decref(h);
    return rc;
}

static int read_index(struct k3_checkpoint *ck, json_t **weight_map, json_t **root,
                      struct k3_err *err)
{
    json_error_t jerr;
    *root = json_load_file(ck->index_path, 0, &jerr);
    if (!*root)
        return k3_err_set(err, "%s:%d: bad index (not valid JSON: %s)", ck->index_path, jerr.line,
                          jerr.text);
    *weight_map = json_object_get(*root, "weight_map");
    if (!json_is_object(*weight_map))
        return k3_err_set(err, "%s: bad index: no \"weight_map\" object", ck->index_path);
    const char *name;
    json_t *v;
    json_object_foreach(*weight_map, name, v) {
        if (!json_is_string(v))
            return k3_err_set(err, "%s: bad index: weight_map[%s] is not a file name",
                              ck->index_path, name);
        if (shard_find_or_add(ck, json_string_value(v), err) < 0) return -1;
    }
    if (!ck->n_shards) return k3_err_set(err, "%s: bad index: weight_map is empty", ck->index_path);
    return 0;
}

int k3_checkpoint_open(const char *dir, struct k3_checkpoint **out, struct k3_err *err)
{
    *out = NULL;
    struct k3_checkpoint *ck = calloc(1, sizeof *ck);
    json_t *index = NULL, *weight_map = NULL;
    if (!ck || !(ck->dir = strdup(dir))) {
        free(ck);
        return k3_err_set(err, "out of memory");
    }
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        k3_err_set(err, "%s: not a checkpoint directory", dir);
        goto fail;
    }
    ck->index_path = path_join(dir, "model.safetensors.index.json");
    if (!ck->index_path) {
        k3_err_set(err, "out of memory");
        goto fail;
    }
    if (access(ck->index_path, F_OK) == 0) {
        if (read_index(ck, &weight_map, &index, err)) goto fail;
    } else {
        free(ck->index_path);
        ck->index_path = NULL;
        char *single = path_join(dir, "model.safetensors");
        int found = single && access(single, F_OK) == 0;
        free(single);
        if (!found) {
            k3_err_set(err, "%s: no model.safetensors.index.json and no model.safetensors (is this "
                       "a checkpoint directory? `k3 gen-weights` writes one)", dir);
            goto fail;
        }
        if (shard_find_or_add(ck, "model.safetensors", err) < 0) goto fail;
    }
    for (int i = 0; i < ck->n_shards; i++)
        if (shard_load(ck, i, err)) goto fail;
    if (table_build(ck, err)) goto fail;
    if (weight_map) {
        /* The index and the shards must agree: every entry is in the shard it names. */
        const char *name;
        json_t *v;
        json_object_foreach(weight_map, name, v) {
            const struct k3_tensor *t = k3_checkpoint_find(ck, name);
            const char *file = json_string_value(v);
            if (!t) {
                k3_err_set(err, "%s: tensor %s is missing: the index names %s but that shard has "
                           "no such tensor", ck->index_path, name, file);
                goto fail;
            }
            if (strcmp(strrchr(ck->shards[t->shard].path, '/') + 1, file) != 0) {
                k3_err_set(err, "%s: tensor %s is in %s, not in %s as the index says",
                           ck->index_path, name, ck->shards[t->shard].path, file);
                goto fail;
            }
        }
        if (json_object_size(weight_map) != (size_t)ck->n_tensors) {
            for (int i = 0; i < ck->n_tensors; i++) {
                if (!json_object_get(weight_map, ck->tensors[i].name)) {
                    k3_err_set(err, "%s: tensor %s is stored in %s but not listed in the index",
                               ck->index_path, ck->tensors[i].name,
                               ck->shards[ck->tensors[i].shard].path);
                    goto fail;
                }
            }
        }
    }
    json_decref(index);
    *out = ck;
    return 0;
fail:
    json_decref(index);
    k3_checkpoint_free(ck);
    return -1;
}

void k3_checkpoint_free(struct k3_checkpoint *ck)
{
    if (!ck) return;
    for (int i = 0; i < ck->n_shards; i++) {
        struct shard *s = &ck->shards[i];
        if (s->map) munmap(s->map, s->size);
        if (s->fd >= 0) close(s->fd);
        free(s->path);
    }
    for (int i = 0; i < ck->n_tensors; i++) free((char *)ck->tensors[i].name);
    free(ck->shards);
    free(ck->tensors);
    free(ck->table);
    free(ck->index_path);
    free(ck->dir);
    free(ck);
}

int k3_checkpoint_n_tensors(const struct k3_checkpoint *ck) { return ck->n_tensors; }

const struct k3_tensor *k3_checkpoint_tensor(const struct k3_checkpoint *ck, int i)
{
    return i >= 0 && i < ck->n_tensors ? &ck->tensors[i] : NULL;
}

int k3_checkpoint_n_shards(const struct k3_checkpoint *ck) { return ck->n_shards; }

const char *k3_checkpoint_shard_path(const struct k3_checkpoint *ck, int shard)
{
    return shard >= 0 && shard < ck->n_shards ? ck->shards[shard].path : NULL;
}

uint64_t k3_checkpoint_shard_bytes(const struct k3_checkpoint *ck, int shard)
{
    return shard >= 0 && shard < ck->n_shards ? ck->shards[shard].size : 0;
}

/* The file that lists the tensors: the index, or the lone model.safetensors. */
static const char *where(const struct k3_checkpoint *ck)
{
    if (ck->index_path) return ck->index_path;
    return ck->n_shards == 1 ? ck->shards[0].path : ck->dir;
}

int k3_checkpoint_get(const struct k3_checkpoint *ck, const char *name,
                      const struct k3_tensor **out, struct k3_err *err)
{
    *out = k3_checkpoint_find(ck, name);
    if (!*out)
        return k3_err_set(err, "%s: tensor %s is missing (the model config implies it; is the "
                          "checkpoint for this config, and complete?)", where(ck), name);
    return 0;
}

static void shape_str(const int64_t *shape, int n, char *buf, size_t len)
{
    int k = snprintf(buf, len, "[");
    for (int i = 0; i < n && k > 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k > 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, "]");
}

/* dtype and shape of one stored tensor against what is expected. */
static int check_tensor(const struct k3_checkpoint *ck, const struct k3_tensor *t,
                        enum k3_dtype dtype, int n_dims, const int64_t *shape, struct k3_err *err)
{
    const char *file = ck->shards[t->shard].path;
    if (t->dtype != dtype)
        return k3_err_set(err, "%s: tensor %s has dtype %s, but the model config implies %s "
                          "(wrong checkpoint or config.json?)", file, t->name,
                          k3_dtype_name(t->dtype), k3_dtype_name(dtype));
    int same = t->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char got[96], want[96];
        shape_str(t->shape, t->n_dims, got, sizeof got);
        shape_str(shape, n_dims, want, sizeof want);
        return k3_err_set(err, "%s: tensor %s has shape %s, but the model config implies %s "
                          "(wrong checkpoint or config.json?)", file, t->name, got, want);
    }
    return 0;
}

int k3_checkpoint_linear(const struct k3_checkpoint *ck, const char *base, struct k3_linear *out,
                         struct k3_err *err)
{
    char name[K3_TENSOR_NAME_BYTES + 32];
    memset(out, 0, sizeof *out);
    snprintf(name, sizeof name, "%s.weight_packed", base);
    out->packed = k3_checkpoint_find(ck, name);
    snprintf(name, sizeof name, "%s.weight_scale", base);
    out->scale = k3_checkpoint_find(ck, name);
    if (out->packed || out->scale) {
        if (!out->packed || !out->scale) {
            snprintf(name, sizeof name, "%s.%s", base, out->packed ? "weight_scale" : "weight_packed");
            return k3_err_set(err, "%s: tensor %s is missing (an MXFP4 linear needs both "
                              "weight_packed and weight_scale)", where(ck), name);
        }
        const struct k3_tensor *p = out->packed, *s = out->scale;
        if (p->dtype != K3_DTYPE_U8 || s->dtype != K3_DTYPE_U8)
            return k3_err_set(err, "%s: tensor %s: MXFP4 weight_packed and weight_scale must be "
                              "U8, found %s and %s", ck->shards[p->shard].path, p->name,
                              k3_dtype_name(p->dtype), k3_dtype_name(s->dtype));
        if (p->n_dims != 2 || s->n_dims != 2 || p->shape[0] != s->shape[0] ||
            p->shape[1] * 2 != s->shape[1] * 32)
            return k3_err_set(err, "%s: tensor %s: MXFP4 shapes disagree (weight_packed [out, "
                              "in/2] and weight_scale [out, in/32] with in a multiple of 32)",
                              ck->shards[p->shard].path, p->name);
        out->mxfp4 = 1;
        out->out = p->shape[0];
        out->in = p->shape[1] * 2;
        return 0;
    }
    snprintf(name, sizeof name, "%s.weight", base);
    out->weight = k3_checkpoint_find(ck, name);
    if (!out->weight)
        return k3_err_set(err, "%s: tensor %s is missing (neither %s.weight nor the MXFP4 pair "
                          "%s.weight_packed + .weight_scale is stored)", where(ck), name, base,
                          base);
    const struct k3_tensor *w = out->weight;
    if (w->n_dims != 2)
        return k3_err_set(err, "%s: tensor %s has %d dimensions; a linear weight has 2",
                          ck->shards[w->shard].path, w->name, w->n_dims);
    if (w->dtype != K3_DTYPE_BF16 && w->dtype != K3_DTYPE_F32 && w->dtype != K3_DTYPE_F16 &&
        w->dtype != K3_DTYPE_F8_E4M3)
        return k3_err_set(err, "%s: tensor %s has dtype %s; a linear weight is BF16, F32, F16 "
                          "or F8_E4M3", ck->shards[w->shard].path, w->name, k3_dtype_name(w->dtype));
    out->out = w->shape[0];
    out->in = w->shape[1];
    return 0;
}

int k3_checkpoint_experts(const struct k3_checkpoint *ck, const char *fmt, const int *experts,
                          int n_experts, struct k3_linear *out, struct k3_err *err)
{
    char base[K3_TENSOR_NAME_BYTES];
    for (int i = 0; i < n_experts; i++) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(base, sizeof base, fmt, experts[i]);
#pragma GCC diagnostic pop
        if (k3_checkpoint_linear(ck, base, &out[i], err)) return -1;
    }
    return 0;
}

struct validate_ctx {
    const struct k3_checkpoint *ck;
    struct k3_err *err;
    uint8_t *seen;
};

static void mark(struct validate_ctx *v, const struct k3_tensor *t)
{
    if (t) v->seen[t - v->ck->tensors] = 1;
}

static int validate_one(const struct k3_tensor_spec *s, void *ctx)
{
    struct validate_ctx *v = ctx;
    const struct k3_checkpoint *ck = v->ck;
    if (!s->is_linear) {
        const struct k3_tensor *t;
        if (k3_checkpoint_get(ck, s->name, &t, v->err)) return -1;
        mark(v, t);
        return check_tensor(ck, t, s->dtype, s->n_dims, s->shape, v->err);
    }
    struct k3_linear lin;
    if (k3_checkpoint_linear(ck, s->name, &lin, v->err)) return -1;
    if (lin.mxfp4) {
        mark(v, lin.packed);
        mark(v, lin.scale);
        if (s->shape[1] % 32)
            return k3_err_set(v->err, "%s: tensor %s is MXFP4 but its input width %lld is not a "
                              "multiple of 32", ck->shards[lin.packed->shard].path, lin.packed->name,
                              (long long)s->shape[1]);
        int64_t ps[2] = {s->shape[0], s->shape[1] / 2}, ss[2] = {s->shape[0], s->shape[1] / 32};
        if (check_tensor(ck, lin.packed, K3_DTYPE_U8, 2, ps, v->err)) return -1;
        return check_tensor(ck, lin.scale, K3_DTYPE_U8, 2, ss, v->err);
    }
    mark(v, lin.weight);
    return check_tensor(ck, lin.weight, s->dtype, s->n_dims, s->shape, v->err);
}

int k3_checkpoint_validate(const struct k3_checkpoint *ck, const struct k3_model_config *cfg,
                           int layer_lo, int layer_hi, int *n_extra, struct k3_err *err)
{
    struct validate_ctx v = {ck, err, calloc((size_t)ck->n_tensors + 1, 1)};
    if (!v.seen) return k3_err_set(err, "out of memory");
    int rc = k3_model_tensors_foreach(cfg, layer_lo, layer_hi, validate_one, &v);
    if (!rc && n_extra) {
        *n_extra = 0;
        for (int i = 0; i < ck->n_tensors; i++) *n_extra += !v.seen[i];
    }
    free(v.seen);
    return rc ? -1 : 0;
}
