/* deploy.c - the deployment schema table and everything that walks it.
 * See deploy.h for the approach. To add a key: add a field to struct
 * k3_deploy, a row below, and regenerate configs/deploy/README.md with
 * `k3 config --schema` (a test fails until the document matches). */
#include "core/deploy.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OFF(f) offsetof(struct k3_deploy, f), sizeof(((struct k3_deploy *)0)->f)
#define BIG 9.0e15

const struct k3_cfg_key k3_deploy_schema[] = {
    {"parallel.tp", K3_CFG_INT, OFF(parallel.tp), "1", 1, 1024, NULL, "--tp",
     "ranks per attention group (tensor parallel); heads are split across them", 0},
    {"parallel.adp", K3_CFG_INT, OFF(parallel.adp), "1", 1, 1024, NULL, "--adp",
     "attention-data-parallel groups; the job has tp * adp ranks, experts spread over all", 0},
    {"parallel.comm", K3_CFG_ENUM, OFF(parallel.comm), "auto", 0, 0, "auto|mpi|nccl", "--comm",
     "communicator for activations: nccl (one rank per GPU), mpi (CPU ranks, or GPU ranks "
     "sharing a GPU, host-staged); auto = nccl with backend cuda, else mpi", 0},
    {"backend.kind", K3_CFG_ENUM, OFF(backend.kind), "cpu", 0, 0, "cpu|cuda", "--backend",
     "where the forward pass runs", 0},
    {"backend.threads", K3_CFG_INT, OFF(backend.threads), "0", 0, 4096, NULL, "--threads",
     "CPU worker threads per rank; 0 = the cores available to the rank", 0},
    {"backend.memory_fraction", K3_CFG_FLOAT, OFF(backend.memory_fraction), "0.9", 0.05, 1.0,
     NULL, NULL, "share of each GPU's memory k3 may take for weights, activations and caches", 0},
    {"model.path", K3_CFG_STRING, OFF(model.path), "", 0, 0, NULL, "--model",
     "checkpoint directory (config.json, model.safetensors.index.json, shards)", 0},
    {"cache.block_tokens", K3_CFG_INT, OFF(cache.block_tokens), "64", 1, 4096, NULL, NULL,
     "tokens per paged MLA latent-KV block (also the prefix-cache granule)", 0},
    {"cache.kv_bytes", K3_CFG_BYTES, OFF(cache.kv_bytes), "0", 0, BIG, NULL, NULL,
     "bytes of MLA latent-KV blocks per rank; 0 = what is left after weights and activations", 0},
    {"cache.kda_slots", K3_CFG_INT, OFF(cache.kda_slots), "0", 0, 1 << 20, NULL, NULL,
     "KDA recurrent-state slots per attention group (one per running sequence); 0 = max_seqs", 0},
    {"cache.kda_snapshot_interval", K3_CFG_INT, OFF(cache.kda_snapshot_interval), "16", 1,
     1 << 20, NULL, NULL,
     "prefix cache: snapshot KDA states every N blocks so a shared prefix can resume there", 0},
    {"cache.prefix_cache", K3_CFG_BOOL, OFF(cache.prefix_cache), "true", 0, 0, NULL, NULL,
     "reuse cached prefixes across requests", 0},
    {"scheduler.max_batch_tokens", K3_CFG_INT, OFF(scheduler.max_batch_tokens), "8192", 1,
     1 << 24, NULL, NULL, "new tokens per step per attention group (prefill chunks + decodes)", 0},
    {"scheduler.max_seqs", K3_CFG_INT, OFF(scheduler.max_seqs), "256", 1, 1 << 20, NULL, NULL,
     "running sequences per attention group", 0},
    {"scheduler.prefill_chunk_tokens", K3_CFG_INT, OFF(scheduler.prefill_chunk_tokens), "2048",
     1, 1 << 24, NULL, NULL, "largest prefill chunk of one sequence in one step", 0},
    {"scheduler.max_queue", K3_CFG_INT, OFF(scheduler.max_queue), "1024", 0, 1 << 24, NULL, NULL,
     "requests waiting for admission before new ones are refused (HTTP 429)", 0},
    {"scheduler.context_tokens", K3_CFG_INT, OFF(scheduler.context_tokens), "0", 0, 1 << 30,
     NULL, NULL, "prompt + completion limit per request; 0 = the model's context window", 0},
    {"server.host", K3_CFG_STRING, OFF(server.host), "127.0.0.1", 0, 0, NULL, "--host",
     "address the HTTP server binds; only loopback unless set otherwise", 0},
    {"server.port", K3_CFG_INT, OFF(server.port), "8000", 0, 65535, NULL, "--port",
     "TCP port of the HTTP server (0 = any free port, logged at start)", 0},
    {"server.api_key", K3_CFG_STRING, OFF(server.api_key), "", 0, 0, NULL, "--api-key",
     "if set, requests must send `Authorization: Bearer <key>` (or `x-api-key`); never logged",
     1},
    {"server.api_key_env", K3_CFG_STRING, OFF(server.api_key_env), "", 0, 0, NULL, NULL,
     "read the API key from this environment variable instead of the file", 0},
    {"server.served_model_name", K3_CFG_STRING, OFF(server.served_model_name), "", 0, 0, NULL,
     NULL, "model id in the API; empty = the checkpoint directory's name", 0},
    {"server.max_body_bytes", K3_CFG_BYTES, OFF(server.max_body_bytes), "32MiB", 1024, BIG, NULL,
     NULL, "largest request body; larger ones get HTTP 413", 0},
    {"server.tokenizer_cache_bytes", K3_CFG_BYTES, OFF(server.tokenizer_cache_bytes), "256MiB", 0,
     BIG, NULL, NULL,
     "stretches of prompt text that come again (a conversation re-sent with its history) kept "
     "with their token ids, so they are not encoded again; 0 keeps none", 0},
    {"server.max_connections", K3_CFG_INT, OFF(server.max_connections), "1024", 1, 1 << 20, NULL,
     NULL, "concurrent HTTP connections", 0},
    {"server.request_timeout_s", K3_CFG_INT, OFF(server.request_timeout_s), "600", 1, 1 << 24,
     NULL, NULL, "idle time after which a client connection is dropped", 0},
    {"server.sampling_policy", K3_CFG_ENUM, OFF(server.sampling_policy), "auto", 0, 0,
     "auto|kimi|open", NULL,
     "sampling parameters clients may set: kimi = Kimi's published limits (temperature 0-1, "
     "top_p 0.95, penalties 0, n 1; others get HTTP 400), open = OpenAI's ranges; auto = kimi "
     "for K3 checkpoints, open otherwise", 0},
    {"server.shutdown_grace_s", K3_CFG_INT, OFF(server.shutdown_grace_s), "10", 0, 1 << 20, NULL,
     NULL, "on SIGTERM, in-flight requests get this long to finish before they are cancelled", 0},
    {"dump.layers", K3_CFG_INT_LIST, OFF(dump.layers), "", 0, 4095, NULL, "--layers",
     "0-based decoder layers whose output hidden states `k3 dump` writes", 0},
    {"dump.final_state", K3_CFG_BOOL, OFF(dump.final_state), "false", 0, 0, NULL, NULL,
     "also write the final hidden state (after the final norm, what lm_head sees)", 0},
    {"dump.chunk_tokens", K3_CFG_INT, OFF(dump.chunk_tokens), "4096", 1, 1 << 24, NULL, NULL,
     "HDF5 chunk length along the token axis", 0},
    {"dump.compression", K3_CFG_INT, OFF(dump.compression), "0", 0, 9, NULL, NULL,
     "gzip level of the dump datasets (0 = none; collective parallel writes want 0)", 0},
    {"log.level", K3_CFG_ENUM, OFF(log.level), "info", 0, 0, "error|warn|info|debug",
     "--log-level", "least severe message printed", 0},
    {"log.all_ranks", K3_CFG_BOOL, OFF(log.all_ranks), "false", 0, 0, NULL, NULL,
     "print info/debug from every rank, not only rank 0 (warnings and errors always)", 0},
    {"watchdog.timeout_s", K3_CFG_INT, OFF(watchdog.timeout_s), "300", 1, 1 << 24, NULL, NULL,
     "a collective or device wait longer than this aborts the job, naming the stuck rank", 0},
};

