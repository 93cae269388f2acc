/* step_exec.h - every rank runs the step that rank 0 planned.
 *
 * A rank runs the sequences of its attention group (prefill chunks and
 * decodes mixed) as one batched forward call (k3_forward_run_batch), each
 * sequence from the cache its KDA slot names, so the weights are read once
 * per step and not once per sequence; a group with no sequences in the step
 * calls k3_forward_idle once, so that all ranks make one forward call per
 * step (the MoE collectives span every rank). For each
 * K3_SEQ_SAMPLE sequence the group picks the next token from the last
 * position's logits (vocabulary-parallel when the forward keeps its logits
 * local: engine/sample_dist.h), its leader (tp rank 0) reports it, and rank 0
 * gathers them.
 *
 * Caches: one k3_seq_cache per KDA slot (KDA state and conv tails), and the
 * MLA latent rows of the whole group in one pool of n_blocks x block_tokens
 * rows per MLA layer (model/forward.h k3_mla_pool), read and written through
 * each sequence's block table in the plan; MLA memory is the pool, whatever
 * the number of sequences. With n_blocks 0 each slot has a contiguous MLA
 * cache of max_ctx rows instead (plans then need no block tables). Nothing
 * is allocated per step: every buffer is sized at init. Sampling is engine/sampler.h with
 * the sequence's parameters; each slot keeps the tokens it was fed (by
 * position) for the penalties, and `sampler.mask` is the token-mask hook. */
#ifndef K3_ENGINE_STEP_EXEC_H
#define K3_ENGINE_STEP_EXEC_H

#include "core/err.h"
#include "engine/sampler.h"
#include "engine/step_plan.h"
#include "model/forward.h"
#include "mpi/comm.h"
#include "mpi/groups.h"

struct k3_step_exec {
    const struct k3_model_config *cfg;
    struct k3_forward *fwd;
    const struct k3_groups *groups;
    struct k3_comm *tp_comm;      /* the group, for sampling over vocabulary slices */
    MPI_Comm world;
    struct k3_seq_cache *slots;   /* [n_slots] */
    int n_slots;
    struct k3_mla_pool pool;      /* paged MLA rows (pool.n_blocks 0: contiguous caches) */
    float *logits;                /* [n_slots, this rank's vocabulary slice]: a row per sampled sequence */
    struct k3_batch_seq *batch;   /* [n_slots] the group's sequences of a step */
    int64_t max_new;
    struct k3_sampled *mine;      /* [max sequences of a plan] */
    int mine_cap;
    struct k3_sampler sampler;    /* over this rank's vocabulary slice; .mask is the hook */
    int32_t *hist;                /* [n_slots, max_ctx] tokens each slot was fed, by position */
    int64_t max_ctx;
    int *gather_counts;           /* [2 x world size] k3_plan_gather_sampled's scratch */
};

struct k3_step_exec_size {
    int n_slots;                  /* KDA state slots of this rank's group */
    int64_t max_ctx;              /* longest sequence */
    int64_t max_new;              /* most new tokens of one sequence in a step */
    int64_t n_blocks;             /* MLA blocks of the group (0: contiguous caches per slot) */
    int64_t block_tokens;
};

int k3_step_exec_init(struct k3_step_exec *ex, const struct k3_model_config *cfg,
                      struct k3_forward *fwd, const struct k3_groups *groups, struct k3_comm *tp_comm,
                      MPI_Comm world, const struct k3_step_exec_size *size, struct k3_err *err);
void k3_step_exec_free(struct k3_step_exec *ex);

/* Runs the plan on this rank. On rank 0, `out` (capacity plan->n_seqs)
 * receives the sampled tokens and the return value is their count; other
 * ranks return 0. A sequence the plan gets wrong (slot, length, sampling) is
 * fatal: the plan is built by rank 0 and checked there first. */
int k3_step_exec_run(struct k3_step_exec *ex, const struct k3_step_plan *plan, struct k3_sampled *out);

#endif
