/* cmd_dump.c - `k3 dump`: hidden states of chosen layers for drafter training.
 *
 *   mpirun -np W k3 dump --model DIR --input data.jsonl --out states.h5 \
 *       --layers 7,23,51,67,83 [--final] [--dtype bfloat16|float32]
 *
 * Input lines (io/dump_input.h): {"id", "prompt_ids"[, "loss_mask"]} or
 * {"id", "messages"[, "tools"]}, the latter rendered with the K3 chat format
 * (frontend/chat_render.h); the loss mask marks what the assistant turns add.
 * Output layout and resume: io/h5_dump.h.
 *
 * Which intermediate is "layer L" (as in SpecForge and SGLang: the output of
 * decoder layer L, 0-based, i.e. what enters layer L+1), by the names of the
 * forward pass (model/k3.c, model/kimi_linear.c, validation/reference/k3ref.py):
 *   Kimi Linear:  "L<L>.out"          the residual stream after layer L
 *   Kimi K3:      "L<L+1>.attn_in"    the AttnRes mix feeding layer L+1's attention
 *                 "final_in"          for the last layer: the output mix
 *   final state:  "final_norm"        after the final norm, what lm_head sees
 *
 * Parallel layout: tp × adp = W ranks running the sharded forward pass
 * (model/parallel.h). Sample s goes to attention group s mod adp; the ranks of
 * a group all see the full-width residual stream, and the group's leader
 * (tp_rank 0) hands its samples' rows to the writer, which moves them to the
 * chunk owners (io/h5_dump.c). Samples are processed in rounds of at
 * least scheduler.max_batch_tokens × adp tokens (the same cut on every rank),
 * and every round ends with a collective flush, which is also the resume
 * granularity (the journal advances once per round).
 *
 * Environment, for tests and diagnosis: K3_DUMP_PER_RANK_FILES=1 writes
 * per-rank files joined by virtual datasets even with parallel HDF5 (the
 * serial-HDF5 layout); K3_DUMP_HDF5_IO=1 sends the rows through H5Dwrite (the
 * writer's reference path); K3_DUMP_NO_FSYNC=1 skips fsync (tmpfs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "cli/cli.h"
#include "core/log.h"
#include "frontend/request.h"
#include "io/dump_input.h"
#include "io/dump_journal.h"
#include "io/h5_dump.h"
#include "kernels/cpu/cpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/shard.h"
#include "model/weights.h"
#include "mpi/bootstrap.h"
#include "mpi/groups.h"
#include "mpi/mpi_check.h"

#ifndef K3_VERSION_STRING
#define K3_VERSION_STRING "unknown"
#endif

#define CMD "k3 dump"
#define ID_BYTES 128   /* = sizeof k3_dump_sample.id */

/* ------------------------------------------------------------ the samples */

struct samples {
    int64_t n, n_tok;
    int64_t *len;           /* [n] */
    int64_t *off;           /* [n+1] */
    int32_t *tokens;        /* [n_tok] */
    uint8_t *mask;          /* [n_tok] */
    char *ids;              /* [n][ID_BYTES] */
    uint64_t input_hash, tokenizer_hash;
    int n_messages;
};

static void samples_free(struct samples *s)
{
    free(s->len);
    free(s->off);
    free(s->tokens);
    free(s->mask);
    free(s->ids);
    memset(s, 0, sizeof *s);
}

static uint64_t file_hash(const char *path, int *found)
{
    FILE *f = fopen(path, "rb");
    *found = f != NULL;
    if (!f) return 0;
    uint64_t h = K3_FNV1A64_INIT;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = k3_fnv1a64(buf, n, h);
    fclose(f);
    return h;
}

static int64_t lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return (int64_t)i;
}

/* Renders messages[0..n_msgs) and tokenizes. */
static int render_ids(const struct k3_tok *tok, const struct k3_chat_req *req, size_t n_msgs, int gen,
                      struct k3_tok_ids *ids, struct k3_err *err)
{
    json_t *msgs = json_array();
    for (size_t i = 0; i < n_msgs; i++) json_array_append(msgs, json_array_get(req->messages, i));
    struct k3_chat_opts o = k3_chat_req_opts(req);
    o.add_generation_prompt = gen;
    struct k3_chat_prompt p = {0};
    int rc = k3_chat_render(msgs, req->tools, &o, &p, err);
    json_decref(msgs);
    if (rc) return -1;
    ids->n = 0;
    k3_chat_prompt_encode(tok, &p, ids);
    k3_chat_prompt_free(&p);
    return 0;
}

