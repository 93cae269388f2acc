/* test_forward_dist.c - the sharded forward pass gives the single-rank answer.
 *
 *   mpirun -np W test_forward_dist CHECKPOINT_DIR TP ADP
 *
 * Every rank loads the checkpoint twice: in full (the single-rank reference,
 * run locally with no communication) and cut to its shard (tp x adp layout,
 * experts over all W ranks). Sequences of lengths 1..100 are dealt to the
 * attention groups unevenly (group 0 gets one more; with adp > 1 the last
 * round leaves the other groups idle), each run as a prefill and then greedy
 * decode steps. The workspace holds 16 tokens, so long prefills take several
 * slices and groups disagree on slice counts, which the forward must
 * reconcile. Checks: prefill and decode logits within 1e-5 of max|ref|, and
 * identical greedy continuations. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist_setup.h"
#include "k3_test_mpi.h"
#include "kernels/cpu/cpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/shard.h"
#include "model/weights.h"
#include "mpi/bootstrap.h"
#include "mpi/comm.h"
#include "mpi/groups.h"
#include "mpi/mpi_check.h"

#define N_DECODE 4
static const int lengths[] = {17, 1, 64, 5, 100, 33, 2, 9};
#define N_SEQS_MAX 8

static int32_t tok(int seq, int i, int64_t vocab) { return (int32_t)((seq * 7919 + i * 104729 + 13) % vocab); }

static int argmax(const float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int)i;
    return best;
}

int main(int argc, char **argv)
{
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    K3_CHECK(argc == 4, "usage: test_forward_dist CHECKPOINT_DIR TP ADP");
    int tp = atoi(argv[2]), adp = atoi(argv[3]);
    struct k3_err err;
    struct dist_setup ds;
    dist_setup_init(&ds, &job, argv[1], tp, adp);
    const struct k3_model_config *cfg = &ds.cfg;
    const struct k3_groups *g = &ds.g;
    struct k3_weights w_ref; /* the whole model, for the single-rank answer */
    if (k3_weights_load(cfg, ds.ck, &w_ref, &err)) K3_FATAL("%s", err.msg);
    int64_t dense, experts, dense_full, experts_full;
    k3_weights_shard_bytes(&ds.w, &dense, &experts);
    k3_weights_shard_bytes(&w_ref, &dense_full, &experts_full);
    /* this rank holds its 1/W of the experts (±1 expert per layer of rounding) */
    int per = (cfg->n_experts + job.world - 1) / job.world;
    CHECK_MSG(experts <= experts_full * per / cfg->n_experts + 1, "rank %d holds %lld expert bytes of %lld",
              job.rank, (long long)experts, (long long)experts_full);
    if (tp > 1) CHECK(dense < dense_full);

    struct k3_backend be;
    K3_CHECK(k3_cpu_backend_init(&be, 1) == 0, "no CPU backend");
    struct k3_forward_opts o_ref = {.max_tok = 512, .max_ctx = 256, .kda_chunk = 64, .mla_absorb = -1};
    struct k3_forward_opts o_sh = o_ref;
    o_sh.max_tok = 16;
    o_sh.par = &ds.par;
    struct k3_forward *f_ref, *f_sh;
    if (k3_forward_init(&f_ref, cfg, &w_ref, &be, &o_ref, &err) ||
        k3_forward_init(&f_sh, cfg, &ds.w, &be, &o_sh, &err))
        K3_FATAL("%s", err.msg);

    int64_t V = cfg->vocab_size;
    int n_seqs = adp == 1 ? 4 : 2 * adp + 1; /* group 0 gets one more sequence */
    if (n_seqs > N_SEQS_MAX) n_seqs = N_SEQS_MAX;
    int rounds = (n_seqs + adp - 1) / adp;
    float *lg_ref = malloc(sizeof(float) * (size_t)(128 * V)), *lg_sh = malloc(sizeof(float) * (size_t)(128 * V));
    struct k3_seq_cache c_ref, c_sh;
    if (k3_seq_cache_init(&c_ref, cfg, 256, &err) || k3_seq_cache_init(&c_sh, cfg, 256, &err))
        K3_FATAL("%s", err.msg);
    double worst = 0;
    int runs = 0, same_greedy = 1;
    for (int r = 0; r < rounds; r++) {
        int seq = r * adp + g->group; /* group g's sequence this round, if any */
        if (seq >= n_seqs) {
            for (int step = 0; step < 1 + N_DECODE; step++) K3_CHECK(k3_forward_idle(f_sh) == 0, "idle");
            continue;
        }
        int n = lengths[seq % 8];
        int32_t ids[128];
        for (int i = 0; i < n; i++) ids[i] = tok(seq, i, V);
        k3_seq_cache_reset(&c_ref, cfg);
        k3_seq_cache_reset(&c_sh, cfg);
        int32_t next_ref = 0, next_sh = 0;
        for (int step = 0; step < 1 + N_DECODE; step++) {
            const int32_t *in_ref = step ? &next_ref : ids, *in_sh = step ? &next_sh : ids;
            int64_t m = step ? 1 : n;
            if (k3_forward_run(f_ref, &c_ref, in_ref, m, lg_ref, &err) ||
                k3_forward_run(f_sh, &c_sh, in_sh, m, lg_sh, &err))
                K3_FATAL("%s", err.msg);
            double ref_max = 0, diff = 0;
            for (int64_t i = 0; i < m * V; i++) {
                if (fabs(lg_ref[i]) > ref_max) ref_max = fabs(lg_ref[i]);
                if (fabs(lg_ref[i] - lg_sh[i]) > diff) diff = fabs(lg_ref[i] - lg_sh[i]);
            }
            double rel = diff / (ref_max + 1e-30);
            if (rel > worst) worst = rel;
            /* fp32 partial sums in another order (all-reduce, combine): a few ulps */
            CHECK_MSG(rel <= 1e-5, "rank %d (tp %d x adp %d) seq %d step %d: max|Δ|/max|ref| = %.3g",
                      job.rank, tp, adp, seq, step, rel);
            next_ref = argmax(lg_ref + (m - 1) * V, V);
            next_sh = argmax(lg_sh + (m - 1) * V, V);
            same_greedy &= next_ref == next_sh;
            runs++;
        }
    }
    CHECK_MSG(same_greedy, "rank %d: greedy continuations differ", job.rank);
    CHECK(runs > 0 || g->group > 0);

    double all_worst;
    K3_CHECK_MPI(MPI_Reduce(&worst, &all_worst, 1, MPI_DOUBLE, MPI_MAX, 0, job.world_comm));
    long long bytes[2] = {dense, experts}, *all_bytes = malloc(sizeof bytes * (size_t)job.world);
    K3_CHECK_MPI(MPI_Gather(bytes, 2, MPI_LONG_LONG, all_bytes, 2, MPI_LONG_LONG, 0, job.world_comm));
    if (job.rank == 0) {
        printf("# tp %d x adp %d on %d ranks: worst max|Δ|/max|ref| %.3g (tolerance 1e-5: %.1f%% used)\n", tp,
               adp, job.world, all_worst, 100 * all_worst / 1e-5);
        for (int r = 0; r < job.world; r++)
            printf("# rank %d holds %lld dense + %lld expert bytes (full model: %lld + %lld)\n", r,
                   all_bytes[2 * r], all_bytes[2 * r + 1], (long long)dense_full, (long long)experts_full);
    }
    free(all_bytes);
    free(lg_ref);
    free(lg_sh);
    k3_seq_cache_free(&c_ref);
    k3_seq_cache_free(&c_sh);
    k3_forward_free(f_ref);
    k3_forward_free(f_sh);
    k3_cpu_backend_free(&be);
    k3_weights_free(&w_ref);
    dist_setup_free(&ds);
    int rc = k3_test_summary_all(job.world_comm);
    k3_job_free(&job);
    return rc;
}
