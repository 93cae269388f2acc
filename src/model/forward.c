/* forward.c - the run state (workspace sized from a table at init), the
 * per-sequence caches, the dump hook, and k3_forward_run(), which slices the
 * tokens and hands each slice to the architecture's layer loop (k3.c,
 * kimi_linear.c).
 *
 * Workspace: one allocation at init: the residual-stream buffers
 * [max_tok, d] (stream, AttnRes snapshots, sub-layer inputs/outputs) and a
 * scratch region that each block carves with fwd_take() and that is reset per
 * block; its size is the maximum over block kinds of their per-token widths
 * (listed in scratch_per_token) times max_tok, plus MLA's prefill expansion of
 * the latent cache [max_ctx, H·(2·dn + dr + dv)] and the latent rows of a
 * paged cache gathered in token order [max_ctx, r + dr]. Nothing is allocated by the
 * model code after init (the CPU ops allocate small per-call buffers).
 *
 * Batches (k3_forward_run_batch): the new tokens of several sequences are laid
 * one after another in the workspace rows, in slices of at most max_tok
 * (batch_next_slice says where they are cut); a slice lists its segments
 * (sequence, rows) for the blocks that keep per-sequence state (KDA, MLA)
 * and the rows that get logits. A single sequence is a batch of one. */
#include "model/blocks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* ------------------------------------------------------------------ caches */

static int seq_cache_alloc(struct k3_seq_cache *c, const struct k3_model_config *cfg, int64_t max_ctx,
                           const struct k3_mla_pool *pool, struct k3_err *err)
{
    memset(c, 0, sizeof *c);
    c->pool = pool;
    c->max_ctx = max_ctx;
    c->n_layers = cfg->n_layers;
    c->layer = calloc((size_t)cfg->n_layers, sizeof *c->layer);
    if (!c->layer) return k3_err_set(err, "out of memory for the sequence cache");
    int64_t HK = (int64_t)cfg->kda_n_heads * cfg->kda_head_dim;
    for (int l = 0; l < cfg->n_layers; l++) {
        struct k3_layer_cache *lc = &c->layer[l];
        if (k3_model_config_layer_is_mla(cfg, l)) {
            if (pool) continue;
            int64_t per = cfg->kv_lora_rank + cfg->qk_rope_head_dim;  /* 576 for K3 */
            lc->mla_latent = calloc((size_t)(max_ctx * per), sizeof(float));
            if (!lc->mla_latent) goto oom;
        } else {
            lc->kda_state = calloc((size_t)(HK * cfg->kda_head_dim), sizeof(float));
            if (!lc->kda_state) goto oom;
            for (int j = 0; j < 3; j++) {
                lc->kda_tail[j] = calloc((size_t)((cfg->kda_conv_kernel - 1) * HK + 1), sizeof(float));
                if (!lc->kda_tail[j]) goto oom;
            }
        }
    }
    return 0;
oom:
    k3_seq_cache_free(c);
    return k3_err_set(err, "out of memory for the sequence cache (%lld tokens)", (long long)max_ctx);
}

int k3_seq_cache_init(struct k3_seq_cache *c, const struct k3_model_config *cfg, int64_t max_ctx,
                      struct k3_err *err)
{
    return seq_cache_alloc(c, cfg, max_ctx, NULL, err);
}

int k3_seq_cache_init_paged(struct k3_seq_cache *c, const struct k3_model_config *cfg,
                            const struct k3_mla_pool *pool, struct k3_err *err)
{
    return seq_cache_alloc(c, cfg, 0, pool, err);
}

int k3_mla_pool_init(struct k3_mla_pool *p, const struct k3_model_config *cfg, int64_t n_blocks,
                     int64_t block_tokens, struct k3_err *err)
{
    memset(p, 0, sizeof *p);
    p->n_layers = cfg->n_layers;
    p->n_blocks = n_blocks;
    p->block_tokens = block_tokens;
    p->lat = cfg->kv_lora_rank + cfg->qk_rope_head_dim;
    p->layer = calloc((size_t)cfg->n_layers, sizeof *p->layer);
    if (!p->layer) return k3_err_set(err, "out of memory for the MLA block pool");
    for (int l = 0; l < cfg->n_layers; l++) {
        if (!k3_model_config_layer_is_mla(cfg, l)) continue;
        p->layer[l] = calloc((size_t)(n_blocks * block_tokens * p->lat), sizeof(float));
        if (!p->layer[l]) {
            k3_mla_pool_free(p);
            return k3_err_set(err, "out of memory for %lld MLA blocks of %lld tokens", (long long)n_blocks,
                              (long long)block_tokens);
        }
    }
    return 0;
}