/* A messages line -> ids and the loss mask. The mask of assistant turn i is
 * what the full conversation has beyond the prompt that asks for that turn
 * (messages[0..i) plus the generation stub) up to the end of the turn,
 * measured as common prefixes so a renderer that rewrites history (e.g.
 * drops earlier thinking) still gives a sensible mask. */
static int render_sample(const struct k3_tok *tok, struct k3_dump_sample *s, struct k3_err *err)
{
    struct k3_chat_req req;
    struct k3_api_err e;
    if (k3_chat_req_from_json(s->request, &req, &e))
        return k3_err_set(err, "%s%s%s", e.param[0] ? e.param : "", e.param[0] ? ": " : "", e.message);
    struct k3_tok_ids full = {0}, part = {0};
    size_t n_msgs = json_array_size(req.messages);
    int rc = render_ids(tok, &req, n_msgs, 0, &full, err);
    if (!rc && full.n == 0) rc = k3_err_set(err, "the conversation renders to no tokens");
    if (!rc) {
        s->n = (int64_t)full.n;
        s->ids = malloc(sizeof(int32_t) * full.n);
        s->mask = calloc(full.n, 1);
        if (!s->ids || !s->mask) rc = k3_err_set(err, "out of memory");
        else memcpy(s->ids, full.ids, sizeof(int32_t) * full.n);
    }
    for (size_t i = 0; !rc && i < n_msgs; i++) {
        const char *role = json_string_value(json_object_get(json_array_get(req.messages, i), "role"));
        if (!role || strcmp(role, "assistant") != 0) continue;
        rc = render_ids(tok, &req, i, 1, &part, err);
        int64_t a = rc ? 0 : lcp(part.ids, part.n, full.ids, full.n);
        if (!rc) rc = render_ids(tok, &req, i + 1, 0, &part, err);
        int64_t b = rc ? 0 : lcp(part.ids, part.n, full.ids, full.n);
        for (int64_t t = a; t < b; t++) s->mask[t] = 1;
    }
    k3_tok_ids_free(&full);
    k3_tok_ids_free(&part);
    k3_chat_req_free(&req);
    return rc;
}

/* Rank 0: read, check and render the input into flat arrays. */
static int samples_load(const char *input, const char *model_dir, int64_t vocab, struct samples *out,
                        struct k3_err *err)
{
    struct k3_dump_input in;
    if (k3_dump_input_read(input, vocab, &in, err)) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/tiktoken.model", model_dir);
    int have_tok;
    out->tokenizer_hash = file_hash(path, &have_tok);
    out->input_hash = in.hash;
    out->n_messages = in.n_messages;
    int rc = 0;
    if (in.n_messages) {
        struct k3_tok *tok = NULL;
        if (k3_tok_load(&tok, model_dir, err)) {
            rc = k3_err_prefix(err, "the input has %d messages lines, which need the tokenizer "
                               "(tiktoken.model, tokenizer_config.json) in --model", in.n_messages);
        }
        for (int64_t i = 0; !rc && i < in.n; i++) {
            if (!in.s[i].request) continue;
            if (render_sample(tok, &in.s[i], err)) rc = k3_err_prefix(err, "%s:%lld", input, (long long)in.s[i].line);
            for (int64_t t = 0; !rc && t < in.s[i].n; t++)
                if (in.s[i].ids[t] >= vocab)
                    rc = k3_err_set(err, "%s:%lld: the rendered conversation has token %d, outside this model's "
                                    "vocabulary (%lld): is the tokenizer the model's?", input,
                                    (long long)in.s[i].line, in.s[i].ids[t], (long long)vocab);
        }
        if (tok) k3_tok_free(tok);
    }
    if (!rc) {
        out->n = in.n;
        out->len = malloc(sizeof(int64_t) * (size_t)in.n);
        out->off = malloc(sizeof(int64_t) * (size_t)(in.n + 1));
        out->ids = calloc((size_t)in.n, ID_BYTES);
        out->off[0] = 0;
        for (int64_t i = 0; i < in.n; i++) {
            out->len[i] = in.s[i].n;
            out->off[i + 1] = out->off[i] + in.s[i].n;
            snprintf(out->ids + i * ID_BYTES, ID_BYTES, "%s", in.s[i].id);
        }
        out->n_tok = out->off[in.n];
        out->tokens = malloc(sizeof(int32_t) * (size_t)out->n_tok);
        out->mask = malloc((size_t)out->n_tok);
        for (int64_t i = 0; i < in.n; i++) {
            memcpy(out->tokens + out->off[i], in.s[i].ids, sizeof(int32_t) * (size_t)in.s[i].n);
            memcpy(out->mask + out->off[i], in.s[i].mask, (size_t)in.s[i].n);
        }
    }
    k3_dump_input_free(&in);
    return rc;
}

