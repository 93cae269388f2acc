/* test_engine_job.c - the serving loop as `k3 serve` drives it
 * (cli/engine_job.h), on k3-tiny:
 *   - K3_ENGINE_UNTIL_STOP sits idle for a second before the first request:
 *     the workers must not burn a core meanwhile (their CPU time over the
 *     whole run stays well under their wall time; a spinning MPI_Bcast
 *     would use all of it);
 *   - requests submitted from another thread while the loop waits run to
 *     completion; one of them is cancelled mid-decode (from its on_token
 *     callback), and the block and slot pools return to full;
 *   - k3_engine_job_stop from a signal handler (SIGUSR1 raised by that
 *     thread) ends the loop; shutdown releases the workers.
 *
 *   mpirun -np W test_engine_job CHECKPOINT_DIR TP ADP */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/engine_job.h"
#include "core/clock.h"
#include "k3_test.h"
#include "mpi/bootstrap.h"
#include "mpi/mpi_check.h"

enum { N_REQ = 4, CANCELLED = 2 };

static struct k3_engine_job *the_job; /* for the signal handler only */
static atomic_int n_finished, n_cancelled, n_tokens[N_REQ];
static atomic_ullong ids[N_REQ];

static void on_signal(int sig)
{
    (void)sig;
    k3_engine_job_stop(the_job);
}

static int index_of(uint64_t id)
{
    for (int i = 0; i < N_REQ; i++)
        if (atomic_load(&ids[i]) == id) return i;
    return -1;
}

static int on_token(void *ctx, uint64_t id, const struct k3_sampled *t)
{
    (void)t;
    struct k3_sched *s = ctx;
    int i;
    while ((i = index_of(id)) < 0) sched_yield(); /* the client publishes ids after submit returns */
    if (atomic_fetch_add(&n_tokens[i], 1) + 1 == 3 && i == CANCELLED) k3_sched_cancel(s, id);
    return 0;
}

static void on_finish(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *u)
{
    (void)ctx, (void)id, (void)u;
    if (why == K3_FINISH_CANCELLED) atomic_fetch_add(&n_cancelled, 1);
    atomic_fetch_add(&n_finished, 1);
}

static void sleep_s(double s)
{
    struct timespec d = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&d, NULL);
}

/* The HTTP side: idle first, then requests, then a stop by signal. */
static void *client(void *arg)
{
    struct k3_sched *s = arg;
    sleep_s(1.0);
    struct k3_err err;
    for (int i = 0; i < N_REQ; i++) {
        int32_t prompt[24];
        int n = 4 + 5 * i;
        for (int t = 0; t < n; t++) prompt[t] = (int32_t)((i * 37 + t * 11 + 1) % 1000);
        struct k3_sched_request q = {.prompt = prompt, .n_prompt = n,
                                     .max_tokens = i == CANCELLED ? 40 : 6 + i,
                                     .cb = {on_token, on_finish, s}};
        uint64_t id = k3_sched_submit(s, &q, &err);
        CHECK_MSG(id > 0, "submit: %s", err.msg);
        atomic_store(&ids[i], id);
    }
    while (atomic_load(&n_finished) < N_REQ) sleep_s(0.01);
    sleep_s(0.3);
    raise(SIGUSR1);
    return NULL;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

int main(int argc, char **argv)
{
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    K3_CHECK(argc == 4, "usage: test_engine_job CHECKPOINT_DIR TP ADP");
    const struct k3_cmd *gen = NULL;
    for (int i = 0; i < k3_n_cmds; i++)
        if (!strcmp(k3_cmds[i].name, "generate")) gen = &k3_cmds[i];
    K3_CHECK(gen, "no generate command to borrow the options of");
    char *args[] = {"--model", argv[1], "--tp", argv[2], "--adp", argv[3], "--set", "backend.threads=1"};
    struct k3_cli cli;
    memset(&cli, 0, sizeof cli);
    cli.job = &job;
    K3_CHECK(k3_args_parse(&cli.args, gen, 8, args) == 0, "arguments");
    struct k3_model_job mj;
    K3_CHECK(k3_model_job_init(&mj, &cli, "test_engine_job") == 0, "model job");
    struct k3_engine_size size = {.context_tokens = 64, .max_seqs = 3, .max_queue = 16};
    struct k3_err err;
    struct k3_engine_job *e;
    if (k3_engine_job_init(&e, &mj, &cli.deploy, &size, &err)) K3_FATAL("%s", err.msg);
    double w0 = k3_now_s(), c0 = cpu_s();
    if (job.rank == 0) {
        the_job = e;
        signal(SIGUSR1, on_signal);
        struct k3_sched *s = k3_engine_job_sched(e);
        pthread_t th;
        pthread_create(&th, NULL, client, s);
        k3_engine_job_run(e, K3_ENGINE_UNTIL_STOP, NULL, NULL);
        pthread_join(th, NULL);
        double wall = k3_now_s() - w0;
        CHECK(wall >= 1.3);
        CHECK(atomic_load(&n_finished) == N_REQ && atomic_load(&n_cancelled) == 1);
        for (int i = 0; i < N_REQ; i++)
            CHECK_MSG(i == CANCELLED ? atomic_load(&n_tokens[i]) < 40 : atomic_load(&n_tokens[i]) == 6 + i,
                      "request %d: %d tokens", i, atomic_load(&n_tokens[i]));
        struct k3_sched_stats st;
        k3_sched_stats(s, &st);
        CHECK_MSG(st.free_blocks == st.total_blocks && st.free_slots == st.total_slots && st.running == 0,
                  "pools after the run: %d of %d blocks, %d of %d slots free", st.free_blocks, st.total_blocks,
                  st.free_slots, st.total_slots);
        k3_engine_job_shutdown(e);
    } else {
        k3_engine_job_worker(e);
    }
    /* CPU use of each rank over the run, which was mostly idle */
    double use[2] = {cpu_s() - c0, k3_now_s() - w0}, all[64][2];
    K3_CHECK(job.world <= 64, "at most 64 ranks");
    K3_CHECK_MPI(MPI_Gather(use, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, job.world_comm));
    if (job.rank == 0) {
        for (int r = 0; r < job.world; r++) {
            printf("# rank %d: %.2f s of CPU in %.2f s of wall time\n", r, all[r][0], all[r][1]);
            CHECK_MSG(all[r][0] < 0.5 * all[r][1], "rank %d used %.2f s of CPU in %.2f s mostly idle", r,
                      all[r][0], all[r][1]);
        }
    }
    k3_engine_job_free(e);
    k3_model_job_free(&mj);
    int rc = job.rank == 0 ? k3_test_summary() : 0;
    K3_CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, job.world_comm));
    k3_job_free(&job);
    return rc;
}