const int k3_deploy_n_keys = (int)(sizeof k3_deploy_schema / sizeof k3_deploy_schema[0]);

const struct k3_cfg_key *k3_deploy_key_find(const char *key)
{
    for (int i = 0; i < k3_deploy_n_keys; i++)
        if (strcmp(k3_deploy_schema[i].key, key) == 0) return &k3_deploy_schema[i];
    return NULL;
}

const char *k3_cfg_type_name(enum k3_cfg_type t)
{
    switch (t) {
    case K3_CFG_INT: return "int";
    case K3_CFG_BYTES: return "bytes";
    case K3_CFG_FLOAT: return "float";
    case K3_CFG_BOOL: return "bool";
    case K3_CFG_STRING: return "string";
    case K3_CFG_ENUM: return "enum";
    case K3_CFG_INT_LIST: return "int list";
    }
    return "?";
}

static void *field(struct k3_deploy *d, const struct k3_cfg_key *k)
{
    return (char *)d + k->offset;
}

static const void *cfield(const struct k3_deploy *d, const struct k3_cfg_key *k)
{
    return (const char *)d + k->offset;
}

static int out_of_range(const struct k3_cfg_key *k, double v, struct k3_err *err)
{
    if (v >= k->min && v <= k->max) return 0;
    if (k->type == K3_CFG_FLOAT)
        return k3_err_set(err, "%s = %g is out of range [%g, %g]", k->key, v, k->min, k->max);
    return k3_err_set(err, "%s = %.0f is out of range [%.0f, %.0f]", k->key, v, k->min, k->max);
}

