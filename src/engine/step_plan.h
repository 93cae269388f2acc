/* step_plan.h - what every rank does in one step, decided by rank 0.
 *
 * Rank 0's scheduler fills a plan (per attention group: sequences, their new
 * tokens, positions, KDA state slot, MLA block table, prefill or decode, what
 * to sample and capture), encodes it into one byte buffer and broadcasts it;
 * every rank decodes the same plan and runs the step. Groups with no
 * sequences still run the step (the MoE collectives need every rank).
 * Sampled tokens come back to rank 0 from each group's leader.
 *
 * Wire format (host byte order; the magic word catches a mixed-endian job):
 *   header  {magic u32, version u32, step u64, flags u32, n_groups i32,
 *            n_seqs i32, n_tokens i32, n_blocks i32, checksum u32}
 *   seqs    n_seqs  x struct k3_plan_seq (fixed-width fields, grouped by group)
 *   tokens  n_tokens x i32  (each sequence's new tokens, in sequence order)
 *   blocks  n_blocks x i32  (each sequence's MLA block table, in sequence order)
 * Decoding checks every count against the buffer size and the checksum, so a
 * corrupt or truncated plan is an error, never an out-of-bounds read. */
#ifndef K3_ENGINE_STEP_PLAN_H
#define K3_ENGINE_STEP_PLAN_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

enum {
    K3_SEQ_PREFILL = 1u << 0,  /* a prefill chunk (else one decode token) */
    K3_SEQ_SAMPLE = 1u << 1,   /* sample the next token after the last new one */
    K3_SEQ_CAPTURE = 1u << 2,  /* hand this sequence's hidden states to the dump hook */
    K3_SEQ_RESET = 1u << 3,    /* the KDA slot starts from a zero state */
};

enum {
    K3_STEP_SHUTDOWN = 1u << 0, /* leave the step loop after this plan */
};

/* Sampling parameters travel with the plan: lm_head is vocabulary-parallel,
 * so every rank of a group takes part in sampling. */
struct k3_sampling {
    float temperature;          /* 0 = greedy */
    float top_p, min_p;
    int32_t top_k;              /* 0 = off */
    float presence_penalty, frequency_penalty, repetition_penalty;
    int32_t n_logprobs;         /* top logprobs to return (0 = none) */
    uint64_t seed;
    int32_t n_prompt;           /* the request's prompt length: positions >= n_prompt are its output
                                 * (presence/frequency penalties count those; repetition counts all) */
};

struct k3_plan_seq {
    uint64_t seq_id;            /* rank 0's id for the request */
    int32_t group;              /* attention group that runs it */
    int32_t kda_slot;           /* KDA state slot in that group */
    int32_t pos0;               /* position of the first new token (tokens already cached) */
    int32_t n_new;              /* new tokens this step (>= 1) */
    int32_t n_blocks;           /* MLA block table length */
    uint32_t flags;             /* K3_SEQ_* */
    int32_t first_token;        /* index into tokens (filled by add/decode) */
    int32_t first_block;        /* index into blocks (filled by add/decode) */
    struct k3_sampling sampling;
};

struct k3_step_plan {
    uint64_t step;
    uint32_t flags;             /* K3_STEP_* */
    int n_groups;
    int n_seqs, n_tokens, n_blocks;
    struct k3_plan_seq *seqs;
    int32_t *tokens;
    int32_t *blocks;
    int32_t *group_first;       /* [n_groups + 1]: seqs of group g are [group_first[g], group_first[g+1]) */
    /* capacities, grown on demand (sized once from the scheduler's limits) */
    size_t seq_cap, tok_cap, blk_cap, grp_cap, buf_cap;
    uint8_t *buf;               /* encode/broadcast scratch */
};

void k3_plan_init(struct k3_step_plan *p);
void k3_plan_free(struct k3_step_plan *p);
void k3_plan_reset(struct k3_step_plan *p, uint64_t step, int n_groups);

/* Appends a sequence; sequences must come in nondecreasing group order.
 * Returns -1 (with a message) for a bad group order, group id or count. */
int k3_plan_add(struct k3_step_plan *p, const struct k3_plan_seq *seq, const int32_t *tokens,
                const int32_t *blocks, struct k3_err *err);

/* Encodes into p->buf; returns the byte count. */
size_t k3_plan_encode(struct k3_step_plan *p);
/* Decodes buf into p (replacing its contents). */
int k3_plan_decode(struct k3_step_plan *p, const uint8_t *buf, size_t n, struct k3_err *err);

/* Collective over comm: root's plan reaches every rank. A plan that does not
 * decode is fatal (a bug or corrupted memory, not bad user input). */
void k3_plan_bcast(struct k3_step_plan *p, MPI_Comm comm, int root);
/* The same for a step loop that can sit idle for hours: the non-root ranks
 * wait for the plan with MPI_Ibcast + MPI_Test and a sleeping back-off
 * (no core burnt, no collective watchdog involved; a dead root still ends
 * the job through mpirun). Every rank of comm must use this one, never mixed
 * with k3_plan_bcast for the same plan (a nonblocking broadcast does not
 * match a blocking one). */
void k3_plan_bcast_idle(struct k3_step_plan *p, MPI_Comm comm, int root);

#define K3_PLAN_TOP_MAX 20      /* most top logprobs per sampled token */

/* One sampled token of a K3_SEQ_SAMPLE sequence. */
struct k3_sampled {
    int32_t seq;                /* index into plan->seqs */
    int32_t token;
    float logprob;              /* of the model's distribution (raw logits) */
    int32_t n_top;              /* top logprobs asked for (sampling.n_logprobs, capped) */
    int32_t top_ids[K3_PLAN_TOP_MAX];
    float top_logprobs[K3_PLAN_TOP_MAX];
};

/* Collective over comm: every rank passes what it sampled (group leaders
 * pass their group's tokens, others pass n = 0); root receives all of them in
 * `all` (capacity plan->n_seqs) and the count. scratch: [2 x comm size] ints
 * on root, so that a step allocates nothing (NULL: allocated per call). */
int k3_plan_gather_sampled(const struct k3_step_plan *p, MPI_Comm comm, int root,
                           const struct k3_sampled *mine, int n, struct k3_sampled *all, int *scratch);

#endif
