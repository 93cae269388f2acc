/* test_forward_batch.c - k3_forward_run_batch (several sequences in one call)
 * gives what running the sequences one at a time gives.
 *
 *   mpirun -np W test_forward_batch CHECKPOINT_DIR TP ADP
 *
 * Five sequences per attention group go through six steps that mix prefill
 * chunks of different lengths (one that samples nothing), single-token
 * decodes and a 40-token prefill beside decodes; with adp > 1 the odd groups
 * sit one step out (their batched call is then k3_forward_idle, matched by
 * the even groups' batch). The reference runs every sequence of a step alone
 * (k3_forward_run_last) on contiguous caches, the other groups padding with
 * k3_forward_idle as the executor did. The batched runs: contiguous and
 * paged (blocks of 8 interleaved over the sequences) caches, with 64-token
 * slices (no sequence crosses one) and 16-token slices (the 40-token
 * prefill runs as 16 + 16 + 8 beside other sequences, and a sequence that
 * does not fit in a slice's rest moves to the next, so each is cut as it is
 * alone with the same slice size). The CPU kernels compute each row alone,
 * so the logits must be bitwise equal (one exception below, under tp > 1).
 * The sampled rows of every step are compared; the next input token is the
 * reference's greedy pick, fed to both runs. With more than one rank the
 * model is sharded (tp x adp, experts over all ranks) and the logits are
 * this rank's vocabulary slice. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist_setup.h"
#include "k3_test_mpi.h"
#include "kernels/cpu/cpu.h"
#include "model/forward.h"
#include "mpi/mpi_check.h"

enum { N_SEQ = 5, N_STEP = 6, CTX = 64, BT = 8, N_BLK = CTX / BT };

static const int prompt_len[N_SEQ] = {5, 19, 1, 3, 40};
/* new tokens per step and sequence; prompt tokens first, then decodes */
static const int sched[N_STEP][N_SEQ] = {
    {5, 12, 1, 0, 0}, {1, 7, 1, 3, 0}, {1, 1, 1, 1, 40}, {1, 1, 0, 1, 1}, {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1},
};

struct seq {
    int32_t toks[CTX];         /* prompt, then the fed continuations */
    int n_done;                /* tokens already run */
    int32_t blocks[N_BLK];     /* paged runs: its block table */
};

/* The greedy token over the group's vocabulary slices (the lowest id of a tie). */
static int32_t argmax_group(const float *x, int64_t n, int64_t v0, MPI_Comm tp_comm)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    struct { float v; int i; } mine = {n ? x[best] : -INFINITY, (int)(v0 + best)}, all;
    K3_CHECK_MPI(MPI_Allreduce(&mine, &all, 1, MPI_FLOAT_INT, MPI_MAXLOC, tp_comm));
    return all.i;
}

/* The row of step `st` of group `grp`: odd groups of adp > 1 skip step 2. */
static const int *step_row(int st, int grp, int adp)
{
    static const int none[N_SEQ];
    if (adp > 1 && grp % 2) return st == 2 ? none : sched[st < 2 ? st : st - 1];
    return sched[st < N_STEP - 1 ? st : N_STEP - 1];
}

struct variant {
    const char *name;
    int64_t max_tok;
    int paged;
    double tol;                /* of max|ref|; 0: bitwise */
};

