/* cmd_logits.c - `k3 logits`: one sequence through the CPU forward pass.
 *
 *   k3 logits --model DIR --ids 1,2,3 --out FILE.npy [--decode-from N] [--dump NAMES]
 *
 * Writes float32 logits [n_tokens, vocab] as .npy. --decode-from N runs
 * ids[0:N] as one prefill and the rest one token at a time through the caches
 * (N = 0: every token is a decode step). --dump NAME,... (or "all") writes each
 * named intermediate (validation/reference/k3ref.py lists the names) as
 * FILE.NAME.npy next to --out, [n_tokens, width] float32, rows in token order
 * whatever the prefill/decode split.
 *
 * Under mpirun -np W (tp x adp = W) the model is sharded (model/parallel.h):
 * attention group 0 runs the sequence, the other groups take part in the
 * expert-parallel collectives only, and rank 0 writes the file. --dump needs
 * tp = 1 (with tensor parallelism a rank sees only its heads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/model_job.h"
#include "core/log.h"
#include "model/forward.h"
#include "mpi/bootstrap.h"

/* NPY v1.0, little-endian float32, C order (k3 hosts are x86-64 and aarch64, both LE). */
static int npy_write(const char *path, const float *x, int64_t rows, int64_t cols)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    unsigned short hlen = (unsigned short)(n + pad + 1);
    int ok = fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(&hlen, 2, 1, f) == 1 &&
             fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF &&
         fwrite(x, sizeof(float), (size_t)(rows * cols), f) == (size_t)(rows * cols);
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Dump accumulation: one growing [rows, width] buffer per name. */
struct dump_item {
    char name[96];
    int64_t width, rows, cap;
    float *data;
};
struct dump_acc {
    struct dump_item *items;
    int n, cap;
};

static void dump_put(void *ctx, const char *name, const float *x, int64_t n, int64_t width, int64_t ld)
{
    struct dump_acc *a = ctx;
    struct dump_item *it = NULL;
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->items[i].name, name)) it = &a->items[i];
    if (!it) {
        if (a->n == a->cap) {
            a->cap = a->cap ? 2 * a->cap : 64;
            a->items = realloc(a->items, sizeof *a->items * (size_t)a->cap);
            K3_CHECK(a->items, "out of memory");
        }
        it = &a->items[a->n++];
        memset(it, 0, sizeof *it);
        snprintf(it->name, sizeof it->name, "%s", name);
        it->width = width;
    }
    K3_CHECK(it->width == width, "intermediate %s changed width", name);
    if (it->rows + n > it->cap) {
        it->cap = (it->rows + n) * 2;
        it->data = realloc(it->data, sizeof(float) * (size_t)(it->cap * width));
        K3_CHECK(it->data, "out of memory dumping %s", name);
    }
    for (int64_t i = 0; i < n; i++)
        memcpy(it->data + (it->rows + i) * width, x + i * ld, sizeof(float) * (size_t)width);
    it->rows += n;
}

static int parse_ids(const char *s, int32_t **out, int64_t *n_out)
{
    int64_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!ids) return -1;
    const char *p = s;
    for (int64_t i = 0; i < n; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < 0 || v > 0x7fffffffL) {
            free(ids);
            return -1;
        }
        ids[i] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