void k3_mla_pool_free(struct k3_mla_pool *p)
{
    for (int l = 0; p->layer && l < p->n_layers; l++) free(p->layer[l]);
    free(p->layer);
    memset(p, 0, sizeof *p);
}

void k3_seq_cache_reset(struct k3_seq_cache *c, const struct k3_model_config *cfg)
{
    int64_t HK = (int64_t)cfg->kda_n_heads * cfg->kda_head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        struct k3_layer_cache *lc = &c->layer[l];
        if (lc->kda_state) memset(lc->kda_state, 0, sizeof(float) * (size_t)(HK * cfg->kda_head_dim));
        for (int j = 0; j < 3; j++)
            if (lc->kda_tail[j])
                memset(lc->kda_tail[j], 0, sizeof(float) * (size_t)((cfg->kda_conv_kernel - 1) * HK));
    }
    c->n_past = 0;
}

void k3_seq_cache_free(struct k3_seq_cache *c)
{
    if (c->layer) {
        for (int l = 0; l < c->n_layers; l++) {
            free(c->layer[l].kda_state);
            free(c->layer[l].mla_latent);
            for (int j = 0; j < 3; j++) free(c->layer[l].kda_tail[j]);
        }
    }
    free(c->layer);
    memset(c, 0, sizeof *c);
}

/* --------------------------------------------------------------- workspace */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Floats of block scratch per token, for each block kind (what the blocks take). */
static int64_t scratch_per_token(const struct k3_model_config *cfg, const struct k3_weights *w)
{
    int64_t H = cfg->kda_n_heads, HK = H * cfg->kda_head_dim;
    int64_t rf = 0, rg = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        const struct k3_layer_weights *lw = &w->layers[l];
        if (lw->is_mla) continue;
        rf = max64(rf, lw->kda.f_a.rows);
        rg = max64(rg, lw->kda.g_a.rows);
    }
    /* KDA: q,k,v raw + conv'd, f_a, f, g, beta, gate (+ g_a), o. */
    int64_t kda = 6 * HK + rf + 2 * HK + H + HK + rg + HK;
    /* MLA: q_a, q, kv_a, absorbed q, latent output, o, gate. */
    int64_t Hm = cfg->n_heads, r = cfg->kv_lora_rank, dr = cfg->qk_rope_head_dim;
    int64_t mla = cfg->q_lora_rank + Hm * (cfg->qk_nope_head_dim + dr) + (r + dr) + Hm * (r + dr) + Hm * r +
                  2 * Hm * cfg->v_head_dim;
    /* MoE: router logits, idx, weights, latent in and out, then shared experts (gate, up). */
    int64_t lw = k3_model_config_expert_width(cfg);
    int64_t moe = cfg->n_experts + 2 * cfg->n_experts_per_token + 2 * lw +
                  2 * cfg->n_shared_experts * cfg->moe_intermediate_size;
    int64_t dense = 2 * cfg->intermediate_size;
    return max64(max64(kda, mla), max64(moe, dense)) + 64;
}

