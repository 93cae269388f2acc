/* test_step_exec.c - plans from rank 0 drive every rank.
 *
 *   mpirun -np W test_step_exec CHECKPOINT_DIR TP ADP
 *
 * Rank 0 plays scheduler: it deals five prompts to the attention groups
 * (unevenly), plans a prefill step and then greedy decode steps, broadcasts
 * each plan, and appends the sampled tokens that come back. In one step only
 * group 0's sequences run (the other groups idle, then resume from their
 * caches). Rank 0 then runs the same prompts greedily on the full weights,
 * alone, and the token sequences must be identical. A second pass samples
 * (temperature, top-k, top-p, penalties, seeds) all together and then each
 * sequence alone: the draws must not depend on the batch. The MLA rows live
 * in the executor's block pool: the sequences' block tables interleave
 * (block b of sequence i is b * N_SEQ + N_SEQ - 1 - i), while the reference
 * uses one contiguous cache. */
#include <stdlib.h>
#include <string.h>

#include "engine/step_exec.h"
#include "engine/step_plan.h"
#include "dist_setup.h"
#include "k3_test.h"
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

enum { N_SEQ = 5, N_GEN = 5, MAX_LEN = 80, BT = 8, SEQ_BLOCKS = MAX_LEN / BT };
static const int prompt_len[N_SEQ] = {7, 30, 1, 12, 45};

struct seq { int group, slot, len; int32_t toks[MAX_LEN]; };

static void greedy_ref(const struct k3_model_config *cfg, struct k3_forward *f, const struct seq *s0,
                       int32_t *gen)
{
    struct k3_seq_cache c;
    struct k3_err err;
    float *lg = malloc(sizeof(float) * (size_t)(MAX_LEN * cfg->vocab_size));
    K3_CHECK(lg && !k3_seq_cache_init(&c, cfg, MAX_LEN, &err), "reference setup");
    K3_CHECK(!k3_forward_run(f, &c, s0->toks, s0->len, lg, &err), "%s", err.msg);
    const float *last = lg + (s0->len - 1) * cfg->vocab_size;
    for (int i = 0; i < N_GEN; i++) {
        int32_t best = 0;
        for (int64_t v = 1; v < cfg->vocab_size; v++)
            if (last[v] > last[best]) best = (int32_t)v;
        gen[i] = best;
        if (i + 1 < N_GEN) {
            K3_CHECK(!k3_forward_run(f, &c, &gen[i], 1, lg, &err), "%s", err.msg);
            last = lg;
        }
    }
    k3_seq_cache_free(&c);
    free(lg);
}

/* Rank 0: plans steps until every sequence in `only` (-1: all) has N_GEN
 * tokens; sampling parameters from `smp` with seed + sequence index. */
static void drive(struct k3_step_exec *ex, struct k3_step_plan *plan, MPI_Comm world, int adp, const struct seq *seqs,
                  int32_t (*gen)[N_GEN], int only, const struct k3_sampling *smp)
{
    struct k3_err err;
    int n_gen[N_SEQ] = {0};
    struct k3_sampled got[N_SEQ];
    for (int step = 0; step < N_GEN + 1; step++) {
        k3_plan_reset(plan, (uint64_t)step, adp);
        /* step 2: only group 0 runs; the others wait a step */
        int pause = step == 2 && adp > 1;
        for (int gr = 0; gr < adp; gr++)
            for (int i = 0; i < N_SEQ; i++) {
                if ((only >= 0 && i != only) || seqs[i].group != gr || n_gen[i] == N_GEN || (pause && gr > 0))
                    continue;
                struct k3_plan_seq s = {.seq_id = (uint64_t)i, .group = gr, .kda_slot = seqs[i].slot,
                                        .flags = K3_SEQ_SAMPLE, .sampling = *smp};
                s.sampling.seed += (uint64_t)i;
                s.sampling.n_prompt = seqs[i].len;
                const int32_t *in;
                if (n_gen[i] == 0) {
                    s.flags |= K3_SEQ_PREFILL | K3_SEQ_RESET;
                    s.pos0 = 0;
                    s.n_new = seqs[i].len;
                    in = seqs[i].toks;
                } else {
                    s.pos0 = seqs[i].len + n_gen[i] - 1;
                    s.n_new = 1;
                    in = &gen[i][n_gen[i] - 1];
                }
                int32_t table[SEQ_BLOCKS];
                s.n_blocks = (s.pos0 + s.n_new + BT - 1) / BT;
                for (int b = 0; b < s.n_blocks; b++) table[b] = b * N_SEQ + N_SEQ - 1 - i;
                K3_CHECK(k3_plan_add(plan, &s, in, table, &err) == 0, "%s", err.msg);
            }
        if (plan->n_seqs == 0 && pause) continue; /* a lone sequence of a paused group */
        if (plan->n_seqs == 0) break;
        k3_plan_bcast(plan, world, 0);
        int n = k3_step_exec_run(ex, plan, got);
        for (int j = 0; j < n; j++) {
            int i = (int)plan->seqs[got[j].seq].seq_id;
            gen[i][n_gen[i]++] = got[j].token;
            CHECK(got[j].logprob <= 0);
            CHECK(got[j].n_top == smp->n_logprobs);
        }
    }
    for (int i = 0; i < N_SEQ; i++)
        CHECK_MSG((only >= 0 && i != only) || n_gen[i] == N_GEN, "sequence %d produced %d of %d tokens", i, n_gen[i], N_GEN);
}

