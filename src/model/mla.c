/* mla.c - one NoPE MLA sub-layer (research/model-architecture.md §2.4, §10.4).
 *
 * The latent cache row of a token is [RMSNorm(c_kv) (r) | k_pe (dr)] (576
 * values for K3). Two equivalent ways to attend over it:
 *  - expanded (prefill): kv_b turns every cached c_kv into per-head
 *    [k_nope | v]; keys are [k_nope_h | k_pe], ordinary causal attention;
 *  - absorbed (decode): q_lat_h = q_nope_h · W_UK_h (r wide), scores against
 *    the cached rows directly ([q_lat_h | q_pe_h] · [c_kv | k_pe]), output in
 *    latent space o_lat_h = Σ p c_kv, then v_h = W_UV_h o_lat_h. W_UK_h and
 *    W_UV_h are the k_nope and v row blocks of head h in kv_b.
 * Scale (dn + dr)^-1/2 in both; no rotary anywhere. The norms inside MLA use
 * eps 1e-6 (§2.3, §10.4). In a batched slice the projections run over all
 * rows and the cache and attention per sequence (mla_seq), each choosing
 * absorbed or expanded by its own token count, as a call of it alone would. */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "model/blocks.h"
#include "model/shard.h"

/* Paged cache: the new rows [n, lat] of positions pos0.. go to their blocks. */
static void paged_put(struct k3_forward *f, const struct k3_seq_cache *c, int l, int64_t pos0, const float *x,
                      int64_t n)
{
    const struct k3_mla_pool *p = c->pool;
    int64_t bt = p->block_tokens, lat = p->lat;
    for (int64_t t = 0; t < n;) {
        int64_t pos = pos0 + t, off = pos % bt, run = bt - off < n - t ? bt - off : n - t;
        float *row = p->layer[l] + ((int64_t)c->blocks[pos / bt] * bt + off) * lat;
        fwd_copy(f, row, lat, x + t * lat, lat, run, lat);
        t += run;
    }
}

/* Paged cache: rows of positions [0, T) gathered in token order into y [T, lat],
 * so that the attention below reads one strided array either way. (A copy
 * per call; a paged attention kernel would read the blocks in place.) */
static void paged_gather(struct k3_forward *f, const struct k3_seq_cache *c, int l, int64_t T, float *y)
{
    const struct k3_mla_pool *p = c->pool;
    int64_t bt = p->block_tokens, lat = p->lat;
    for (int64_t t = 0, b = 0; t < T; t += bt, b++) {
        int64_t run = T - t < bt ? T - t : bt;
        fwd_copy(f, y + t * lat, lat, p->layer[l] + (int64_t)c->blocks[b] * bt * lat, lat, run, lat);
    }
}

/* Attention of one sequence's rows [row0, row0 + n) of the slice: its new
 * latent rows written to its cache at n_past, then its queries against
 * positions [0, T); o [n, H·dv] of the slice gets its rows. Scratch taken here is given
 * back at the end (the expanded cache is sized for one sequence). */