int k3_forward_init(struct k3_forward **out, const struct k3_model_config *cfg,
                    const struct k3_weights *w, struct k3_backend *be,
                    const struct k3_forward_opts *opts, struct k3_err *err)
{
    struct k3_forward *f = calloc(1, sizeof *f);
    if (!f) return k3_err_set(err, "out of memory");
    f->cfg = cfg;
    f->w = w;
    f->be = be;
    f->opts = (struct k3_forward_opts){.max_tok = 512, .max_ctx = 4096, .kda_chunk = 64, .mla_absorb = -1};
    if (opts) f->opts = *opts;
    if (f->opts.max_tok <= 0) f->opts.max_tok = 512;
    if (f->opts.max_ctx <= 0) f->opts.max_ctx = 4096;
    int64_t T = f->opts.max_tok, d = cfg->hidden_size;
    f->n_snap_max = cfg->attn_res_block_size > 0
                        ? (cfg->n_layers + cfg->attn_res_block_size - 1) / cfg->attn_res_block_size
                        : 0;
    /* expanded keys and values, and the latent rows gathered from a block table */
    int64_t mla_ctx = f->opts.max_ctx * (cfg->n_heads * (2 * cfg->qk_nope_head_dim + cfg->qk_rope_head_dim +
                                                          cfg->v_head_dim) +
                                         cfg->kv_lora_rank + cfg->qk_rope_head_dim);
    f->scratch_floats = T * scratch_per_token(cfg, w) + (cfg->n_mla_layers ? mla_ctx : 0);
    int64_t total = (6 + f->n_snap_max) * T * d + f->scratch_floats;
    f->buf = malloc(sizeof(float) * (size_t)total);
    f->snap = calloc((size_t)f->n_snap_max + 1, sizeof *f->snap);
    if (!f->buf || !f->snap) {
        k3_forward_free(f);
        return k3_err_set(err, "out of memory for the forward workspace (%.1f MiB; lower max_tok or max_ctx)",
                          (double)total * 4 / (1 << 20));
    }
    f->segs = calloc((size_t)T, sizeof *f->segs);
    f->lm_rows = calloc((size_t)T, sizeof *f->lm_rows);
    if (!f->segs || !f->lm_rows) {
        k3_forward_free(f);
        return k3_err_set(err, "out of memory for the forward's slice tables");
    }
    float *p = f->buf;
    float **bufs[6] = {&f->h, &f->a_in, &f->xn, &f->a_out, &f->m_in, &f->m_out};
    for (int i = 0; i < 6; i++, p += T * d) *bufs[i] = p;
    for (int i = 0; i < f->n_snap_max; i++, p += T * d) f->snap[i] = p;
    f->scratch = p;
    f->par = f->opts.par;
    f->kda_heads = cfg->kda_n_heads;
    f->mla_heads = cfg->n_heads;
    if (f->par) {
        const struct k3_shard *s = &f->par->shard;
        long long b, e;
        k3_split(cfg->kda_n_heads, s->tp, s->tp_rank, &b, &e);
        f->kda_heads = (int)(e - b);
        k3_split(cfg->n_heads, s->tp, s->tp_rank, &b, &e);
        f->mla_heads = (int)(e - b);
        k3_moe_layout_init(&f->ep.layout, cfg->n_experts > 0 ? cfg->n_experts : 1, s->ep, s->ep_rank);
        f->ep.xpose_counts = calloc(4 * (size_t)s->tp, sizeof(size_t));
        if (s->tp > 1) {
            int64_t vp = (cfg->vocab_size + s->tp - 1) / s->tp;
            f->lm_gather = malloc(sizeof(float) * (size_t)((s->tp + 1) * T * vp));
            if (!f->lm_gather || !f->ep.xpose_counts) {
                k3_forward_free(f);
                return k3_err_set(err, "out of memory for the vocabulary gather");
            }
        }
    }
    *out = f;
    return 0;
}

void k3_forward_free(struct k3_forward *f)
{
    if (!f) return;
    if (f->par) moe_ep_state_free(&f->ep);
    free(f->lm_gather);
    free(f->buf);
    free(f->snap);
    free(f->segs);
    free(f->lm_rows);
    free(f);
}

void k3_forward_set_dump(struct k3_forward *f, const struct k3_dump *dump) { f->dump = dump; }

float *fwd_take(struct k3_forward *f, int64_t n_floats)
{
    /* Keep every piece 64-byte aligned relative to the region start. */
    int64_t n = (n_floats + 15) & ~(int64_t)15;
    K3_CHECK(f->scratch_used + n <= f->scratch_floats,
             "forward scratch exhausted (%lld + %lld > %lld floats): the size table in forward.c "
             "misses a buffer", (long long)f->scratch_used, (long long)n, (long long)f->scratch_floats);
    float *p = f->scratch + f->scratch_used;
    f->scratch_used += n;
    return p;
}

void fwd_dump(struct k3_forward *f, const float *x, int64_t n, int64_t width, const char *fmt, ...)
{
    if (!f->dump) return;
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int want = f->dump->all;
    for (int i = 0; !want && i < f->dump->n_names; i++) want = !strcmp(f->dump->names[i], name);
    if (want) f->dump->put(f->dump->ctx, name, x, n, width, width);
}

