/* engine_job.c - see engine_job.h.
 *
 * Sizing (rank 0, then broadcast, so that every rank builds the same pools):
 *   context  = size.context_tokens, else scheduler.context_tokens, else the
 *              model's max_position_embeddings; never above either limit;
 *   seqs     = scheduler.max_seqs, capped by size.max_seqs; KDA slots =
 *              cache.kda_slots (>= max_seqs, checked by deploy.c) capped at
 *              seqs, since a slot beyond the running sequences has no use
 *              until the prefix cache keeps snapshots;
 *   blocks   = cache.kv_bytes / (block_tokens x MLA bytes per token); with
 *              kv_bytes 0, every slot's full context, but at most a quarter of
 *              the host's memory shared by the ranks on the host; never more
 *              than every slot's full context; the context is then cut to what
 *              one group's blocks hold, and to what the forward's prefill
 *              workspace (proportional to the context) can take in that same
 *              share of memory: a model context of 1M tokens must not size a
 *              CPU job's workspace by default. */
#include "cli/engine_job.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "engine/step_exec.h"
#include "model/forward.h"
#include "mpi/mpi_check.h"

struct k3_engine_job {
    struct k3_model_job *mj;
    MPI_Comm world;
    int rank;
    struct k3_engine_sizes {
        long long context, seqs, slots, n_blocks, block_tokens, chunk, batch_tokens, queue;
    } sz;
    struct k3_forward *fwd;
    struct k3_step_exec ex;
    struct k3_step_plan plan;
    struct k3_sched *sched;       /* rank 0 */
    struct k3_sampled *got;       /* rank 0: [n_groups x seqs] */
    atomic_int stop;
};

/* Bytes of MLA latent cache per token on one rank (every MLA layer, fp32). */
static long long mla_token_bytes(const struct k3_model_config *cfg)
{
    int n_mla = 0;
    for (int l = 0; l < cfg->n_layers; l++) n_mla += k3_model_config_layer_is_mla(cfg, l);
    return (long long)n_mla * (cfg->kv_lora_rank + cfg->qk_rope_head_dim) * (long long)sizeof(float);
}

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

/* Bytes of the forward's workspace per context token (forward.c: MLA's
 * expanded keys and values, and the gathered latent rows). */
static long long workspace_token_bytes(const struct k3_model_config *cfg)
{
    if (!cfg->n_mla_layers) return 0;
    return ((long long)cfg->n_heads * (2 * cfg->qk_nope_head_dim + cfg->qk_rope_head_dim + cfg->v_head_dim) +
            cfg->kv_lora_rank + cfg->qk_rope_head_dim) * (long long)sizeof(float);
}

/* Rank 0: the sizes of the job, or -1 with a message. local_ranks: ranks on
 * rank 0's host, which share its memory. */