/* Every rank gets the samples (tokens are 4 bytes each: small next to the dump). */
static void samples_bcast(struct samples *s, MPI_Comm comm, int rank)
{
    int64_t hdr[5] = {s->n, s->n_tok, (int64_t)s->input_hash, (int64_t)s->tokenizer_hash, s->n_messages};
    K3_CHECK_MPI(MPI_Bcast(hdr, 5, MPI_INT64_T, 0, comm));
    if (rank != 0) {
        s->n = hdr[0];
        s->n_tok = hdr[1];
        s->input_hash = (uint64_t)hdr[2];
        s->tokenizer_hash = (uint64_t)hdr[3];
        s->n_messages = (int)hdr[4];
        s->len = malloc(sizeof(int64_t) * (size_t)s->n);
        s->off = malloc(sizeof(int64_t) * (size_t)(s->n + 1));
        s->tokens = malloc(sizeof(int32_t) * (size_t)s->n_tok);
        s->mask = malloc((size_t)s->n_tok);
        s->ids = malloc((size_t)s->n * ID_BYTES);
        K3_CHECK(s->len && s->off && s->tokens && s->mask && s->ids, "out of memory for the input");
    }
    K3_CHECK_MPI(MPI_Bcast(s->len, (int)s->n, MPI_INT64_T, 0, comm));
    K3_CHECK_MPI(MPI_Bcast(s->off, (int)s->n + 1, MPI_INT64_T, 0, comm));
    K3_CHECK_MPI(MPI_Bcast(s->tokens, (int)s->n_tok, MPI_INT32_T, 0, comm));
    K3_CHECK_MPI(MPI_Bcast(s->mask, (int)s->n_tok, MPI_UINT8_T, 0, comm));
    K3_CHECK_MPI(MPI_Bcast(s->ids, (int)(s->n * ID_BYTES), MPI_CHAR, 0, comm));
}

/* ------------------------------------------------------------ the capture */

struct capture {
    struct k3_h5_dump *w;
    int n_ds;
    char names[K3_H5_DUMP_MAX_DATASETS][32];  /* forward-pass intermediate per dataset */
    int64_t sample, row[K3_H5_DUMP_MAX_DATASETS];
    int failed;
    struct k3_err err;
};

static void capture_put(void *ctx, const char *name, const float *x, int64_t n, int64_t width, int64_t ld)
{
    struct capture *c = ctx;
    for (int d = 0; d < c->n_ds && !c->failed; d++) {
        if (strcmp(c->names[d], name) != 0) continue;
        if (k3_h5_dump_put(c->w, c->sample, d, c->row[d], x, n, ld, &c->err)) c->failed = 1;
        c->row[d] += n;
    }
    (void)width;
}

/* The forward-pass name of "the output of layer L" (see the file comment). */
static void layer_output_name(const struct k3_model_config *cfg, int L, char *buf, size_t n)
{
    if (cfg->arch == K3_ARCH_KIMI_LINEAR) snprintf(buf, n, "L%d.out", L);
    else if (L + 1 < cfg->n_layers) snprintf(buf, n, "L%d.attn_in", L + 1);
    else snprintf(buf, n, "final_in");
}

/* The progress line (rank 0): on a terminal redrawn after every flush, in a
 * log file one line every 5 s. Rates are over this run (a resume starts anew). */