void fwd_linear(struct k3_forward *f, const struct k3_mat *w, const float *x, int64_t n, float *y)
{
    struct k3_matmul_params p = {.x = x, .ldx = w->cols, .w = w, .y = y, .ldy = w->rows, .n = n};
    f->be->ops->matmul(f->be, &p);
}

void fwd_rmsnorm(struct k3_forward *f, const float *x, const float *w, int64_t n_rows, int64_t d,
                 double eps, float *y)
{
    struct k3_rmsnorm_params p = {.x = x, .ldx = d, .w = w, .y = y, .ldy = d, .n_rows = n_rows, .d = d, .eps = eps};
    f->be->ops->rmsnorm(f->be, &p);
}

void fwd_copy(struct k3_forward *f, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n,
              int64_t m)
{
    struct k3_ew_params p = {.op = K3_EW_COPY, .a = x, .lda = ldx, .y = y, .ldy = ldy, .n = n, .m = m};
    f->be->ops->ew(f->be, &p);
}

void fwd_add(struct k3_forward *f, float *y, const float *a, const float *b, int64_t n, int64_t m)
{
    struct k3_ew_params p = {.op = K3_EW_ADD, .a = a, .b = b, .lda = m, .ldb = m, .y = y, .ldy = m, .n = n, .m = m};
    f->be->ops->ew(f->be, &p);
}

void fwd_tp_all_reduce(struct k3_forward *f, float *x, int64_t count, const char *what)
{
    if (!f->par || f->par->shard.tp == 1) return;
    struct k3_comm *c = f->par->tp_comm;
    c->ops->all_reduce(c, x, (size_t)count, K3_DTYPE_F32, what);
}

void fwd_lm_head(struct k3_forward *f, const float *xn, int64_t n, float *logits)
{
    const struct k3_model_config *cfg = f->cfg;
    if (!f->par || f->par->shard.tp == 1) {
        fwd_linear(f, &f->w->lm_head, xn, n, logits);
        return;
    }
    /* Each rank computes its rows of the vocabulary, padded to vp columns so
     * the all-gather moves equal blocks; then the blocks are laid side by side. */
    const struct k3_shard *s = &f->par->shard;
    if (f->opts.vocab_local) {
        struct k3_matmul_params pl = {.x = xn, .ldx = cfg->hidden_size, .w = &f->w->lm_head, .y = logits,
                                      .ldy = f->w->lm_head.rows, .n = n};
        if (f->w->lm_head.rows) f->be->ops->matmul(f->be, &pl);
        return;
    }
    int64_t V = cfg->vocab_size, vp = (V + s->tp - 1) / s->tp, T = f->opts.max_tok;
    float *mine = f->lm_gather + (int64_t)s->tp * T * vp, *all = f->lm_gather;
    memset(mine, 0, sizeof(float) * (size_t)(n * vp));
    struct k3_matmul_params p = {.x = xn, .ldx = cfg->hidden_size, .w = &f->w->lm_head, .y = mine, .ldy = vp, .n = n};
    if (f->w->lm_head.rows) f->be->ops->matmul(f->be, &p);
    struct k3_comm *c = f->par->tp_comm;
    c->ops->all_gather(c, mine, all, sizeof(float) * (size_t)(n * vp), "lm_head");
    for (int r = 0; r < s->tp; r++) {
        long long b, e;
        k3_split(V, s->tp, r, &b, &e);
        for (int64_t i = 0; i < n; i++)
            memcpy(logits + i * V + b, all + (r * n + i) * vp, sizeof(float) * (size_t)(e - b));
    }
}

void fwd_slice_logits(struct k3_forward *f, const struct fwd_slice *s, const float *xn, float *tmp)
{
    if (!s->n_lm) return;
    int64_t d = f->cfg->hidden_size, a = s->lm_rows[0];
    const float *x = xn + a * d;
    if (s->lm_rows[s->n_lm - 1] - a != s->n_lm - 1) { /* not one run: gather the rows */
        for (int64_t i = 0; i < s->n_lm; i++) fwd_copy(f, tmp + i * d, d, xn + s->lm_rows[i] * d, d, 1, d);
        x = tmp;
    }
    fwd_lm_head(f, x, s->n_lm, s->logits);
    int64_t v0, v1;
    k3_forward_vocab_range(f, &v0, &v1);
    fwd_dump(f, s->logits, s->n_lm, v1 - v0, "logits");
}