static void mla_seq(struct k3_forward *f, int l, const struct fwd_seg *sg, const float *q_all, const float *kva_all,
                    float *o_all)
{
    const struct k3_model_config *cfg = f->cfg;
    const struct k3_mla_weights *w = &f->w->layers[l].mla;
    const struct k3_ops *ops = f->be->ops;
    struct k3_seq_cache *c = sg->c;
    int H = f->mla_heads;
    int64_t dn = cfg->qk_nope_head_dim, dr = cfg->qk_rope_head_dim, dv = cfg->v_head_dim;
    int64_t r = cfg->kv_lora_rank, dq = dn + dr, lat = r + dr, n = sg->n, pos0 = c->n_past, T = pos0 + n;
    const float *q = q_all + sg->row0 * H * dq, *kva = kva_all + sg->row0 * lat;
    float *o = o_all + sg->row0 * H * dv;
    double scale = 1 / sqrt((double)dq);
    int64_t mark = f->scratch_used;

    /* [T, lat] the sequence's latent rows, in token order, the new ones at pos0 */
    const float *cache;
    if (c->pool) {
        paged_put(f, c, l, pos0, kva, n);
        float *rows = fwd_take(f, T * lat);
        paged_gather(f, c, l, T, rows);
        cache = rows;
    } else {
        fwd_copy(f, c->layer[l].mla_latent + pos0 * lat, lat, kva, lat, n, lat);
        cache = c->layer[l].mla_latent;
    }

    /* [n, H·dv] attention output. */
    int absorb = f->opts.mla_absorb < 0 ? n == 1 : f->opts.mla_absorb;
    if (!absorb) {
        /* [T, H, dn + dv] expanded cache, and [T, H, dn + dr] keys. */
        float *kv = fwd_take(f, T * H * (dn + dv)), *keys = fwd_take(f, T * H * dq);
        struct k3_matmul_params mp = {.x = cache, .ldx = lat, .w = &w->kv_b, .y = kv, .ldy = H * (dn + dv), .n = T};
        ops->matmul(f->be, &mp);
        /* keys[t, h] = [k_nope of kv[t, h] | k_pe of cache row t]. */
        fwd_copy(f, keys, dq, kv, dn + dv, T * H, dn);
        for (int h = 0; h < H; h++) fwd_copy(f, keys + h * dq + dn, H * dq, cache + r, lat, T, dr);
        struct k3_attn_params ap = {.q = q, .k = keys, .v = kv + dn, .o = o,
                                    .q_ts = H * dq, .q_hs = dq, .k_ts = H * dq, .k_hs = dq,
                                    .v_ts = H * (dn + dv), .v_hs = dn + dv, .o_ts = H * dv, .o_hs = dv,
                                    .n = n, .n_kv = T, .pos0 = pos0, .n_head = H, .dqk = (int)dq,
                                    .dv = (int)dv, .scale = scale};
        ops->attn(f->be, &ap);
    } else {
        /* [n, H, r + dr] absorbed queries [q_nope_h · W_UK_h | q_pe_h]. */
        float *qabs = fwd_take(f, n * H * lat), *olat = fwd_take(f, n * H * r);
        for (int h = 0; h < H; h++) {
            struct k3_mat wuk = k3_mat_rows(&w->kv_b, h * (dn + dv), dn);
            struct k3_matmul_params mp = {.x = q + h * dq, .ldx = H * dq, .w = &wuk, .y = qabs + h * lat,
                                          .ldy = H * lat, .n = n, .trans = 1};
            ops->matmul(f->be, &mp);
            fwd_copy(f, qabs + h * lat + r, H * lat, q + h * dq + dn, H * dq, n, dr);
        }
        struct k3_attn_params ap = {.q = qabs, .k = cache, .v = cache, .o = olat,
                                    .q_ts = H * lat, .q_hs = lat, .k_ts = lat, .k_hs = 0, .v_ts = lat, .v_hs = 0,
                                    .o_ts = H * r, .o_hs = r, .n = n, .n_kv = T, .pos0 = pos0, .n_head = H,
                                    .dqk = (int)lat, .dv = (int)r, .scale = scale};
        ops->attn(f->be, &ap);
        for (int h = 0; h < H; h++) {
            struct k3_mat wuv = k3_mat_rows(&w->kv_b, h * (dn + dv) + dn, dv);
            struct k3_matmul_params mp = {.x = olat + h * r, .ldx = H * r, .w = &wuv, .y = o + h * dv,
                                          .ldy = H * dv, .n = n};
            ops->matmul(f->be, &mp);
        }
    }
    f->scratch_used = mark;
}

void mla_block(struct k3_forward *f, int l, const struct fwd_slice *s, const float *xn, float *out)
{
    const struct k3_model_config *cfg = f->cfg;
    const struct k3_mla_weights *w = &f->w->layers[l].mla;
    const struct k3_ops *ops = f->be->ops;
    int H = f->mla_heads;
    int64_t dn = cfg->qk_nope_head_dim, dr = cfg->qk_rope_head_dim, dv = cfg->v_head_dim;
    int64_t r = cfg->kv_lora_rank, dq = dn + dr, lat = r + dr, n = s->n;
    fwd_scratch_reset(f);
    if (H == 0) { /* a sharded rank without heads adds nothing to the all-reduce */
        memset(out, 0, sizeof(float) * (size_t)(n * cfg->hidden_size));
        return;
    }

    /* [n, H, dn + dr] queries, through the q LoRA when there is one. */
    float *q = fwd_take(f, n * H * dq);
    if (w->q_a.data) {
        float *qa = fwd_take(f, n * w->q_a.rows);
        fwd_linear(f, &w->q_a, xn, n, qa);
        fwd_rmsnorm(f, qa, w->q_a_norm, n, w->q_a.rows, 1e-6, qa);
        fwd_linear(f, &w->q_b, qa, n, q);
    } else {
        fwd_linear(f, &w->q, xn, n, q);
    }
    fwd_dump(f, q, n, H * dq, "L%d.mla.q", l);
    /* [n, r + dr] latent rows: c_kv normalised in place. */
    float *kva = fwd_take(f, n * lat);
    fwd_linear(f, &w->kv_a, xn, n, kva);
    struct k3_rmsnorm_params rn = {.x = kva, .ldx = lat, .w = w->kv_a_norm, .y = kva, .ldy = lat,
                                   .n_rows = n, .d = r, .eps = 1e-6};
    ops->rmsnorm(f->be, &rn);
    fwd_dump(f, kva, n, lat, "L%d.mla.latent", l);

    /* [n, H·dv] attention output, sequence by sequence. */
    float *o = fwd_take(f, n * H * dv);
    for (int i = 0; i < s->n_seg; i++) mla_seq(f, l, &s->seg[i], q, kva, o);
    fwd_dump(f, o, n, H * dv, "L%d.mla.o", l);

    /* K3's gated MLA: o ⊙ sigmoid(g_proj x) before o_proj. */
    if (w->g.data) {
        float *g = fwd_take(f, n * H * dv);
        fwd_linear(f, &w->g, xn, n, g);
        struct k3_ew_params ep = {.op = K3_EW_MUL_SIGMOID, .a = o, .b = g, .lda = H * dv, .ldb = H * dv,
                                  .y = o, .ldy = H * dv, .n = n, .m = H * dv};
        ops->ew(f->be, &ep);
    }
    fwd_linear(f, &w->o, o, n, out);
}
