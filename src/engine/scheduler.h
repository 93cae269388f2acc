/* scheduler.h - rank 0's serving loop: requests in, step plans out.
 *
 * Lifecycle: queued -> prefilling -> decoding -> finished (stop, length,
 * cancelled) or rejected. Every step, per attention group, under a budget of
 * max_batch_tokens new tokens and max_seqs sequences:
 *   1. decodes of running sequences (one token each) come first;
 *   2. prefills in progress continue, at most prefill_chunk tokens each
 *      (chunked prefill mixed with the decodes);
 *   3. queued requests are admitted in arrival order (continuous batching)
 *      into the group with the most budget left that has a free KDA slot
 *      and MLA blocks for the first chunk (balancing tokens per step, since
 *      the slowest group sets the step time).
 * MLA latent memory is counted in blocks of block_tokens per group; a
 * sequence holds ceil(cached tokens / block_tokens) blocks. When a decode or
 * prefill needs a block and none is free, the group's most recently admitted
 * running request is preempted: its slot and blocks are freed and it goes to
 * the front of the queue, to be recomputed from its prompt and the tokens
 * it already produced (greedy outputs are unchanged; seeded draws too, since
 * a draw depends on the seed and position only).
 *
 * Threads: k3_sched_submit / k3_sched_cancel / k3_sched_stats may be called
 * from any thread and never wait for a step (they take a short lock on an
 * inbox); the step thread calls k3_sched_build and k3_sched_complete and runs
 * the callbacks. Nothing is allocated per step (submit allocates the
 * request). When idle, the step thread sleeps in k3_sched_wait until a
 * submit or cancel signals it.
 *
 * Steps are not overlapped: plan t+1 is built after step t's tokens came
 * back (k3_sched_complete), since every decoding sequence's next input and
 * its finish depend on them. src/engine/README.md gives the measured reason
 * (0.04-0.13 ms of rank-0 work per step at 256 sequences) and how the
 * SGLang-style overlap would fit (the plan names "the token sampled last
 * step" for a slot; finishes detected one step late). */
#ifndef K3_ENGINE_SCHEDULER_H
#define K3_ENGINE_SCHEDULER_H

#include <pthread.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/step_plan.h"

struct k3_sched_limits {
    int n_groups;
    int max_batch_tokens;   /* new tokens per group per step */
    int max_seqs;           /* running sequences per group */
    int prefill_chunk;      /* largest prefill chunk of one sequence per step */
    int max_queue;          /* queued requests; submit refuses beyond */
    int context_tokens;     /* prompt + output limit */
    int kda_slots;          /* KDA state slots per group */
    int block_tokens;       /* tokens per MLA block */
    int n_blocks;           /* MLA blocks per group */
};

enum k3_finish {
    K3_FINISH_STOP = 1,     /* a stop id, or on_token asked to stop (stop strings) */
    K3_FINISH_LENGTH,       /* max_tokens or the context */
    K3_FINISH_CANCELLED,
    K3_FINISH_REJECTED,     /* never ran: too long for the context */
};

const char *k3_finish_name(enum k3_finish f);

struct k3_sched_usage {
    int prompt_tokens, completion_tokens, preemptions;
};

/* Called on the step thread. on_token returns nonzero to finish the request
 * with K3_FINISH_STOP after this token (stop strings live with the caller,
 * which detokenizes). */
struct k3_sched_callbacks {
    int (*on_token)(void *ctx, uint64_t id, const struct k3_sampled *tok);
    void (*on_finish)(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *usage);
    void *ctx;
};

struct k3_sched_request {
    const int32_t *prompt;  /* copied by submit */
    int n_prompt;
    int max_tokens;         /* 0: up to the context */
    struct k3_sampling sampling;
    int32_t stop_ids[8];
    int n_stop_ids;
    struct k3_sched_callbacks cb;
};

struct k3_sched_stats {
    uint64_t steps, submitted, finished, cancelled, rejected, preemptions;
    uint64_t prefill_tokens, decode_tokens;
    int queued, running;
    int free_slots, free_blocks;          /* summed over groups */
    int total_slots, total_blocks;
};

struct k3_req;
struct k3_sched;

int k3_sched_init(struct k3_sched **s, const struct k3_sched_limits *lim, struct k3_err *err);
void k3_sched_free(struct k3_sched *s);

/* Any thread. Returns the request id (> 0), or 0 with a message when the
 * queue is full or the request is malformed. */
uint64_t k3_sched_submit(struct k3_sched *s, const struct k3_sched_request *r, struct k3_err *err);
/* Any thread; takes effect at the next step. Unknown ids are ignored. */
void k3_sched_cancel(struct k3_sched *s, uint64_t id);
void k3_sched_stats(struct k3_sched *s, struct k3_sched_stats *out);

/* Step thread: the plan for the next step (empty when idle). */
void k3_sched_build(struct k3_sched *s, struct k3_step_plan *plan);
/* Step thread: the step's sampled tokens (k3_step_exec_run's `out`). */
void k3_sched_complete(struct k3_sched *s, const struct k3_step_plan *plan, const struct k3_sampled *got, int n);
/* Whether any request is queued or running (or waits in the inbox). */
int k3_sched_busy(struct k3_sched *s);
/* Step thread, when idle: sleeps until a submit or cancel arrives or
 * timeout_s passes (a condition variable, no spinning); returns
 * k3_sched_busy. */
int k3_sched_wait(struct k3_sched *s, double timeout_s);

#endif