int main(int argc, char **argv)
{
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    K3_CHECK(argc == 4, "usage: test_forward_batch CHECKPOINT_DIR TP ADP");
    int tp = atoi(argv[2]), adp = atoi(argv[3]);
    struct k3_err err;
    struct dist_setup ds;
    dist_setup_init(&ds, &job, argv[1], tp, adp);
    const struct k3_model_config *cfg = &ds.cfg;
    const struct k3_groups *g = &ds.g;
    /* one rank: the unsharded path (moe_block, no collectives) */
    const struct k3_model_par *par = job.world > 1 ? &ds.par : NULL;
    struct k3_backend be;
    K3_CHECK(k3_cpu_backend_init(&be, 1) == 0, "no CPU backend");

    static const struct variant vars[] = {
        {"contiguous, 64-token slices", 64, 0, 0},
        {"paged, 64-token slices", 64, 1, 0},
        {"contiguous, 16-token slices", 16, 0, 0},
        {"paged, 16-token slices", 16, 1, 0},
    };
    /* Bitwise is expected where every row's sums keep their order. Not so
     * for Kimi Linear's MoE under tp > 1: its routed rows are added to the
     * partial sum of the tp rank that routed them (moe_ep.c) before the
     * all-reduce, and a lone token is always tp rank 0's while a batch deals
     * its rows over the group, so (routed + shared_0) + shared_1 becomes
     * shared_0 + (routed + shared_1) for some rows: fp32 rounding. (K3's
     * latent MoE splits W_up by columns on every rank, so the order holds.) */
    int latent = 0;
    for (int l = 0; l < cfg->n_layers; l++) latent |= ds.w.layers[l].moe.latent_down.data != NULL;
    int exact = !par || tp == 1 || latent;
    struct k3_forward_opts o_ref = {.max_tok = 64, .max_ctx = CTX, .kda_chunk = 64, .mla_absorb = -1, .par = par,
                                    .vocab_local = 1};
    long long v0, v1; /* this rank's vocabulary slice, as the forward keeps it */
    if (par && tp > 1) k3_split(cfg->vocab_size, tp, g->tp_rank, &v0, &v1);
    else v0 = 0, v1 = cfg->vocab_size;
    int64_t nv = v1 - v0;
    float *lg_ref = malloc(sizeof(float) * (size_t)(N_SEQ * 64 * nv));
    float *lg_bat = malloc(sizeof(float) * (size_t)(N_SEQ * nv));
    K3_CHECK(lg_ref && lg_bat, "out of memory");

    for (size_t vi = 0; vi < sizeof vars / sizeof vars[0]; vi++) {
        const struct variant *v = &vars[vi];
        double tol = v->tol ? v->tol : exact ? 0 : 1e-5;
        struct k3_forward_opts o = o_ref;
        o.max_tok = v->max_tok;
        struct k3_forward *f_ref, *f_bat;
        if (k3_forward_init(&f_ref, cfg, &ds.w, &be, &o, &err) || k3_forward_init(&f_bat, cfg, &ds.w, &be, &o, &err))
            K3_FATAL("%s", err.msg);
        int64_t fv0, fv1;
        k3_forward_vocab_range(f_bat, &fv0, &fv1);
        K3_CHECK(fv0 == v0 && fv1 == v1, "vocabulary slice [%lld, %lld)", (long long)fv0, (long long)fv1);
        struct k3_mla_pool pool = {0};
        if (v->paged && k3_mla_pool_init(&pool, cfg, N_SEQ * N_BLK, BT, &err)) K3_FATAL("%s", err.msg);
        struct seq seqs[N_SEQ];
        struct k3_seq_cache c_ref[N_SEQ], c_bat[N_SEQ];
        for (int s = 0; s < N_SEQ; s++) {
            memset(&seqs[s], 0, sizeof seqs[s]);
            for (int t = 0; t < prompt_len[s]; t++)
                seqs[s].toks[t] = (int32_t)((g->group * 7919 + s * 104729 + t * 613 + 13) % cfg->vocab_size);
            for (int b = 0; b < N_BLK; b++) seqs[s].blocks[b] = b * N_SEQ + (N_SEQ - 1 - s);
            if (k3_seq_cache_init(&c_ref[s], cfg, CTX, &err) ||
                (v->paged ? k3_seq_cache_init_paged(&c_bat[s], cfg, &pool, &err)
                          : k3_seq_cache_init(&c_bat[s], cfg, CTX, &err)))
                K3_FATAL("%s", err.msg);
            if (v->paged) {
                c_bat[s].blocks = seqs[s].blocks;
                c_bat[s].n_blocks = N_BLK;
            }
        }
        double worst = 0;
        int rows_cmp = 0, bitwise = 1;
        for (int st = 0; st < N_STEP; st++) {
            const int *row = step_row(st, g->group, adp);
            /* the most sequences any group runs this step (the reference's calls) */
            int most = 0, count = 0;
            for (int grp = 0; grp < adp; grp++) {
                int c = 0;
                for (int s = 0; s < N_SEQ; s++) c += step_row(st, grp, adp)[s] > 0;
                if (c > most) most = c;
            }
            struct k3_batch_seq batch[N_SEQ];
            int order[N_SEQ], sampled[N_SEQ], n_sampled = 0;
            /* plan order: reversed on odd steps (any order is a valid plan) */
            for (int j = 0; j < N_SEQ; j++) {
                int s = st % 2 ? N_SEQ - 1 - j : j;
                if (!row[s]) continue;
                struct seq *q = &seqs[s];
                int samples = q->n_done + row[s] >= prompt_len[s];
                order[count] = s;
                batch[count] = (struct k3_batch_seq){.cache = &c_bat[s], .ids = q->toks + q->n_done, .n = row[s],
                                                     .logits_from = samples ? row[s] - 1 : row[s]};
                if (samples) sampled[n_sampled++] = s;
                count++;
            }
            /* Reference: one call per sequence, idle calls up to the busiest group. */
            int32_t next[N_SEQ];
            float *ref_row[N_SEQ];
            for (int j = 0; j < most; j++) {
                if (j >= count) {
                    K3_CHECK(k3_forward_idle(f_ref) == 0, "idle");
                    continue;
                }
                int s = order[j];
                int64_t rows = k3_forward_run_last(f_ref, &c_ref[s], batch[j].ids, batch[j].n, lg_ref + j * 64 * nv, &err);
                K3_CHECK(rows > 0, "%s", err.msg);
                ref_row[s] = lg_ref + (j * 64 + rows - 1) * nv;
            }
            /* Batched: one call per group (or idle). */
            if (count) {
                int64_t got = k3_forward_run_batch(f_bat, batch, count, lg_bat, &err);
                K3_CHECK(got >= 0, "%s", err.msg);
                CHECK_MSG(got == n_sampled, "step %d: %lld logit rows for %d sampled sequences", st, (long long)got,
                          n_sampled);
            } else {
                K3_CHECK(k3_forward_idle(f_bat) == 0, "idle");
            }
            for (int j = 0; j < n_sampled; j++) {
                int s = sampled[j];
                const float *a = ref_row[s], *b = lg_bat + j * nv;
                double ref_max = 0, diff = 0;
                for (int64_t i = 0; i < nv; i++) {
                    if (fabs(a[i]) > ref_max) ref_max = fabs(a[i]);
                    if (fabs(a[i] - b[i]) > diff) diff = fabs(a[i] - b[i]);
                }
                double rel = diff / (ref_max + 1e-30);
                if (rel > worst) worst = rel;
                bitwise &= memcmp(a, b, sizeof(float) * (size_t)nv) == 0;
                CHECK_MSG(tol ? rel <= tol : !memcmp(a, b, sizeof(float) * (size_t)nv),
                          "%s, rank %d, step %d, sequence %d: max|Δ|/max|ref| = %.3g", v->name, job.rank, st, s,
                          rel);
                rows_cmp++;
                next[s] = argmax_group(a, nv, v0, g->tp_comm);
            }
            for (int j = 0; j < count; j++) {
                int s = order[j];
                seqs[s].n_done += row[s];
                CHECK(c_ref[s].n_past == seqs[s].n_done && c_bat[s].n_past == seqs[s].n_done);
            }
            for (int j = 0; j < n_sampled; j++) {
                int s = sampled[j];
                if (seqs[s].n_done < CTX) seqs[s].toks[seqs[s].n_done] = next[s];
            }
        }
        /* Bad input: a sequence named twice is refused on every rank, nothing run. */
        struct k3_batch_seq twice[2] = {{.cache = &c_bat[0], .ids = seqs[0].toks, .n = 1, .logits_from = 1},
                                        {.cache = &c_bat[0], .ids = seqs[0].toks, .n = 1, .logits_from = 1}};
        int64_t past = c_bat[0].n_past;
        CHECK(k3_forward_run_batch(f_bat, twice, g->group == 0 ? 2 : 0, NULL, &err) == -1 &&
              c_bat[0].n_past == past);
        double all_worst;
        int all_bitwise, all_rows;
        K3_CHECK_MPI(MPI_Reduce(&worst, &all_worst, 1, MPI_DOUBLE, MPI_MAX, 0, job.world_comm));
        K3_CHECK_MPI(MPI_Reduce(&bitwise, &all_bitwise, 1, MPI_INT, MPI_MIN, 0, job.world_comm));
        K3_CHECK_MPI(MPI_Reduce(&rows_cmp, &all_rows, 1, MPI_INT, MPI_SUM, 0, job.world_comm));
        if (job.rank == 0)
            printf("# %s, tp %d x adp %d: %d sampled rows, %s (required: %s), worst max|Δ|/max|ref| %.3g "
                   "(%.1f%% of the tolerance used)\n", v->name, tp, adp, all_rows,
                   all_bitwise ? "bitwise equal" : "not bitwise", tol ? "1e-5" : "bitwise", all_worst,
                   tol ? 100 * all_worst / tol : 0.0);
        for (int s = 0; s < N_SEQ; s++) {
            k3_seq_cache_free(&c_ref[s]);
            k3_seq_cache_free(&c_bat[s]);
        }
        if (v->paged) k3_mla_pool_free(&pool);
        k3_forward_free(f_bat);
        k3_forward_free(f_ref);
    }
    free(lg_ref);
    free(lg_bat);
    k3_cpu_backend_free(&be);
    dist_setup_free(&ds);
    int rc = k3_test_summary_all(job.world_comm);
    k3_job_free(&job);
    return rc;
}