int k3_deploy_set_int(struct k3_deploy *d, const struct k3_cfg_key *k, long long v,
                      struct k3_err *err)
{
    switch (k->type) {
    case K3_CFG_INT:
        if (out_of_range(k, (double)v, err)) return -1;
        *(int *)field(d, k) = (int)v;
        return 0;
    case K3_CFG_BYTES:
        if (out_of_range(k, (double)v, err)) return -1;
        *(int64_t *)field(d, k) = (int64_t)v;
        return 0;
    case K3_CFG_FLOAT:
        return k3_deploy_set_float(d, k, (double)v, err);
    default:
        return k3_err_set(err, "%s must be a %s, not an integer", k->key,
                          k3_cfg_type_name(k->type));
    }
}

int k3_deploy_set_float(struct k3_deploy *d, const struct k3_cfg_key *k, double v,
                        struct k3_err *err)
{
    if (k->type != K3_CFG_FLOAT)
        return k3_err_set(err, "%s must be a%s %s, not a float", k->key,
                          k->type == K3_CFG_INT || k->type == K3_CFG_INT_LIST ? "n" : "",
                          k3_cfg_type_name(k->type));
    if (!isfinite(v)) return k3_err_set(err, "%s must be finite", k->key);
    if (out_of_range(k, v, err)) return -1;
    *(double *)field(d, k) = v;
    return 0;
}

