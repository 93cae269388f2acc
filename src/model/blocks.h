/* blocks.h - internal to src/model: the run state one forward slice shares
 * between the architecture files (k3.c, kimi_linear.c) and the blocks (kda.c,
 * mla.c, moe.c, attn_res.c). Not a public header. A slice holds the new
 * tokens of one or more sequences (k3_forward_run_batch). */
#ifndef K3_MODEL_BLOCKS_H
#define K3_MODEL_BLOCKS_H

#include <stdint.h>

#include "model/forward.h"
#include "model/parallel.h"
#include "mpi/moe_dispatch.h"

/* Buffers of the expert-parallel MoE (moe_ep.c), grown on demand and kept. */
struct k3_moe_ep {
    struct k3_moe_layout layout;
    float *recv, *pair_x, *pair_y, *pair_w, *y_recv, *routed, *zpart;
    int32_t *pair_idx;
    void *xpose;                 /* send + receive blocks of the latent transposes */
    size_t *xpose_counts;        /* [4 * tp] */
    size_t recv_cap, pair_x_cap, pair_y_cap, pair_w_cap, pair_idx_cap, y_recv_cap, routed_cap, zpart_cap,
        xpose_cap;
};

/* One slice of a forward call: the rows [0, n) of the workspace hold
 * consecutive runs of tokens of one or more sequences (segments). The
 * token-wise parts run over all n rows; KDA and MLA run per segment, on the
 * segment's cache at positions c->n_past.. (n_past advances after the slice). */
struct fwd_seg {
    struct k3_seq_cache *c;
    const int32_t *ids;          /* [n] */
    int64_t row0, n;             /* rows [row0, row0 + n) of the slice */
};

struct fwd_slice {
    const struct fwd_seg *seg;
    int n_seg;
    int64_t n;                   /* rows, the sum of the segments' */
    const int64_t *lm_rows;      /* [n_lm] ascending rows that get logits */
    int64_t n_lm;
    float *logits;               /* [n_lm, vocabulary slice]; NULL when n_lm is 0 */
};

struct k3_forward {
    const struct k3_model_config *cfg;
    const struct k3_weights *w;
    struct k3_backend *be;
    struct k3_forward_opts opts;
    const struct k3_dump *dump;
    /* Residual-stream buffers, each [max_tok, d]. */
    float *h, *a_in, *xn, *a_out, *m_in, *m_out;
    float **snap;            /* AttnRes block snapshots [n_snap_max][max_tok, d] */
    int n_snap_max;
    /* Block scratch: a bump region reset at the start of every block. */
    float *scratch;
    int64_t scratch_floats, scratch_used;
    float *buf;              /* the one allocation everything above lives in */
    /* Sharded runs (model/parallel.h); par is NULL on a single rank. */
    const struct k3_model_par *par;
    int kda_heads, mla_heads;   /* heads this rank holds */
    struct k3_moe_ep ep;
    float *lm_gather;           /* [tp, max_tok, ceil(V / tp)] for the vocabulary gather */
    /* A slice's segments and logit rows, [max_tok] each (a segment has a row at least). */
    struct fwd_seg *segs;
    int64_t *lm_rows;
};

/* Scratch for one block (fatal if the size table in forward.c was wrong). */
float *fwd_take(struct k3_forward *f, int64_t n_floats);
static inline void fwd_scratch_reset(struct k3_forward *f) { f->scratch_used = 0; }

/* Hands x [n, width] to the dump hook if `name` (printf format) is wanted. */
void fwd_dump(struct k3_forward *f, const float *x, int64_t n, int64_t width, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* y[n, w.rows] = x[n, w.cols] · wᵀ (ldx = w.cols, ldy = w.rows unless given). */
void fwd_linear(struct k3_forward *f, const struct k3_mat *w, const float *x, int64_t n, float *y);
void fwd_rmsnorm(struct k3_forward *f, const float *x, const float *w, int64_t n_rows, int64_t d,
                 double eps, float *y);
/* y[n, m] (row stride ldy) = x[n, m] (row stride ldx), through the backend. */
void fwd_copy(struct k3_forward *f, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n,
              int64_t m);
/* y = a + b over n contiguous rows of m, through the backend (y may be a). */
void fwd_add(struct k3_forward *f, float *y, const float *a, const float *b, int64_t n, int64_t m);

/* Blocks. xn [n, d] is the normed sub-layer input, out [n, d] the sub-layer
 * output, n = s->n. The sequence mixers run per segment of the slice, each on
 * its sequence's cache (MLA: contiguous, or paged through its block table). */
void kda_block(struct k3_forward *f, int l, const struct fwd_slice *s, const float *xn, float *out);
void mla_block(struct k3_forward *f, int l, const struct fwd_slice *s, const float *xn, float *out);
void moe_block(struct k3_forward *f, int l, const float *xn, int64_t n, float *out);
void mlp_block(struct k3_forward *f, const struct k3_mlp_weights *w, const float *xn, int64_t n,
               float *out, int accumulate);
/* The MLP sub-layer of layer l, whichever kind it is: dense (layer 0), MoE
 * on one rank, or MoE with experts over ranks; partial sums of a sharded run
 * already summed over the group. */
void mlp_sublayer(struct k3_forward *f, int l, const float *xn, int64_t n, float *out);
/* out = AR(cand[0..n_cand)) per token with the folded query q (§3.3). */
void attn_res_mix(struct k3_forward *f, const float *q, const float *const *cand, int n_cand,
                  int64_t n, float *out);

/* Sharded runs: sum partial sub-layer outputs over the attention group (no-op
 * on one rank); logits of the whole vocabulary from the group's row slices. */
void fwd_tp_all_reduce(struct k3_forward *f, float *x, int64_t count, const char *what);
void fwd_lm_head(struct k3_forward *f, const float *xn, int64_t n, float *logits);
/* The slice's logits: final-normed rows xn [s->n, d] -> s->logits for s->lm_rows
 * (gathered into tmp [max_tok, d] unless they are one run). */
void fwd_slice_logits(struct k3_forward *f, const struct fwd_slice *s, const float *xn, float *tmp);
/* The MoE sub-layer with experts spread over ranks (moe_ep.c). */
void moe_ep_block(struct k3_forward *f, int l, const float *xn, int64_t n, float *out);
void moe_ep_state_free(struct k3_moe_ep *s);

/* The layer loops, one per architecture. */
void k3_arch_k3_run(struct k3_forward *f, const struct fwd_slice *s);
void k3_arch_kimi_linear_run(struct k3_forward *f, const struct fwd_slice *s);
/* [s->n, d] out: each segment's token embeddings at its rows. */
void fwd_embed(struct k3_forward *f, const struct fwd_slice *s, float *out);

#endif