void fwd_embed(struct k3_forward *f, const struct fwd_slice *s, float *out)
{
    for (int i = 0; i < s->n_seg; i++) {
        const struct fwd_seg *sg = &s->seg[i];
        struct k3_embed_params ep = {.w = &f->w->embed, .ids = sg->ids, .n = sg->n,
                                     .out = out + sg->row0 * f->cfg->hidden_size};
        f->be->ops->embed(f->be, &ep);
    }
}

void k3_forward_vocab_range(const struct k3_forward *f, int64_t *v0, int64_t *v1)
{
    *v0 = 0;
    *v1 = f->cfg->vocab_size;
    if (f->par && f->par->shard.tp > 1 && f->opts.vocab_local) {
        long long b, e;
        k3_split(f->cfg->vocab_size, f->par->shard.tp, f->par->shard.tp_rank, &b, &e);
        *v0 = b;
        *v1 = e;
    }
}

/* Sharded runs: every rank learns every rank's slice count (or that one of
 * them refused its input), so all make the same number of MoE collectives. */
static int agree_slices(struct k3_forward *f, int mine, int *most, struct k3_err *err)
{
    *most = mine;
    if (!f->par) return mine < 0 ? -1 : 0;
    struct k3_comm *c = f->par->ep_comm;
    int buf[1024], *all = c->size <= 1024 ? buf : malloc(sizeof(int) * (size_t)c->size);
    K3_CHECK(all, "out of memory");
    c->ops->all_gather(c, &mine, all, sizeof mine, "forward.slices");
    int bad = -1;
    *most = 0;
    for (int r = 0; r < c->size; r++) {
        if (all[r] < 0 && bad < 0) bad = r;
        if (all[r] > *most) *most = all[r];
    }
    if (all != buf) free(all);
    if (bad >= 0 && mine >= 0)
        return k3_err_set(err, "rank %d refused its part of this forward step", bad);
    return bad >= 0 ? -1 : 0;
}

static void idle_slice(struct k3_forward *f)
{
    for (int l = 0; l < f->cfg->n_layers; l++)
        if (f->w->layers[l].is_moe) moe_ep_block(f, l, f->xn, 0, f->m_out);
}

int k3_forward_idle(struct k3_forward *f)
{
    int most;
    struct k3_err err;
    if (!f->par) return 0;
    if (agree_slices(f, 0, &most, &err)) return -1;
    for (int s = 0; s < most; s++) idle_slice(f);
    return 0;
}

/* A batch's input checked before any collective: the sequence's context fits
 * its cache and the workspace, its ids are in the vocabulary, and no cache
 * is named twice (its positions would collide). */
static int check_seq(const struct k3_forward *f, const struct k3_batch_seq *b, int i, struct k3_err *err)
{
    const struct k3_model_config *cfg = f->cfg;
    const struct k3_seq_cache *c = b[i].cache;
    int64_t n = b[i].n;
    int64_t cap = c->pool ? c->n_blocks * c->pool->block_tokens : c->max_ctx;
    if (n < 0 || b[i].logits_from < 0 || b[i].logits_from > n)
        return k3_err_set(err, "sequence %d of the batch: %lld tokens with logits from %lld", i, (long long)n,
                          (long long)b[i].logits_from);
    if (c->n_past + n > cap || c->n_past + n > f->opts.max_ctx)
        return k3_err_set(err, "sequence of %lld tokens exceeds the cache (%lld%s) or workspace (%lld) "
                          "context; raise max_ctx", (long long)(c->n_past + n), (long long)cap,
                          c->pool ? " in its blocks" : "", (long long)f->opts.max_ctx);
    for (int64_t t = 0; t < n; t++)
        if (b[i].ids[t] < 0 || b[i].ids[t] >= cfg->vocab_size)
            return k3_err_set(err, "token id %d at index %lld is outside the vocabulary [0, %lld)", b[i].ids[t],
                              (long long)t, (long long)cfg->vocab_size);
    for (int j = 0; j < i; j++)
        if (b[j].cache == c) return k3_err_set(err, "sequences %d and %d of the batch share a cache", j, i);
    return 0;
}

/* Where the next slice of a batch starts: sequence i, its tokens from off. */
struct batch_cursor {
    int i;
    int64_t off;
};

