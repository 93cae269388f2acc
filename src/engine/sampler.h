/* sampler.h - picking the next token from vocabulary-parallel logits with a
 * request's sampling parameters (struct k3_sampling, engine/step_plan.h).
 *
 * Each of the `tp` ranks of a group holds logits [v0, v0 + nv) of one token;
 * every rank of the group calls k3_sampler_pick with the same parameters and
 * gets the same token. Order of operations (vLLM's):
 *   1. penalties on the raw logits: repetition (prompt and output tokens:
 *      x > 0 ? x / r : x * r), then frequency (x -= f * count in the output)
 *      and presence (x -= p if the token is in the output);
 *   2. the token-mask hook (constrained decoding): sets banned logits to -inf;
 *   3. temperature 0: argmax (ties: lowest id); else x / T, then
 *   4. top-k, top-p over what top-k kept, min-p (p >= min_p * p_max);
 *   5. one draw u in [0, 1) by inverse CDF over the kept tokens in id order.
 *
 * The kept set is {x >= tau}, tau = max(tau_k, tau_p, tau_min): tau_k is the
 * k-th largest value, tau_p the value at which the mass in descending order
 * first reaches top_p. Tokens tied with tau are all kept (one rule on one rank
 * and on many, so the distribution is defined by the values alone).
 *
 * Exact distributed scheme: ranks all-gather (max, sum exp) for the softmax
 * and their 64 best (value, id); the merged list is the group's exact top 64.
 * tau_k (k <= 64) and tau_p (when the list holds the mass) come from that
 * list; if the kept set lies inside the list every rank draws from it with no
 * further exchange. Otherwise tau is found by bisection over the float order
 * (<= 32 all-gathers of one double: count or mass of {x >= t}), each rank
 * all-gathers its kept mass, and the rank whose slice holds u's token
 * reports it. No rank ever needs the whole row.
 *
 * Randomness: u = hash(seed, position of the new token), so a request's draws
 * depend on its seed and length only, never on the batch it runs in or on
 * how its prompt was chunked. logprob and top logprobs are those of the
 * model's own distribution (log-softmax of the raw logits). */
#ifndef K3_ENGINE_SAMPLER_H
#define K3_ENGINE_SAMPLER_H

#include <stdint.h>

#include "core/err.h"
#include "engine/step_plan.h"
#include "mpi/comm.h"

#define K3_SAMPLER_TOP_MAX K3_PLAN_TOP_MAX /* most top logprobs per token */
#define K3_SAMPLER_CAND 64      /* candidates each rank sends */

/* The constrained-decoding hook: sets logits of banned tokens in this rank's
 * slice [v0, v0 + nv) to -INFINITY. Called on every rank of the group. At
 * least one token of the vocabulary must stay allowed. */
struct k3_token_mask {
    void (*apply)(void *ctx, uint64_t seq_id, int64_t v0, int64_t nv, float *logits);
    void *ctx;
};

struct k3_sampler {
    int64_t v0, nv, vocab;      /* this rank's slice, and the whole vocabulary */
    struct k3_comm *comm;       /* the group; NULL when one rank holds it all */
    float *raw;                 /* [nv] the logits before penalties */
    int32_t *count;             /* [nv] occurrence counts (scratch, kept at 0) */
    uint8_t *seen;              /* [nv] in the prompt or output (scratch, kept at 0) */
    struct k3_token_mask mask;  /* apply == NULL: no mask */
};

/* What one request's history looks like to the penalties: hist[0, n_hist) are
 * the tokens so far, the first n_prompt of them the prompt. */
struct k3_sample_hist {
    const int32_t *tokens;
    int64_t n, n_prompt;
};

struct k3_sample_out {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_ids[K3_SAMPLER_TOP_MAX];
    float top_logprobs[K3_SAMPLER_TOP_MAX];
};

int k3_sampler_init(struct k3_sampler *s, int64_t v0, int64_t nv, int64_t vocab, struct k3_comm *comm,
                    struct k3_err *err);
void k3_sampler_free(struct k3_sampler *s);

/* The uniform draw of a request at a position: [0, 1), 53 bits. */
double k3_sampler_uniform(uint64_t seed, int64_t pos);

/* Collective over s->comm. x: this rank's logits (modified). pos: the
 * position the new token will have. hist may be NULL (no penalties). */
void k3_sampler_pick(struct k3_sampler *s, const struct k3_sampling *p, uint64_t seq_id, float *x,
                     const struct k3_sample_hist *hist, int64_t pos, struct k3_sample_out *out);

/* Reference on one rank (tests): the exact distribution the sampler draws
 * from, probs[V] over the whole vocabulary (after penalties and mask already
 * applied to x by the caller via k3_sampler_process_ref), and the token that
 * draw u picks from it. */
void k3_sampler_process_ref(const struct k3_sampling *p, float *x, int64_t V,
                            const struct k3_sample_hist *hist);
void k3_sampler_probs_ref(const struct k3_sampling *p, const float *x, int64_t V, double *probs);
int32_t k3_sampler_draw_ref(const double *probs, int64_t V, double u);

#endif
