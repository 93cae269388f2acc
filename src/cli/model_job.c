/* model_job.c - see model_job.h. */
#include "cli/model_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"
#include "model/shard.h"
#include "mpi/bootstrap.h"
#include "mpi/mpi_check.h"

/* The bytes of config.json, for the cross-rank check (any file, small). */
static char *slurp(const char *dir, size_t *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, len = 0, got;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    *n = len;
    return buf;
}

static void log_weight_bytes(struct k3_model_job *mj)
{
    int64_t dense, experts;
    k3_weights_shard_bytes(&mj->w, &dense, &experts);
    long long mine[2] = {dense, experts};
    long long *all = mj->job->rank == 0 ? malloc(sizeof mine * (size_t)mj->job->world) : NULL;
    K3_CHECK(mj->job->rank != 0 || all, "out of memory");
    K3_CHECK_MPI(MPI_Gather(mine, 2, MPI_LONG_LONG, all, 2, MPI_LONG_LONG, 0, mj->job->world_comm));
    if (mj->job->rank == 0) {
        for (int r = 0; r < mj->job->world; r++)
            K3_INFO("rank %d (group %d, tp rank %d) holds %.1f MiB of weights: %.1f MiB dense, %.1f MiB "
                    "routed experts", r, mj->groups.group_of_rank[r], mj->groups.tp_rank_of_rank[r],
                    (double)(all[2 * r] + all[2 * r + 1]) / (1 << 20), (double)all[2 * r] / (1 << 20),
                    (double)all[2 * r + 1] / (1 << 20));
        free(all);
    }
}

int k3_model_job_init(struct k3_model_job *mj, struct k3_cli *cli, const char *cmd)
{
    memset(mj, 0, sizeof *mj);
    mj->job = cli->job;
    struct k3_job *job = cli->job;
    int root = job->rank == 0;
    int rc = k3_cli_load_deploy(cli, 1);
    if (rc) return rc;
    const struct k3_deploy *d = &cli->deploy;
    struct k3_err err;
    if (k3_deploy_check_world(d, job->world, &err)) {
        if (root) fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return K3_EXIT_USAGE;
    }
    if (strcmp(d->backend.kind, "cpu") != 0) {
        if (root) fprintf(stderr, "%s: backend.kind = \"%s\": the model runs on the CPU backend only in "
                                  "this build (the CUDA forward pass comes with the CUDA kernel issues)\n",
                          cmd, d->backend.kind);
        return K3_EXIT_USAGE;
    }
    if (!d->model.path[0]) {
        if (root) fprintf(stderr, "%s: --model DIR is required\n", cmd);
        return K3_EXIT_USAGE;
    }
    /* Every rank must run the same deployment: compare before anything
     * collective depends on it. */
    /* model.path may differ (node-local copies); config.json is compared below. */
    struct k3_deploy same = *d;
    memset(same.model.path, 0, sizeof same.model.path);
    k3_job_check_same(job, &same, sizeof same, "the deployment configuration (flags or config file)");
    if (k3_groups_init(&mj->groups, job, d->parallel.tp, d->parallel.adp, &err))
        K3_FATAL("%s", err.msg); /* cannot happen after check_world */
    k3_comm_init_mpi(&mj->tp_comm, mj->groups.tp_comm, d->watchdog.timeout_s);
    k3_comm_init_mpi(&mj->ep_comm, mj->groups.ep_comm, d->watchdog.timeout_s);
    mj->par = (struct k3_model_par){.shard = {.tp = d->parallel.tp, .tp_rank = mj->groups.tp_rank,
                                              .ep = job->world, .ep_rank = job->rank},
                                    .tp_comm = &mj->tp_comm, .ep_comm = &mj->ep_comm};
    mj->sharded = job->world > 1;

    /* Each rank reads the checkpoint itself and keeps only its slice. */
    const char *model = d->model.path;
    size_t n_cfg = 0;
    char *cfg_bytes = slurp(model, &n_cfg);
    k3_job_check_same(job, cfg_bytes ? cfg_bytes : "", cfg_bytes ? n_cfg : 0,
                      "the model's config.json");
    free(cfg_bytes);
    if (k3_model_config_load(model, &mj->cfg, &err)) {
        /* Every rank read the same bytes: a collective verdict. */
        if (root) fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return K3_EXIT_FAIL;
    }
    if (k3_checkpoint_open(model, &mj->ck, &err) || k3_weights_load(&mj->cfg, mj->ck, &mj->w, &err) ||
        k3_weights_shard(&mj->w, &mj->par.shard, &err)) {
        if (job->world == 1) {
            fprintf(stderr, "%s: %s\n", cmd, err.msg);
            return K3_EXIT_FAIL;
        }
        K3_FATAL("rank %d (group %d, tp rank %d) could not load its shard of %s: %s", job->rank,
                 mj->groups.group, mj->groups.tp_rank, model, err.msg);
    }
    log_weight_bytes(mj);
    if (k3_cpu_backend_init(&mj->be, d->backend.threads) != 0) {
        if (job->world == 1) {
            fprintf(stderr, "%s: cannot start %d CPU threads\n", cmd, d->backend.threads);
            return K3_EXIT_FAIL;
        }
        K3_FATAL("rank %d cannot start %d CPU threads", job->rank, d->backend.threads);
    }
    return 0;
}

const struct k3_model_par *k3_model_job_par(const struct k3_model_job *mj)
{
    return mj->sharded ? &mj->par : NULL;
}

void k3_model_job_free(struct k3_model_job *mj)
{
    if (mj->be.ops) k3_cpu_backend_free(&mj->be);
    if (mj->w.layers) k3_weights_free(&mj->w);
    if (mj->ck) k3_checkpoint_free(mj->ck);
    if (mj->tp_comm.ops) k3_comm_free(&mj->tp_comm);
    if (mj->ep_comm.ops) k3_comm_free(&mj->ep_comm);
    if (mj->groups.group_of_rank) k3_groups_free(&mj->groups);
    memset(mj, 0, sizeof *mj);
}
