/* engine_job.h - the serving loop of a model job, shared by `k3 generate`,
 * `k3 serve` and `k3 dump --generate`: the forward, the step executor and, on
 * rank 0, the scheduler, sized from the deployment config and the model.
 *
 *   struct k3_engine_job *e;
 *   k3_engine_job_init(&e, &mj, &cli->deploy, &size, &err);   every rank
 *   rank 0:  k3_sched_submit(k3_engine_job_sched(e), ...)  (any thread)
 *            k3_engine_job_run(e, until);                   the step loop
 *            k3_engine_job_shutdown(e);                     workers leave
 *   others:  k3_engine_job_worker(e);                       until shutdown
 *   k3_engine_job_free(e);                                  every rank
 *
 * Rank 0 logs once what fits: sequences (KDA slots) and tokens (MLA blocks)
 * per attention group, from cache.* of the deployment.
 *
 * Idle: when the scheduler has nothing to do, rank 0 waits on the
 * scheduler's inbox (no spinning) and the workers wait for the next plan
 * without burning a core and without the collective watchdog firing. */
#ifndef K3_CLI_ENGINE_JOB_H
#define K3_CLI_ENGINE_JOB_H

#include "cli/model_job.h"
#include "core/deploy.h"
#include "core/err.h"
#include "engine/scheduler.h"

/* What the caller knows about its requests; 0 fields take the deployment's
 * values (scheduler.*, cache.*) or the model's (context). */
struct k3_engine_size {
    int context_tokens;  /* longest prompt + completion (generate: from its requests) */
    int max_seqs;        /* running sequences per group (generate: at most its request count) */
    int max_queue;       /* queued requests before submit refuses */
};

struct k3_engine_job;

/* Collective. Rank 0 decides the sizes and broadcasts them. */
int k3_engine_job_init(struct k3_engine_job **e, struct k3_model_job *mj, const struct k3_deploy *d,
                       const struct k3_engine_size *size, struct k3_err *err);
void k3_engine_job_free(struct k3_engine_job *e);

/* Rank 0 only (NULL elsewhere). */
struct k3_sched *k3_engine_job_sched(struct k3_engine_job *e);

/* What the loop does between steps (rank 0). */
enum k3_engine_until {
    K3_ENGINE_UNTIL_IDLE,  /* return when nothing is queued or running (generate, dump) */
    K3_ENGINE_UNTIL_STOP,  /* wait for work when idle; return after k3_engine_job_stop (serve) */
};

/* Rank 0: runs steps. on_step (may be NULL) is called after each step on
 * this thread (progress bars, metrics). */
void k3_engine_job_run(struct k3_engine_job *e, enum k3_engine_until until,
                       void (*on_step)(void *ctx, const struct k3_step_plan *plan, double step_s), void *ctx);
/* Any thread, async-signal-safe: makes a K3_ENGINE_UNTIL_STOP loop return
 * after the current step. Requests still running are the caller's to
 * finish or cancel first (run until idle after cancelling them). */
void k3_engine_job_stop(struct k3_engine_job *e);
/* Rank 0, after the last run: tells the workers to leave k3_engine_job_worker. */
void k3_engine_job_shutdown(struct k3_engine_job *e);
/* Ranks other than 0: run the steps rank 0 plans until it shuts down. */
void k3_engine_job_worker(struct k3_engine_job *e);

#endif
