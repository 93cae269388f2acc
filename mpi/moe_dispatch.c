/* moe_dispatch.c - see moe_dispatch.h for the layout and the phases. */
#include "mpi/moe_dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/log.h"

void k3_moe_layout_init(struct k3_moe_layout *l, int n_experts, int world, int rank)
{
    memset(l, 0, sizeof *l);
    K3_CHECK(n_experts >= 1 && world >= 1 && rank >= 0 && rank < world,
             "bad expert layout: %d experts, rank %d of %d", n_experts, rank, world);
    l->n_experts = n_experts;
    l->world = world;
    l->rank = rank;
    l->experts_per_rank = (n_experts + world - 1) / world;
    size_t *v = calloc(8 * (size_t)world, sizeof *v);
    K3_CHECK(v, "out of memory");
    l->send_rows = v;
    l->send_first = v + world;
    l->recv_rows = v + 2 * world;
    l->recv_first = v + 3 * world;
    l->bytes_scratch = v + 4 * world;
}

void k3_moe_layout_free(struct k3_moe_layout *l)
{
    free(l->send_rows);
    free(l->send_tok);
    free(l->send_slots);
    free(l->recv_slots);
    free(l->send_buf);
    free(l->recv_buf);
    memset(l, 0, sizeof *l);
}

int k3_moe_n_local(const struct k3_moe_layout *l)
{
    int first = l->rank * l->experts_per_rank;
    int last = first + l->experts_per_rank;
    if (last > l->n_experts) last = l->n_experts;
    return last > first ? last - first : 0;
}

void k3_moe_plan(struct k3_moe_layout *l, struct k3_comm *c, const int32_t *topk_ids,
                 const float *topk_w, int n_tok, int top_k, const char *what)
{
    int W = l->world;
    K3_CHECK(c->size == W && c->rank == l->rank, "%s: communicator (%d of %d) does not match "
             "the expert layout (%d of %d)", what, c->rank, c->size, l->rank, W);
    l->n_tok = n_tok;
    l->top_k = top_k;
    /* Phase 1: count distinct destinations per token. */
    memset(l->send_rows, 0, sizeof(size_t) * (size_t)W);
    for (int t = 0; t < n_tok; t++) {
        for (int j = 0; j < top_k; j++) {
            int e = topk_ids[(size_t)t * top_k + j];
            K3_CHECK(e >= 0 && e < l->n_experts, "%s: token %d chose expert %d of %d", what, t,
                     e, l->n_experts);
            int r = k3_moe_owner(l, e);
            int seen = 0;
            for (int i = 0; i < j; i++)
                seen |= k3_moe_owner(l, topk_ids[(size_t)t * top_k + i]) == r;
            if (!seen) l->send_rows[r]++;
        }
    }
    l->n_send = 0;
    for (int r = 0; r < W; r++) {
        l->send_first[r] = l->n_send;
        l->n_send += l->send_rows[r];
    }
    l->send_tok = k3_grow(l->send_tok, &l->send_row_cap, l->n_send, sizeof *l->send_tok, 64, "a dispatch buffer");
    l->send_slots = k3_grow(l->send_slots, &l->send_slot_cap, l->n_send * (size_t)top_k,
                         sizeof *l->send_slots, 64, "a dispatch buffer");
    /* Fill rank-major, token order inside each destination. */
    size_t *fill = l->bytes_scratch; /* [W] cursors */
    memcpy(fill, l->send_first, sizeof(size_t) * (size_t)W);
    for (int t = 0; t < n_tok; t++) {
        for (int r = 0; r < W; r++) {
            int n_slots = 0;
            size_t row = fill[r];
            for (int j = 0; j < top_k; j++) {
                int e = topk_ids[(size_t)t * top_k + j];
                if (k3_moe_owner(l, e) != r) continue;
                struct k3_moe_slot *s = &l->send_slots[row * (size_t)top_k + (size_t)n_slots++];
                s->expert = e;
                s->weight = topk_w[(size_t)t * top_k + j];
            }
            if (!n_slots) continue;
            for (int j = n_slots; j < top_k; j++)
                l->send_slots[row * (size_t)top_k + (size_t)j] = (struct k3_moe_slot){-1, 0.0f};
            l->send_tok[row] = t;
            fill[r]++;
        }
    }
    /* Phase 2: counts. */
    c->ops->all_to_all(c, l->send_rows, l->recv_rows, sizeof(size_t), what);
    l->n_recv = 0;
    for (int r = 0; r < W; r++) {
        l->recv_first[r] = l->n_recv;
        l->n_recv += l->recv_rows[r];
    }
    l->recv_slots = k3_grow(l->recv_slots, &l->recv_slot_cap, l->n_recv * (size_t)top_k,
                         sizeof *l->recv_slots, 64, "a dispatch buffer");
    /* The slots travel now: the receiver needs them before the rows arrive. */
    size_t *sb = l->bytes_scratch, *so = sb + W, *rb = so + W, *ro = rb + W;
    size_t slot_row = sizeof(struct k3_moe_slot) * (size_t)top_k;
    for (int r = 0; r < W; r++) {
        sb[r] = l->send_rows[r] * slot_row;
        so[r] = l->send_first[r] * slot_row;
        rb[r] = l->recv_rows[r] * slot_row;
        ro[r] = l->recv_first[r] * slot_row;
    }
    c->ops->all_to_all_v(c, l->send_slots, sb, so, l->recv_slots, rb, ro, what);
}