static int decide_sizes(struct k3_engine_sizes *z, const struct k3_model_config *cfg, const struct k3_deploy *d,
                        const struct k3_engine_size *size, int local_ranks, struct k3_err *err)
{
    long long share = (long long)sysconf(_SC_PHYS_PAGES) * (long long)sysconf(_SC_PAGE_SIZE) / 4 /
                      (local_ranks > 0 ? local_ranks : 1);
    long long model_ctx = cfg->max_position_embeddings > 0 ? cfg->max_position_embeddings : 1ll << 30;
    long long lim = d->scheduler.context_tokens ? min_ll(d->scheduler.context_tokens, model_ctx) : model_ctx;
    z->context = size->context_tokens > 0 ? min_ll(size->context_tokens, lim) : lim;
    z->seqs = size->max_seqs > 0 ? min_ll(size->max_seqs, d->scheduler.max_seqs) : d->scheduler.max_seqs;
    z->slots = d->cache.kda_slots ? min_ll(d->cache.kda_slots, z->seqs) : z->seqs;
    z->block_tokens = d->cache.block_tokens;
    long long tok_bytes = mla_token_bytes(cfg), bt = z->block_tokens;
    long long full = z->slots * ((z->context + bt - 1) / bt);
    if (!tok_bytes) {
        z->n_blocks = full; /* no MLA layer: blocks cost nothing, count them for the scheduler only */
    } else if (d->cache.kv_bytes) {
        z->n_blocks = min_ll(d->cache.kv_bytes / (bt * tok_bytes), full);
    } else {
        z->n_blocks = min_ll(full, share / (bt * tok_bytes));
    }
    if (z->n_blocks < 1)
        return k3_err_set(err, "cache.kv_bytes (%lld) holds no MLA block of %lld tokens (%lld bytes each); "
                          "raise it or lower cache.block_tokens", (long long)d->cache.kv_bytes, bt, bt * tok_bytes);
    z->context = min_ll(z->context, z->n_blocks * bt);
    long long ws = workspace_token_bytes(cfg);
    int ws_cut = ws && z->context > share / ws;
    if (ws_cut) z->context = share / ws;
    if (z->context < 2) return k3_err_set(err, "a context of %lld tokens is too short", z->context);
    z->chunk = min_ll(d->scheduler.prefill_chunk_tokens, z->context);
    z->batch_tokens = d->scheduler.max_batch_tokens > z->chunk ? d->scheduler.max_batch_tokens : z->chunk;
    z->queue = size->max_queue > 0 ? size->max_queue : d->scheduler.max_queue;
    if (z->queue < 1) z->queue = 1;
    const char *why = !tok_bytes ? " (the model has no MLA layer)"
                      : d->cache.kv_bytes ? ""
                                          : " (cache.kv_bytes 0: every slot's full context, at most a quarter "
                                            "of the host's memory over its ranks)";
    if (ws_cut)
        K3_WARN("engine: context cut to %lld tokens: the forward's workspace takes %lld bytes per context token "
                "(set scheduler.context_tokens to choose)", z->context, ws);
    K3_INFO("engine: %lld sequences and %lld tokens (%lld blocks of %lld) per attention group, %.1f MiB of MLA "
            "cache per rank%s; context %lld, prefill chunk %lld, %lld tokens per step",
            z->slots, z->n_blocks * bt, z->n_blocks, bt, (double)(z->n_blocks * bt * tok_bytes) / (1 << 20), why,
            z->context, z->chunk, z->batch_tokens);
    return 0;
}

int k3_engine_job_init(struct k3_engine_job **out, struct k3_model_job *mj, const struct k3_deploy *d,
                       const struct k3_engine_size *size, struct k3_err *err)
{
    *out = NULL;
    struct k3_engine_job *e = calloc(1, sizeof *e);
    K3_CHECK(e, "out of memory");
    e->mj = mj;
    e->world = mj->job->world_comm;
    e->rank = mj->job->rank;
    k3_plan_init(&e->plan);
    atomic_init(&e->stop, 0);
    /* rank 0 decides; a refusal there is every rank's (ok flag first) */
    long long msg[9] = {0};
    if (e->rank == 0) {
        if (decide_sizes(&e->sz, &mj->cfg, d, size, mj->job->local_size, err) == 0) {
            msg[0] = 1;
            memcpy(msg + 1, &e->sz, sizeof e->sz);
        }
    }
    K3_CHECK_MPI(MPI_Bcast(msg, 9, MPI_LONG_LONG, 0, e->world));
    if (!msg[0]) {
        if (e->rank != 0) k3_err_set(err, "rank 0 refused the engine sizes");
        k3_engine_job_free(e);
        return -1;
    }
    memcpy(&e->sz, msg + 1, sizeof e->sz);
    const struct k3_engine_sizes *z = &e->sz;
    struct k3_forward_opts opts = {.max_tok = min_ll(z->chunk, 512), .max_ctx = z->context, .kda_chunk = 64,
                                   .mla_absorb = -1, .par = k3_model_job_par(mj), .vocab_local = 1};
    struct k3_step_exec_size xs = {.n_slots = (int)z->slots, .max_ctx = z->context, .max_new = z->chunk,
                                   .n_blocks = z->n_blocks, .block_tokens = z->block_tokens};
    int ok = k3_forward_init(&e->fwd, &mj->cfg, &mj->w, &mj->be, &opts, err) == 0 &&
             k3_step_exec_init(&e->ex, &mj->cfg, e->fwd, &mj->groups, &mj->tp_comm, e->world, &xs, err) == 0;
    if (ok && e->rank == 0) {
        struct k3_sched_limits lim = {.n_groups = mj->groups.adp, .max_batch_tokens = (int)z->batch_tokens,
                                      .max_seqs = (int)z->slots, .prefill_chunk = (int)z->chunk,
                                      .max_queue = (int)z->queue, .context_tokens = (int)z->context,
                                      .kda_slots = (int)z->slots, .block_tokens = (int)z->block_tokens,
                                      .n_blocks = (int)z->n_blocks};
        e->got = malloc(sizeof *e->got * (size_t)(mj->groups.adp * z->slots + 1));
        if (!e->got) k3_err_set(err, "out of memory");
        ok = e->got && k3_sched_init(&e->sched, &lim, err) == 0;
    }
    /* one rank short of memory fails the start on every rank, not a hang */
    int all_ok = ok;
    K3_CHECK_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, e->world));
    if (!all_ok) {
        if (ok) k3_err_set(err, "another rank could not set up the engine");
        k3_engine_job_free(e);
        return -1;
    }
    *out = e;
    return 0;
}