/* Fills f->segs and f->lm_rows with the next slice of the batch and returns
 * its rows (0 at the end). The rows are in order of the sequences, at most
 * max_tok per slice. A sequence that does not fit in the rest of a slice
 * starts the next one, so each is cut at multiples of max_tok from its first
 * token, exactly as a call of it alone would be: the pieces the KDA chunked
 * form and MLA's absorbed/expanded choice see are the same, hence so are the
 * results (bitwise with the CPU kernels, which compute each row alone). */
static int64_t batch_next_slice(struct k3_forward *f, const struct k3_batch_seq *seqs, int n_seqs, int want_logits,
                                struct batch_cursor *cur, struct fwd_slice *sl)
{
    int64_t T = f->opts.max_tok, row = 0;
    *sl = (struct fwd_slice){.seg = f->segs, .lm_rows = f->lm_rows};
    while (cur->i < n_seqs && row < T) {
        const struct k3_batch_seq *b = &seqs[cur->i];
        int64_t left = b->n - cur->off;
        if (cur->off == 0 && row > 0 && left > T - row) break;
        int64_t take = left < T - row ? left : T - row;
        if (take > 0) {
            f->segs[sl->n_seg++] = (struct fwd_seg){.c = b->cache, .ids = b->ids + cur->off, .row0 = row, .n = take};
            for (int64_t t = cur->off > b->logits_from ? cur->off : b->logits_from; want_logits && t < cur->off + take;
                 t++)
                f->lm_rows[sl->n_lm++] = row + (t - cur->off);
        }
        row += take;
        cur->off += take;
        if (cur->off == b->n) cur->i++, cur->off = 0;
    }
    sl->n = row;
    return row;
}

int64_t k3_forward_run_batch(struct k3_forward *f, const struct k3_batch_seq *seqs, int n_seqs, float *logits,
                             struct k3_err *err)
{
    const struct k3_model_config *cfg = f->cfg;
    int64_t v0, v1;
    k3_forward_vocab_range(f, &v0, &v1);
    int bad = 0, n_slices = 0, most;
    for (int i = 0; !bad && i < n_seqs; i++) bad = check_seq(f, seqs, i, err);
    struct batch_cursor cur = {0, 0};
    struct fwd_slice sl;
    while (!bad && batch_next_slice(f, seqs, n_seqs, 0, &cur, &sl)) n_slices++;
    if (agree_slices(f, bad ? -1 : n_slices, &most, err)) return -1;
    for (int s = n_slices; s < most; s++) idle_slice(f);
    int64_t rows_out = 0;
    cur = (struct batch_cursor){0, 0};
    while (batch_next_slice(f, seqs, n_seqs, logits != NULL, &cur, &sl)) {
        sl.logits = sl.n_lm ? logits + rows_out * (v1 - v0) : NULL;
        rows_out += sl.n_lm;
        /* Block AttnRes is what sets the K3 layer loop apart; every other K3
         * difference (gate form, latent MoE, gated MLA) is a per-block config flag. */
        if (cfg->attn_res_block_size > 0) k3_arch_k3_run(f, &sl);
        else k3_arch_kimi_linear_run(f, &sl);
        for (int g = 0; g < sl.n_seg; g++) f->segs[g].c->n_past += f->segs[g].n;
    }
    return rows_out;
}

int k3_forward_run(struct k3_forward *f, struct k3_seq_cache *c, const int32_t *ids, int64_t n,
                   float *logits, struct k3_err *err)
{
    struct k3_batch_seq b = {.cache = c, .ids = ids, .n = n, .logits_from = logits ? 0 : n};
    return k3_forward_run_batch(f, &b, 1, logits, err) < 0 ? -1 : 0;
}

int64_t k3_forward_run_last(struct k3_forward *f, struct k3_seq_cache *c, const int32_t *ids, int64_t n,
                            float *logits, struct k3_err *err)
{
    /* the rows of the last slice of this call */
    int64_t T = f->opts.max_tok, from = n > 0 ? (n - 1) / T * T : 0;
    struct k3_batch_seq b = {.cache = c, .ids = ids, .n = n, .logits_from = logits ? from : n};
    return k3_forward_run_batch(f, &b, 1, logits, err);
}

int64_t k3_forward_slice_tokens(const struct k3_forward *f) { return f->opts.max_tok; }
