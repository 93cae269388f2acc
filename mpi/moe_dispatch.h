/* moe_dispatch.h - MoE dispatch and combine across the expert-parallel group.
 *
 * Routed experts are spread over all W ranks in contiguous blocks: rank r owns
 * experts [r * per, (r + 1) * per) with per = ceil(n_experts / W). A token goes
 * to each destination rank at most once (rank-major deduplication: with top-16
 * of 896 over 8 ranks a token touches ~7 ranks, not 16 experts), carrying its
 * row (in the latent width for K3) and, per destination, the list of that
 * rank's experts it chose with their weights. The receiver applies its experts
 * and sends back one weighted partial sum per row; the origin adds the
 * partials of its destinations in rank order (deterministic).
 *
 * Three phases, as DeepEP splits them:
 *   1. layout   (local): who goes where, send order, per-row expert slots;
 *   2. counts   (all_to_all of W counts): how much each rank receives;
 *   3. dispatch (all_to_all_v of rows and slots) ... experts ... combine
 *      (all_to_all_v of partial sums back, then the weighted sum per token).
 *
 * Buffer layout, send side: rows are grouped by destination rank (rank 0's
 * rows first), inside a group in token order; `send_tok[i]` is the token of
 * send row i. Receive side: rows grouped by source rank in rank order. Each
 * row has `top_k` slots {expert_global, weight}; unused slots have expert -1. */
#ifndef K3_MPI_MOE_DISPATCH_H
#define K3_MPI_MOE_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "mpi/comm.h"

struct k3_moe_slot {
    int32_t expert;   /* global expert id, -1 if unused */
    float weight;     /* routing weight (after renormalisation and scaling) */
};

struct k3_moe_layout {
    int n_experts, world, rank, experts_per_rank;
    int n_tok, top_k;
    size_t n_send, n_recv;          /* rows */
    size_t *send_rows, *send_first; /* [world] */
    size_t *recv_rows, *recv_first; /* [world] */
    int32_t *send_tok;              /* [n_send] */
    struct k3_moe_slot *send_slots; /* [n_send * top_k] */
    struct k3_moe_slot *recv_slots; /* [n_recv * top_k] */
    /* byte scratch for the exchanges; grown on demand, kept across steps */
    size_t *bytes_scratch;          /* [4 * world] */
    void *send_buf, *recv_buf;
    size_t send_cap, recv_cap;
    size_t send_row_cap, send_slot_cap, recv_slot_cap;
};

void k3_moe_layout_init(struct k3_moe_layout *l, int n_experts, int world, int rank);
void k3_moe_layout_free(struct k3_moe_layout *l);

/* The rank that owns a global expert, and the expert's index on it. */
static inline int k3_moe_owner(const struct k3_moe_layout *l, int expert)
{
    return expert / l->experts_per_rank;
}
static inline int k3_moe_local(const struct k3_moe_layout *l, int expert)
{
    return expert - l->rank * l->experts_per_rank;
}
/* Experts this rank owns (the last ranks may own fewer, even none). */
int k3_moe_n_local(const struct k3_moe_layout *l);

/* Phase 1 + 2: topk_ids/topk_w are [n_tok, top_k]; every id must be in
 * [0, n_experts) (fatal otherwise: the router produced garbage). Collective. */
void k3_moe_plan(struct k3_moe_layout *l, struct k3_comm *c, const int32_t *topk_ids,
                 const float *topk_w, int n_tok, int top_k, const char *what);

/* Phase 3: rows of x ([n_tok] rows of row_bytes each, host memory) travel to
 * their destinations; on return recv holds [n_recv] rows of row_bytes and
 * l->recv_slots says which local experts and weights apply. Collective. */
void k3_moe_dispatch(struct k3_moe_layout *l, struct k3_comm *c, const void *x,
                     size_t row_bytes, void *recv, const char *what);

/* The way back: y_recv is [n_recv, dim] fp32, each row already the weighted
 * sum of this rank's experts for that row. out[n_tok, dim] = for each token,
 * the sum of its partials from every destination, in rank order (tokens that
 * chose no expert get 0). Collective. */
void k3_moe_combine(struct k3_moe_layout *l, struct k3_comm *c, const float *y_recv, int dim,
                    float *out, const char *what);

#endif