static int parse_ll(const char *s, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

/* "123", "64KiB", "16G", "1.5GiB": K, M, G, T are powers of 1024 with or
 * without "iB"; "KB", "MB", ... are powers of 1000. */
static int parse_bytes(const char *s, long long *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    static const char units[] = "KMGT";
    double scale = 1;
    if (*end) {
        const char *u = strchr(units, toupper((unsigned char)*end));
        if (!u) return -1;
        int power = (int)(u - units) + 1;
        const char *rest = end + 1;
        double base = 1024;
        if (strcmp(rest, "") == 0 || strcasecmp(rest, "iB") == 0) base = 1024;
        else if (strcasecmp(rest, "B") == 0) base = 1000;
        else return -1;
        scale = pow(base, power);
    }
    double b = v * scale;
    if (b > 9.0e18 || b != floor(b)) return -1;
    *out = (long long)b;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    if (!strcasecmp(s, "true") || !strcmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
        *out = 1;
    else if (!strcasecmp(s, "false") || !strcmp(s, "0") || !strcasecmp(s, "no") ||
             !strcasecmp(s, "off"))
        *out = 0;
    else
        return -1;
    return 0;
}

static int choice_ok(const char *choices, const char *s)
{
    size_t n = strlen(s);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static int set_int_list(struct k3_deploy *d, const struct k3_cfg_key *k, const char *text,
                        struct k3_err *err)
{
    /* The only list is dump.layers; its count lives just before the array. */
    int *vals = (int *)field(d, k);
    int *count = &d->dump.n_layers;
    int n = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || (*end && *end != ',' && *end != ' '))
            return k3_err_set(err, "%s: '%s' is not a comma-separated list of integers",
                              k->key, text);
        if (v < k->min || v > k->max)
            return k3_err_set(err, "%s: %ld is out of range [%.0f, %.0f]", k->key, v, k->min,
                              k->max);
        if (n == K3_DEPLOY_MAX_LAYERS)
            return k3_err_set(err, "%s: more than %d entries", k->key, K3_DEPLOY_MAX_LAYERS);
        for (int i = 0; i < n; i++)
            if (vals[i] == (int)v)
                return k3_err_set(err, "%s: %ld is listed twice", k->key, v);
        vals[n++] = (int)v;
        p = end;
    }
    *count = n;
    return 0;
}

int k3_deploy_set(struct k3_deploy *d, const struct k3_cfg_key *k, const char *text,
                  struct k3_err *err)
{
    long long ll;
    switch (k->type) {
    case K3_CFG_INT:
        if (parse_ll(text, &ll))
            return k3_err_set(err, "%s must be an integer, not '%s'", k->key, text);
        return k3_deploy_set_int(d, k, ll, err);
    case K3_CFG_BYTES:
        if (parse_bytes(text, &ll))
            return k3_err_set(err, "%s must be a byte count such as 1073741824 or \"16GiB\", "
                              "not '%s'", k->key, text);
        return k3_deploy_set_int(d, k, ll, err);
    case K3_CFG_FLOAT: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end)
            return k3_err_set(err, "%s must be a number, not '%s'", k->key, text);
        return k3_deploy_set_float(d, k, v, err);
    }
    case K3_CFG_BOOL: {
        int b;
        if (parse_bool(text, &b))
            return k3_err_set(err, "%s must be true or false, not '%s'", k->key, text);
        *(int *)field(d, k) = b;
        return 0;
    }
    case K3_CFG_ENUM:
        if (!choice_ok(k->choices, text))
            return k3_err_set(err, "%s must be one of %s, not '%s'", k->key, k->choices, text);
        /* fallthrough */
    case K3_CFG_STRING:
        if (strlen(text) >= k->size)
            return k3_err_set(err, "%s is too long (%zu bytes, at most %zu)", k->key,
                              strlen(text), k->size - 1);
        strcpy((char *)field(d, k), text);
        return 0;
    case K3_CFG_INT_LIST:
        return set_int_list(d, k, text, err);
    }
    return k3_err_set(err, "%s: unknown type", k->key);
}

void k3_deploy_defaults(struct k3_deploy *d)
{
    memset(d, 0, sizeof *d);
    for (int i = 0; i < k3_deploy_n_keys; i++) {
        struct k3_err err;
        /* Defaults are part of the program; a bad one is a bug caught by the tests. */
        if (k3_deploy_set(d, &k3_deploy_schema[i], k3_deploy_schema[i].def, &err)) abort();
    }
}

int k3_deploy_validate(const struct k3_deploy *d, struct k3_err *err)
{
    if (d->scheduler.prefill_chunk_tokens > d->scheduler.max_batch_tokens)
        return k3_err_set(err, "scheduler.prefill_chunk_tokens (%d) must not exceed "
                          "scheduler.max_batch_tokens (%d)", d->scheduler.prefill_chunk_tokens,
                          d->scheduler.max_batch_tokens);
    if (!strcmp(d->backend.kind, "cpu") && !strcmp(d->parallel.comm, "nccl"))
        return k3_err_set(err, "parallel.comm = \"nccl\" needs backend.kind = \"cuda\"");
    if (d->cache.kda_slots && d->cache.kda_slots < d->scheduler.max_seqs)
        return k3_err_set(err, "cache.kda_slots (%d) must be 0 or at least scheduler.max_seqs "
                          "(%d): every running sequence holds one", d->cache.kda_slots,
                          d->scheduler.max_seqs);
    if (d->server.api_key[0] && d->server.api_key_env[0])
        return k3_err_set(err, "set server.api_key or server.api_key_env, not both");
    if ((long long)d->parallel.tp * d->parallel.adp > 1 << 20)
        return k3_err_set(err, "parallel.tp * parallel.adp is too large");
    return 0;
}