void k3_moe_dispatch(struct k3_moe_layout *l, struct k3_comm *c, const void *x,
                     size_t row_bytes, void *recv, const char *what)
{
    int W = l->world;
    l->send_buf = k3_grow(l->send_buf, &l->send_cap, l->n_send * row_bytes + 1, 1, 64, "a dispatch buffer");
    for (size_t i = 0; i < l->n_send; i++)
        memcpy((char *)l->send_buf + i * row_bytes,
               (const char *)x + (size_t)l->send_tok[i] * row_bytes, row_bytes);
    size_t *sb = l->bytes_scratch, *so = sb + W, *rb = so + W, *ro = rb + W;
    for (int r = 0; r < W; r++) {
        sb[r] = l->send_rows[r] * row_bytes;
        so[r] = l->send_first[r] * row_bytes;
        rb[r] = l->recv_rows[r] * row_bytes;
        ro[r] = l->recv_first[r] * row_bytes;
    }
    c->ops->all_to_all_v(c, l->send_buf, sb, so, recv, rb, ro, what);
}

void k3_moe_combine(struct k3_moe_layout *l, struct k3_comm *c, const float *y_recv, int dim,
                    float *out, const char *what)
{
    int W = l->world;
    size_t row_bytes = sizeof(float) * (size_t)dim;
    l->send_buf = k3_grow(l->send_buf, &l->send_cap, l->n_send * row_bytes + 1, 1, 64, "a dispatch buffer");
    size_t *sb = l->bytes_scratch, *so = sb + W, *rb = so + W, *ro = rb + W;
    /* Reverse direction: what we received from r goes back to r. */
    for (int r = 0; r < W; r++) {
        sb[r] = l->recv_rows[r] * row_bytes;
        so[r] = l->recv_first[r] * row_bytes;
        rb[r] = l->send_rows[r] * row_bytes;
        ro[r] = l->send_first[r] * row_bytes;
    }
    c->ops->all_to_all_v(c, y_recv, sb, so, l->send_buf, rb, ro, what);
    memset(out, 0, (size_t)l->n_tok * row_bytes);
    /* Send rows are rank-major, so adding them in row order adds each token's
     * partials in rank order: the same sum on every run. */
    const float *back = l->send_buf;
    for (size_t i = 0; i < l->n_send; i++) {
        float *o = out + (size_t)l->send_tok[i] * (size_t)dim;
        const float *p = back + i * (size_t)dim;
        for (int d = 0; d < dim; d++) o[d] += p[d];
    }
}