struct progress {
    int64_t n_samples, s0, tok0;
    double t0, t_last;
};

static void progress(struct progress *pg, const struct k3_h5_dump *w, int last)
{
    double t = k3_now_s();
    int tty = isatty(2);
    if (!last && !tty && t - pg->t_last < 5.0) return;
    pg->t_last = t;
    struct k3_h5_dump_stats st;
    k3_h5_dump_stats(w, &st);
    double dt = t - pg->t0 > 1e-9 ? t - pg->t0 : 1e-9;
    int64_t n_samples = pg->n_samples, s0 = pg->s0, tok = st.tokens_written - pg->tok0;
    double mb = (double)tok * ((double)st.bytes_written / (double)(st.tokens_written ? st.tokens_written : 1)) / 1e6;
    int width = 30, fill = (int)(width * st.samples_committed / (n_samples ? n_samples : 1));
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "%sdump [%s] %lld/%lld samples  %.1f samples/s  %.0f tok/s  %.1f MB/s%s", tty ? "\r" : "",
            bar, (long long)st.samples_committed, (long long)n_samples,
            (double)(st.samples_committed - s0) / dt, (double)tok / dt, mb / dt, tty && !last ? "" : "\n");
    fflush(stderr);
}

/* ------------------------------------------------------------ the command */

static int usage_error(int root, const char *fmt, const char *a, const char *b)
{
    if (root) {
        fprintf(stderr, CMD ": ");
        fprintf(stderr, fmt, a, b);
        fputc('\n', stderr);
    }
    return K3_EXIT_USAGE;
}