int k3_deploy_check_world(const struct k3_deploy *d, int world, struct k3_err *err)
{
    if (d->parallel.tp * d->parallel.adp != world)
        return k3_err_set(err, "parallel.tp (%d) * parallel.adp (%d) = %d ranks, but the job "
                          "has %d; start it with mpirun -np %d or change --tp/--adp",
                          d->parallel.tp, d->parallel.adp, d->parallel.tp * d->parallel.adp,
                          world, d->parallel.tp * d->parallel.adp);
    return 0;
}

static void print_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void print_value(const struct k3_deploy *d, const struct k3_cfg_key *k, FILE *f)
{
    const void *p = cfield(d, k);
    switch (k->type) {
    case K3_CFG_INT: fprintf(f, "%d", *(const int *)p); break;
    case K3_CFG_BYTES: fprintf(f, "%lldL", (long long)*(const int64_t *)p); break;
    case K3_CFG_FLOAT: {
        char buf[64];
        double v = *(const double *)p;
        snprintf(buf, sizeof buf, "%.15g", v); /* shortest form that reads back exactly */
        if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
        if (!strpbrk(buf, ".en")) strcat(buf, ".0"); /* keep it a libconfig float */
        fputs(buf, f);
        break;
    }
    case K3_CFG_BOOL: fputs(*(const int *)p ? "true" : "false", f); break;
    case K3_CFG_STRING:
    case K3_CFG_ENUM: print_string(f, (const char *)p); break;
    case K3_CFG_INT_LIST:
        fputc('[', f);
        for (int i = 0; i < d->dump.n_layers; i++)
            fprintf(f, "%s%d", i ? ", " : "", ((const int *)p)[i]);
        fputc(']', f);
        break;
    }
}

void k3_deploy_print(const struct k3_deploy *d, FILE *f)
{
    char section[64] = "";
    for (int i = 0; i < k3_deploy_n_keys; i++) {
        const struct k3_cfg_key *k = &k3_deploy_schema[i];
        const char *dot = strchr(k->key, '.');
        size_t sl = (size_t)(dot - k->key);
        if (strlen(section) != sl || strncmp(section, k->key, sl) != 0) {
            if (section[0]) fputs("};\n", f);
            snprintf(section, sizeof section, "%.*s", (int)sl, k->key);
            fprintf(f, "%s = {\n", section);
        }
        if (k->secret) {
            const char *v = (const char *)cfield(d, k);
            fprintf(f, "  # %s is %s\n", dot + 1, v[0] ? "set (not shown)" : "not set");
            continue;
        }
        fprintf(f, "  %s = ", dot + 1);
        print_value(d, k, f);
        fputs(";\n", f);
    }
    if (section[0]) fputs("};\n", f);
}

void k3_deploy_schema_markdown(FILE *f)
{
    fputs("| key | type | default | flag | meaning |\n|---|---|---|---|---|\n", f);
    for (int i = 0; i < k3_deploy_n_keys; i++) {
        const struct k3_cfg_key *k = &k3_deploy_schema[i];
        char type[96];
        if (k->type == K3_CFG_ENUM) snprintf(type, sizeof type, "`%s`", k->choices);
        else snprintf(type, sizeof type, "%s", k3_cfg_type_name(k->type));
        for (char *c = type; *c; c++)
            if (*c == '|') *c = '/'; /* a pipe would split the Markdown cell */
        fprintf(f, "| `%s` | %s | `%s` | %s%s%s | %s |\n", k->key, type,
                !k->def[0] ? (k->type == K3_CFG_INT_LIST ? "[]" : "\"\"") : k->def,
                k->flag ? "`" : "", k->flag ? k->flag : "", k->flag ? "`" : "", k->meaning);
    }
}
