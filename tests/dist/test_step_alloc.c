/* test_step_alloc.c - the step loop allocates nothing per step (the issue;
 * DESIGN.md §2): the rank-0 scheduler (build, complete, callbacks), the plan
 * broadcast, the step executor (paged MLA pool, sampling, gather) and the
 * forward, on every rank, over ten decode steps after warm-up, with requests
 * finishing and queued ones admitted in those steps. Calls to malloc, calloc,
 * realloc and aligned_alloc are counted by linking with -Wl,--wrap (so this
 * test is not built with sanitizers, which intercept the same functions).
 *
 *   mpirun -np W test_step_alloc CHECKPOINT_DIR TP ADP */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_setup.h"
#include "engine/scheduler.h"
#include "engine/step_exec.h"
#include "k3_test.h"
#include "kernels/cpu/cpu.h"
#include "model/forward.h"
#include "mpi/mpi_check.h"

static long n_alloc;

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__wrap_malloc(size_t n) { n_alloc++; return __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { n_alloc++; return __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { n_alloc++; return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { n_alloc++; return __real_aligned_alloc(a, n); }

enum { N_REQ = 12, SLOTS = 4, CTX = 96, BT = 8, FIRST = 6, LAST = 16 };

static int n_tokens, n_finished;

static int on_token(void *ctx, uint64_t id, const struct k3_sampled *t)
{
    (void)ctx, (void)id, (void)t;
    n_tokens++;
    return 0;
}

static void on_finish(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *u)
{
    (void)ctx, (void)id, (void)why, (void)u;
    n_finished++;
}

int main(int argc, char **argv)
{
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    K3_CHECK(argc == 4, "usage: test_step_alloc CHECKPOINT_DIR TP ADP");
    int tp = atoi(argv[2]), adp = atoi(argv[3]);
    struct k3_err err;
    struct dist_setup ds;
    dist_setup_init(&ds, &job, argv[1], tp, adp);
    struct k3_backend be;
    K3_CHECK(k3_cpu_backend_init(&be, 1) == 0, "no CPU backend");
    struct k3_forward_opts opts = {.max_tok = 32, .max_ctx = CTX, .kda_chunk = 64, .mla_absorb = -1,
                                   .par = job.world > 1 ? &ds.par : NULL, .vocab_local = 1};
    struct k3_forward *f;
    struct k3_step_exec ex;
    struct k3_step_exec_size xs = {.n_slots = SLOTS, .max_ctx = CTX, .max_new = 32,
                                   .n_blocks = SLOTS * CTX / BT, .block_tokens = BT};
    if (k3_forward_init(&f, &ds.cfg, &ds.w, &be, &opts, &err) ||
        k3_step_exec_init(&ex, &ds.cfg, f, &ds.g, &ds.tp_comm, job.world_comm, &xs, &err))
        K3_FATAL("%s", err.msg);
    struct k3_sched *s = NULL;
    struct k3_sampled got[SLOTS * 8];
    if (job.rank == 0) {
        /* small budgets, so that requests finish and queued ones are admitted
         * (prefill chunks) inside the counted steps */
        struct k3_sched_limits lim = {.n_groups = adp, .max_batch_tokens = 32, .max_seqs = SLOTS,
                                      .prefill_chunk = 16, .max_queue = N_REQ, .context_tokens = CTX,
                                      .kda_slots = SLOTS, .block_tokens = BT, .n_blocks = SLOTS * CTX / BT};
        K3_CHECK(k3_sched_init(&s, &lim, &err) == 0, "%s", err.msg);
        for (int i = 0; i < N_REQ; i++) {
            int32_t prompt[40];
            int n = 3 + (i * 7) % 30;
            for (int t = 0; t < n; t++) prompt[t] = (int32_t)((i * 131 + t * 71 + 5) % ds.cfg.vocab_size);
            struct k3_sched_request q = {.prompt = prompt, .n_prompt = n, .max_tokens = 4 + (i * 5) % 9,
                                         .sampling = {.temperature = i % 2 ? 0.8f : 0, .top_p = 0.9f,
                                                      .repetition_penalty = 1.1f, .seed = 7 + (uint64_t)i},
                                         .cb = {on_token, on_finish, NULL}};
            CHECK(k3_sched_submit(s, &q, &err) > 0);
        }
    }
    struct k3_step_plan plan;
    k3_plan_init(&plan);
    long counted = 0, before = n_alloc;
    int steps = 0, finished_in = 0;
    CHECK_MSG(before > 0, "the allocation counter counted nothing (is -Wl,--wrap=malloc linked?)");
    for (;;) {
        long a0 = n_alloc;
        int fin0 = n_finished;
        if (job.rank == 0) {
            if (!k3_sched_busy(s)) {
                k3_plan_reset(&plan, ~0ull, adp);
                plan.flags = K3_STEP_SHUTDOWN;
            } else {
                k3_sched_build(s, &plan);
            }
        }
        k3_plan_bcast_idle(&plan, job.world_comm, 0);
        if (plan.flags & K3_STEP_SHUTDOWN) break;
        int n = k3_step_exec_run(&ex, &plan, got);
        if (job.rank == 0) k3_sched_complete(s, &plan, got, n);
        if (plan.step >= FIRST && plan.step < LAST) {
            counted += n_alloc - a0;
            steps++;
            finished_in += n_finished - fin0;
        }
    }
    long most = 0;
    K3_CHECK_MPI(MPI_Allreduce(&counted, &most, 1, MPI_LONG, MPI_MAX, job.world_comm));
    if (job.rank == 0) {
        printf("# tp %d x adp %d: %d steps counted, %d requests finished in them, %d tokens in all; "
               "most allocations on one rank in those steps: %ld\n", tp, adp, steps, finished_in, n_tokens, most);
        CHECK(steps == LAST - FIRST);
        CHECK_MSG(finished_in > 0, "no request finished inside the counted steps: the test covers too little");
        CHECK(n_finished == N_REQ);
        CHECK_MSG(most == 0, "%ld allocations in %d steps", most, steps);
        struct k3_sched_stats st;
        k3_sched_stats(s, &st);
        CHECK(st.free_blocks == st.total_blocks && st.free_slots == st.total_slots);
    }
    k3_sched_free(s);
    k3_plan_free(&plan);
    k3_step_exec_free(&ex);
    k3_forward_free(f);
    k3_cpu_backend_free(&be);
    dist_setup_free(&ds);
    int rc = job.rank == 0 ? k3_test_summary() : 0;
    K3_CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, job.world_comm));
    k3_job_free(&job);
    return rc;
}