int k3_cmd_dump(struct k3_cli *cli)
{
    struct k3_job *job = cli->job;
    int root = job->rank == 0;
    int rc = k3_cli_load_deploy(cli, 0);
    if (rc) return rc;
    const struct k3_deploy *dp = &cli->deploy;
    const char *model = dp->model.path, *input = k3_arg(&cli->args, "input"), *out = k3_arg(&cli->args, "out");
    const char *dtype_s = k3_arg(&cli->args, "dtype") ? k3_arg(&cli->args, "dtype") : "bfloat16";
    if (!model[0] || !input || !out)
        return usage_error(root, "--model, --input and --out are required (see k3 dump --help)%s%s", "", "");
    enum k3_h5_dump_dtype dtype;
    if (!strcmp(dtype_s, "bfloat16") || !strcmp(dtype_s, "bf16")) dtype = K3_H5_DUMP_BF16;
    else if (!strcmp(dtype_s, "float32") || !strcmp(dtype_s, "f32")) dtype = K3_H5_DUMP_F32;
    else return usage_error(root, "--dtype must be bfloat16 or float32, not '%s'%s", dtype_s, "");
    if (k3_arg_flag(&cli->args, "generate")) {
        if (root) fprintf(stderr, CMD ": --generate (regenerating assistant replies with the model) needs the "
                                  "serving loop, which is not built yet; dump the conversations as they are\n");
        return K3_EXIT_FAIL;
    }
    if (dp->dump.compression)
        return usage_error(root, "dump.compression must be 0: compressed chunks change the file's metadata on "
                           "every write, which would make a killed dump unresumable, and bf16 activations "
                           "barely compress (research/serving.md §9.1)%s%s", "", "");
    struct k3_groups groups;
    struct k3_err err;
    if (k3_groups_init(&groups, job, dp->parallel.tp, dp->parallel.adp, &err))
        return usage_error(root, "%s (set --adp to the number of ranks)%s", err.msg, "");
    int final = k3_arg_flag(&cli->args, "final") || dp->dump.final_state;

    struct k3_model_config cfg;
    if (k3_model_config_load(model, &cfg, &err)) {
        k3_groups_free(&groups);
        return usage_error(root, "%s%s", err.msg, "");
    }
    /* Layers: in range, no repeats, at least one dataset. */
    const char *ds_names[K3_H5_DUMP_MAX_DATASETS];
    char ds_buf[K3_H5_DUMP_MAX_DATASETS][32];
    struct capture cap = {0};
    char layers_s[1024] = "";
    for (int i = 0; i < dp->dump.n_layers; i++) {
        int L = dp->dump.layers[i];
        char tmp[32];
        snprintf(tmp, sizeof tmp, "%d", L);
        if (L >= cfg.n_layers) {
            k3_groups_free(&groups);
            return usage_error(root, "--layers: layer %s does not exist (the model has layers 0-%s)", tmp,
                               (snprintf(ds_buf[0], 32, "%d", cfg.n_layers - 1), ds_buf[0]));
        }
        for (int j = 0; j < i; j++)
            if (dp->dump.layers[j] == L) {
                k3_groups_free(&groups);
                return usage_error(root, "--layers: layer %s is listed twice%s", tmp, "");
            }
        if (cap.n_ds == K3_H5_DUMP_MAX_DATASETS - 1) break;
        snprintf(ds_buf[cap.n_ds], 32, "layer_%d", L);
        layer_output_name(&cfg, L, cap.names[cap.n_ds], sizeof cap.names[0]);
        ds_names[cap.n_ds] = ds_buf[cap.n_ds];
        cap.n_ds++;
        snprintf(layers_s + strlen(layers_s), sizeof layers_s - strlen(layers_s), "%s%d", i ? "," : "", L);
    }
    if (final) {
        snprintf(ds_buf[cap.n_ds], 32, "final");
        snprintf(cap.names[cap.n_ds], 32, "final_norm");
        ds_names[cap.n_ds] = ds_buf[cap.n_ds];
        cap.n_ds++;
    }
    if (cap.n_ds == 0) {
        k3_groups_free(&groups);
        return usage_error(root, "nothing to dump: give --layers and/or --final%s%s", "", "");
    }

    /* The input: rank 0 reads and renders, everyone gets the same arrays. */
    struct samples smp = {0};
    rc = 0;
    if (root) rc = samples_load(input, model, cfg.vocab_size, &smp, &err);
    K3_CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, job->world_comm));
    if (rc) {
        if (root) fprintf(stderr, CMD ": %s\n", err.msg);
        k3_groups_free(&groups);
        return K3_EXIT_USAGE;
    }
    samples_bcast(&smp, job->world_comm, job->rank);

    /* The model: every rank a replica (tp = 1). */
    struct k3_checkpoint *ck = NULL;
    struct k3_weights wts = {0};
    struct k3_backend be = {0};
    struct k3_forward *fwd = NULL;
    struct k3_seq_cache cache = {0};
    struct k3_h5_dump *w = NULL;
    char *config_text = NULL;
    rc = K3_EXIT_FAIL;
    int64_t max_len = 0;
    for (int64_t i = 0; i < smp.n; i++) max_len = smp.len[i] > max_len ? smp.len[i] : max_len;
    /* One rank: the whole model. Several: the sharded forward (model/parallel.h),
     * TP inside each attention group, experts over every rank. */
    struct k3_comm tp_comm, ep_comm;
    k3_comm_init_mpi(&tp_comm, groups.tp_comm, dp->watchdog.timeout_s);
    k3_comm_init_mpi(&ep_comm, groups.ep_comm, dp->watchdog.timeout_s);
    struct k3_model_par par = {.shard = {.tp = groups.tp, .tp_rank = groups.tp_rank, .ep = job->world,
                                         .ep_rank = job->rank},
                               .tp_comm = &tp_comm, .ep_comm = &ep_comm};
    int leader = groups.tp_rank == 0;
    int bad = k3_checkpoint_open(model, &ck, &err) || k3_weights_load(&cfg, ck, &wts, &err) ||
              (job->world > 1 && k3_weights_shard(&wts, &par.shard, &err));
    if (!bad && k3_cpu_backend_init(&be, dp->backend.threads) != 0)
        bad = k3_err_set(&err, "cannot start %d CPU threads", dp->backend.threads) != 0;
    struct k3_forward_opts fo = {.max_tok = 512, .max_ctx = max_len, .kda_chunk = 64, .mla_absorb = -1,
                                 .par = job->world > 1 ? &par : NULL};
    if (!bad && (k3_forward_init(&fwd, &cfg, &wts, &be, &fo, &err) || k3_seq_cache_init(&cache, &cfg, max_len, &err)))
        bad = 1;
    int any_bad;
    K3_CHECK_MPI(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, job->world_comm));
    if (any_bad) {
        if (bad) fprintf(stderr, CMD ": rank %d: %s\n", job->rank, err.msg);
        goto done;
    }

    /* Attributes: what a trainer needs to know about these numbers. */
    {
        char cfg_path[4096];
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", model);
        config_text = k3_job_bcast_file(job, cfg_path, err.msg, (int)sizeof err.msg);
    }
    char input_hash[32], tok_hash[48], model_hash[32], sem[512], identity[1280];
    snprintf(input_hash, sizeof input_hash, "fnv1a64:%016llx", (unsigned long long)smp.input_hash);
    if (smp.tokenizer_hash) snprintf(tok_hash, sizeof tok_hash, "fnv1a64:%016llx", (unsigned long long)smp.tokenizer_hash);
    else snprintf(tok_hash, sizeof tok_hash, "none (no tiktoken.model in --model)");
    uint64_t mh = config_text ? k3_fnv1a64(config_text, strlen(config_text), K3_FNV1A64_INIT) : 0;
    snprintf(model_hash, sizeof model_hash, "fnv1a64:%016llx", (unsigned long long)mh);
    snprintf(sem, sizeof sem, "%s",
             cfg.arch == K3_ARCH_KIMI_LINEAR
                 ? "layer_L = output of decoder layer L (0-based): the residual stream after layer L"
                 : "layer_L = output of decoder layer L (0-based): the AttnRes mix that feeds layer L+1's "
                   "attention; for the last layer, the output mix (before the final norm)");
    const struct k3_h5_dump_attr attrs[] = {
        {"model_config", config_text ? config_text : ""},
        {"model_config_hash", model_hash},
        {"model_arch", k3_arch_name(cfg.arch)},
        {"layers", layers_s},
        {"layer_semantics", sem},
        {"final_semantics", final ? "final = after the final norm: what lm_head sees" : "not dumped"},
        {"loss_mask_semantics", "1 = assistant tokens (messages input) or the line's loss_mask / all 1 (prompt_ids input)"},
        {"tokenizer_hash", tok_hash},
        {"k3_version", K3_VERSION_STRING},
        {"input_file", input},
        {"input_hash", input_hash},
    };
    /* The layout is part of it: another tp x adp adds partial sums in another order,
     * so a file finished under it would not equal an uninterrupted run of either. */
    snprintf(identity, sizeof identity, "%s|%s|%s|%s|%d|%lld|tp%d|adp%d", input_hash, model_hash, tok_hash, layers_s,
             final, (long long)cfg.hidden_size, groups.tp, groups.adp);
    const char *per_rank_env = getenv("K3_DUMP_PER_RANK_FILES");
    struct k3_h5_dump_opts wo = {
        .path = out, .comm = job->world_comm, .n_datasets = cap.n_ds, .datasets = ds_names,
        .hidden = cfg.hidden_size, .dtype = dtype, .chunk_tokens = dp->dump.chunk_tokens,
#if K3_HDF5_PARALLEL
        .per_rank_files = per_rank_env && per_rank_env[0] == '1',
#else
        .per_rank_files = 1,
#endif
        .n_attrs = (int)(sizeof attrs / sizeof attrs[0]), .attrs = attrs, .identity = identity,
        .no_fsync = getenv("K3_DUMP_NO_FSYNC") && getenv("K3_DUMP_NO_FSYNC")[0] == '1',
        .hdf5_io = getenv("K3_DUMP_HDF5_IO") && getenv("K3_DUMP_HDF5_IO")[0] == '1',
    };
    (void)per_rank_env;
    struct k3_h5_dump_input win = {.n_samples = smp.n, .sample_len = smp.len, .tokens = smp.tokens,
                                   .loss_mask = smp.mask, .id_bytes = ID_BYTES, .sample_ids = smp.ids};
    int64_t n_done = 0;
    if (k3_h5_dump_open(&w, &wo, &win, &n_done, &err)) {
        if (root) fprintf(stderr, CMD ": %s\n", err.msg);
        rc = K3_EXIT_USAGE;
        goto done;
    }
    if (root) {
        K3_INFO(CMD ": %s, %lld samples, %lld tokens, %d datasets (%s%s), %s, %d rank(s), chunk %d tokens", k3_arch_name(cfg.arch),
                (long long)smp.n, (long long)smp.n_tok, cap.n_ds, layers_s, final ? (layers_s[0] ? ",final" : "final") : "",
                dtype == K3_H5_DUMP_BF16 ? "bfloat16" : "float32", job->world, dp->dump.chunk_tokens);
        if (n_done == smp.n) K3_INFO(CMD ": %s is already complete", out);
        else if (n_done) K3_INFO(CMD ": resuming %s after sample %lld of %lld", out, (long long)n_done, (long long)smp.n);
    }
    struct k3_dump hook = {.all = 0, .names = NULL, .n_names = 0, .put = capture_put, .ctx = &cap};
    const char *hook_names[K3_H5_DUMP_MAX_DATASETS];
    for (int d = 0; d < cap.n_ds; d++) hook_names[d] = cap.names[d];
    hook.names = hook_names;
    hook.n_names = cap.n_ds;
    if (leader) k3_forward_set_dump(fwd, &hook);   /* the group's leader holds its samples' rows */
    cap.w = w;

    /* Rounds of at least round_tokens tokens; a collective flush after each. */
    int64_t round_tokens = (int64_t)dp->scheduler.max_batch_tokens * groups.adp;
    struct k3_h5_dump_stats st0;
    k3_h5_dump_stats(w, &st0);
    struct progress pg = {.n_samples = smp.n, .s0 = st0.samples_committed, .tok0 = st0.tokens_written,
                          .t0 = k3_now_s(), .t_last = k3_now_s()};
    for (int64_t s = n_done; s < smp.n;) {
        int64_t end = s, tok = 0;
        while (end < smp.n && (tok < round_tokens || end == s)) tok += smp.len[end++];
        /* Sample i goes to group i mod adp. Every forward call is matched on
         * every rank (the MoE collectives span all of them): a group with fewer
         * samples this round, or one that failed, calls k3_forward_idle. */
        int failed = 0;
        int64_t per_group = (end - s + groups.adp - 1) / groups.adp;
        for (int64_t j = 0; j < per_group; j++) {
            int64_t i = s + j * groups.adp + ((groups.group - s % groups.adp + groups.adp) % groups.adp);
            if (i >= end || failed) {
                if (job->world > 1) k3_forward_idle(fwd);
                continue;
            }
            k3_seq_cache_reset(&cache, &cfg);
            cap.sample = i;
            memset(cap.row, 0, sizeof cap.row);
            if (k3_forward_run(fwd, &cache, smp.tokens + smp.off[i], smp.len[i], NULL, &err) ||
                (cap.failed && (err = cap.err, 1)) || (leader && k3_h5_dump_sample_done(w, i, &err))) {
                k3_err_prefix(&err, "sample %lld (id %s)", (long long)i, smp.ids + i * ID_BYTES);
                failed = 1;
            }
        }
        int any_failed;
        K3_CHECK_MPI(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, job->world_comm));
        if (any_failed) {
            if (failed) fprintf(stderr, CMD ": rank %d: %s\n", job->rank, err.msg);
            if (root) fprintf(stderr, CMD ": stopped; %s stays resumable from its last flush\n", out);
            goto done;
        }
        if (k3_h5_dump_flush(w, &err)) {
            if (root) fprintf(stderr, CMD ": %s\n" CMD ": stopped; fix the cause and re-run the same command to "
                              "resume %s\n", err.msg, out);
            goto done;
        }
        if (root && end < smp.n) progress(&pg, w, 0);
        s = end;
    }
    if (k3_h5_dump_finish(w, &err)) {
        if (root) fprintf(stderr, CMD ": %s\n" CMD ": stopped; re-run the same command to finish %s\n", err.msg, out);
        goto done;
    }
    if (root) {
        progress(&pg, w, 1);
        K3_INFO(CMD ": wrote %s", out);
    }
    rc = K3_EXIT_OK;
done:
    k3_h5_dump_free(w);
    free(config_text);
    k3_seq_cache_free(&cache);
    k3_forward_free(fwd);
    k3_cpu_backend_free(&be);
    k3_weights_free(&wts);
    if (ck) k3_checkpoint_free(ck);
    k3_comm_free(&tp_comm);
    k3_comm_free(&ep_comm);
    samples_free(&smp);
    k3_groups_free(&groups);
    return rc;
}