void k3_engine_job_free(struct k3_engine_job *e)
{
    if (!e) return;
    k3_sched_free(e->sched);
    free(e->got);
    k3_plan_free(&e->plan);
    if (e->ex.slots) k3_step_exec_free(&e->ex);
    if (e->fwd) k3_forward_free(e->fwd);
    free(e);
}

struct k3_sched *k3_engine_job_sched(struct k3_engine_job *e) { return e->sched; }

void k3_engine_job_run(struct k3_engine_job *e, enum k3_engine_until until,
                       void (*on_step)(void *ctx, const struct k3_step_plan *plan, double step_s), void *ctx)
{
    K3_CHECK(e->rank == 0 && e->sched, "k3_engine_job_run is rank 0's");
    for (;;) {
        if (until == K3_ENGINE_UNTIL_STOP && atomic_load(&e->stop)) return;
        if (!k3_sched_busy(e->sched)) {
            if (until == K3_ENGINE_UNTIL_IDLE) return;
            /* short, so that a stop from a signal handler (which cannot
             * signal the condition variable) is seen within 100 ms */
            k3_sched_wait(e->sched, 0.1);
            continue;
        }
        double t0 = k3_now_s();
        k3_sched_build(e->sched, &e->plan);
        k3_plan_bcast_idle(&e->plan, e->world, 0);
        int n = k3_step_exec_run(&e->ex, &e->plan, e->got);
        k3_sched_complete(e->sched, &e->plan, e->got, n);
        if (on_step) on_step(ctx, &e->plan, k3_now_s() - t0);
    }
}

void k3_engine_job_stop(struct k3_engine_job *e) { atomic_store(&e->stop, 1); }

void k3_engine_job_shutdown(struct k3_engine_job *e)
{
    K3_CHECK(e->rank == 0, "k3_engine_job_shutdown is rank 0's");
    k3_plan_reset(&e->plan, ~0ull, e->mj->groups.adp);
    e->plan.flags = K3_STEP_SHUTDOWN;
    k3_plan_bcast_idle(&e->plan, e->world, 0);
}

void k3_engine_job_worker(struct k3_engine_job *e)
{
    K3_CHECK(e->rank != 0, "k3_engine_job_worker is for ranks other than 0");
    struct k3_sampled none[1];
    for (;;) {
        k3_plan_bcast_idle(&e->plan, e->world, 0);
        if (e->plan.flags & K3_STEP_SHUTDOWN) return;
        k3_step_exec_run(&e->ex, &e->plan, none);
    }
}