int main(int argc, char **argv)
{
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    K3_CHECK(argc == 4, "usage: test_step_exec CHECKPOINT_DIR TP ADP");
    int tp = atoi(argv[2]), adp = atoi(argv[3]);
    struct k3_err err;
    struct dist_setup ds;
    dist_setup_init(&ds, &job, argv[1], tp, adp);
    const struct k3_model_config *cfgp = &ds.cfg;
    struct k3_backend be;
    K3_CHECK(k3_cpu_backend_init(&be, 1) == 0, "no CPU backend");
    /* logits stay vocabulary-parallel: tokens are picked across the group */
    struct k3_forward_opts opts = {.max_tok = 24, .max_ctx = MAX_LEN, .kda_chunk = 64, .mla_absorb = -1,
                                   .par = &ds.par, .vocab_local = 1};
    struct k3_forward *f;
    struct k3_step_exec ex;
    if (k3_forward_init(&f, cfgp, &ds.w, &be, &opts, &err) ||
        k3_step_exec_init(&ex, cfgp, f, &ds.g, &ds.tp_comm, job.world_comm,
                          &(struct k3_step_exec_size){.n_slots = N_SEQ, .max_ctx = MAX_LEN, .max_new = MAX_LEN,
                                                      .n_blocks = N_SEQ * SEQ_BLOCKS, .block_tokens = BT},
                          &err))
        K3_FATAL("%s", err.msg);

    struct k3_step_plan plan;
    k3_plan_init(&plan);
    struct seq seqs[N_SEQ];
    int32_t gen[N_SEQ][N_GEN];
    if (job.rank == 0) {
        for (int i = 0; i < N_SEQ; i++) {
            /* group 0 gets sequences 0, 1 and 4 when adp = 2: uneven counts */
            seqs[i].group = adp == 1 ? 0 : (i == 4 ? 0 : i % adp);
            seqs[i].slot = i;
            seqs[i].len = prompt_len[i];
            for (int t = 0; t < prompt_len[i]; t++)
                seqs[i].toks[t] = (int32_t)((i * 131 + t * 71 + 5) % cfgp->vocab_size);
        }
        struct k3_sampling greedy = {0};
        drive(&ex, &plan, job.world_comm, adp, seqs, gen, -1, &greedy);
        /* seeded sampling: together and each alone draw the same tokens */
        struct k3_sampling hot = {.temperature = 0.9f, .top_p = 0.95f, .top_k = 40, .repetition_penalty = 1.1f,
                                  .presence_penalty = 0.3f, .n_logprobs = 3, .seed = 1234};
        int32_t hot_all[N_SEQ][N_GEN], hot_one[N_SEQ][N_GEN];
        drive(&ex, &plan, job.world_comm, adp, seqs, hot_all, -1, &hot);
        for (int i = 0; i < N_SEQ; i++) drive(&ex, &plan, job.world_comm, adp, seqs, hot_one, i, &hot);
        int differ = 0;
        for (int i = 0; i < N_SEQ; i++) {
            CHECK_MSG(!memcmp(hot_all[i], hot_one[i], sizeof hot_all[i]),
                      "sequence %d: seeded draws depend on the batch (%d %d vs %d %d)", i, hot_all[i][0],
                      hot_all[i][1], hot_one[i][0], hot_one[i][1]);
            differ |= memcmp(hot_all[i], gen[i], sizeof hot_all[i]) != 0;
        }
        CHECK_MSG(differ, "sampling at temperature 0.9 drew the greedy tokens for every sequence");
        k3_plan_reset(&plan, 999, adp);
        plan.flags = K3_STEP_SHUTDOWN;
        k3_plan_bcast(&plan, job.world_comm, 0);
    } else {
        struct k3_sampled none[1];
        for (;;) {
            k3_plan_bcast(&plan, job.world_comm, 0);
            if (plan.flags & K3_STEP_SHUTDOWN) break;
            k3_step_exec_run(&ex, &plan, none);
        }
    }
    if (job.rank == 0) {
        /* the reference: the full weights on this rank alone */
        struct k3_weights wf;
        struct k3_forward *fr;
        struct k3_forward_opts ro = {.max_tok = 512, .max_ctx = MAX_LEN, .kda_chunk = 64, .mla_absorb = -1};
        if (k3_weights_load(cfgp, ds.ck, &wf, &err) || k3_forward_init(&fr, cfgp, &wf, &be, &ro, &err))
            K3_FATAL("%s", err.msg);
        for (int i = 0; i < N_SEQ; i++) {
            int32_t want[N_GEN];
            greedy_ref(cfgp, fr, &seqs[i], want);
            CHECK_MSG(!memcmp(want, gen[i], sizeof want), "sequence %d (group %d): greedy tokens differ from "
                      "one rank's (%d %d %d ... vs %d %d %d ...)", i, seqs[i].group, gen[i][0], gen[i][1],
                      gen[i][2], want[0], want[1], want[2]);
        }
        k3_forward_free(fr);
        k3_weights_free(&wf);
        printf("# tp %d x adp %d: %d sequences, %d greedy tokens each, planned on rank 0\n", tp, adp, N_SEQ, N_GEN);
    }
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