int k3_cmd_logits(struct k3_cli *cli)
{
    const char *cmd = "k3 logits";
    int root = cli->job->rank == 0;
    const char *ids_s = k3_arg(&cli->args, "ids"), *out = k3_arg(&cli->args, "out"),
               *dump_s = k3_arg(&cli->args, "dump");
    if (!k3_arg(&cli->args, "model") && !k3_arg(&cli->args, "config")) {
        if (root) fprintf(stderr, "%s: --model, --ids and --out are required (see k3 logits --help)\n", cmd);
        return K3_EXIT_USAGE;
    }
    if (!ids_s || !out) {
        if (root) fprintf(stderr, "%s: --model, --ids and --out are required (see k3 logits --help)\n", cmd);
        return K3_EXIT_USAGE;
    }
    int32_t *ids;
    int64_t n;
    if (parse_ids(ids_s, &ids, &n)) {
        if (root) fprintf(stderr, "%s: --ids must be comma-separated non-negative integers, not '%s'\n", cmd, ids_s);
        return K3_EXIT_USAGE;
    }
    long long split;
    if (k3_arg_int(&cli->args, "decode-from", n, 0, n, &split)) {
        free(ids);
        return K3_EXIT_USAGE;
    }

    struct k3_err err;
    struct k3_model_job mj;
    struct k3_forward *fwd = NULL;
    struct k3_seq_cache cache = {0};
    struct dump_acc acc = {0};
    const char **names = NULL;
    char *dump_copy = NULL;
    float *logits = NULL;
    int rc = k3_model_job_init(&mj, cli, cmd);
    if (rc) {
        free(ids);
        k3_model_job_free(&mj);
        return rc;
    }
    rc = K3_EXIT_FAIL;
    if (dump_s && cli->deploy.parallel.tp > 1) {
        if (root) fprintf(stderr, "%s: --dump needs --tp 1 (with tensor parallelism a rank holds only its "
                                  "heads)\n", cmd);
        rc = K3_EXIT_USAGE;
        goto done;
    }
    /* Attention group 0 runs the sequence; the others only join the collectives. */
    int runs = mj.groups.group == 0;
    struct k3_forward_opts opts = {.max_tok = 512, .max_ctx = n, .kda_chunk = 64, .mla_absorb = -1,
                                   .par = k3_model_job_par(&mj)};
    if (k3_forward_init(&fwd, &mj.cfg, &mj.w, &mj.be, &opts, &err) || k3_seq_cache_init(&cache, &mj.cfg, n, &err)) {
        if (mj.sharded) K3_FATAL("%s: %s", cmd, err.msg);
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        goto done;
    }
    struct k3_dump dump = {.put = dump_put, .ctx = &acc};
    if (dump_s) {
        dump_copy = strdup(dump_s);
        names = calloc(strlen(dump_s) + 1, sizeof *names);
        if (!dump_copy || !names) goto done;
        for (char *tok = strtok(dump_copy, ","); tok; tok = strtok(NULL, ",")) {
            if (!strcmp(tok, "all")) dump.all = 1;
            else names[dump.n_names++] = tok;
        }
        dump.names = names;
        k3_forward_set_dump(fwd, &dump);
    }
    logits = malloc(sizeof(float) * (size_t)(n * mj.cfg.vocab_size));
    if (!logits) {
        fprintf(stderr, "%s: out of memory for %lld x %lld logits\n", cmd, (long long)n, (long long)mj.cfg.vocab_size);
        goto done;
    }
    K3_INFO("%s: %s, %lld tokens (prefill %lld, then %lld decode steps), %d threads, tp %d x adp %d", cmd,
            k3_arch_name(mj.cfg.arch), (long long)n, split, (long long)(n - split), mj.be.n_threads,
            cli->deploy.parallel.tp, cli->deploy.parallel.adp);
    /* The same number of forward calls on every rank (idle groups included). */
    for (int64_t t = split > 0 ? 0 : split; t < n; t = t == 0 && split > 0 ? split : t + 1) {
        int64_t m = t == 0 && split > 0 ? split : 1;
        if (!runs) {
            if (k3_forward_idle(fwd)) {
                rc = K3_EXIT_FAIL;
                goto done;
            }
        } else if (k3_forward_run(fwd, &cache, ids + t, m, logits + t * mj.cfg.vocab_size, &err)) {
            /* The input is the same on every rank, so every rank refuses it alike. */
            if (root) fprintf(stderr, "%s: %s\n", cmd, err.msg);
            rc = K3_EXIT_FAIL;
            goto done;
        }
    }
    if (!root) {
        rc = K3_EXIT_OK;
        goto done;
    }
    if (npy_write(out, logits, n, mj.cfg.vocab_size)) {
        fprintf(stderr, "%s: cannot write %s\n", cmd, out);
        goto done;
    }
    /* Dumps next to --out: FILE.npy -> FILE.NAME.npy. */
    size_t stem = strlen(out);
    if (stem > 4 && !strcmp(out + stem - 4, ".npy")) stem -= 4;
    for (int i = 0; i < acc.n; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%.*s.%s.npy", (int)stem, out, acc.items[i].name);
        if (npy_write(path, acc.items[i].data, acc.items[i].rows, acc.items[i].width)) {
            fprintf(stderr, "%s: cannot write %s\n", cmd, path);
            goto done;
        }
    }
    if (dump_s && dump.n_names > 0 && acc.n < dump.n_names)
        K3_WARN("%s: %d of %d requested intermediates do not exist in this model", cmd,
                dump.n_names - acc.n, dump.n_names);
    rc = K3_EXIT_OK;
done:
    for (int i = 0; i < acc.n; i++) free(acc.items[i].data);
    free(acc.items);
    free(names);
    free(dump_copy);
    free(logits);
    k3_seq_cache_free(&cache);
    k3_forward_free(fwd);
    k3_model_job_free(&mj);
    free(ids);
    return rc;

}
