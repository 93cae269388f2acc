/* forward.h - the forward pass of one sequence, or a batch of them, on one
 * rank, with caches.
 *
 * Three separate things (STYLE.md): the immutable config (config.h), the
 * immutable weights (weights.h, views into the mapped shards) and the mutable
 * run state: a `struct k3_forward` (workspace, backend, dump hook) and one
 * `struct k3_seq_cache` per sequence (KDA state + conv tails, MLA latent
 * cache, position). k3_forward_run() continues a sequence from its cache, so
 * one call with all tokens (prefill) equals a prefill of N then calls with one
 * token each (decode). Calls longer than max_tok are processed in slices of
 * max_tok tokens, which is the same computation (the caches carry everything;
 * AttnRes is per token).
 *
 * The model code calls ops only through the backend table (kernels/ops.h).
 * Every intermediate has a name (forward.c lists them, validation/reference/
 * k3ref.py defines them) and can be handed to a dump hook. */
#ifndef K3_MODEL_FORWARD_H
#define K3_MODEL_FORWARD_H

#include <stdint.h>

#include "core/err.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/parallel.h"
#include "model/weights.h"

/* Per-sequence caches. */
struct k3_layer_cache {
    float *kda_state;        /* [H, K, V] fp32 (KDA layers) */
    float *kda_tail[3];      /* q, k, v conv tails [W-1, H·K] (KDA layers) */
    float *mla_latent;       /* [max_ctx, kv_lora_rank + qk_rope_head_dim] (MLA layers):
                                normalised c_kv then k_pe, per token */
};

/* Paged MLA latent rows, shared by the sequences of one attention group on
 * one rank (the serving loop): per MLA layer [n_blocks * block_tokens,
 * kv_lora_rank + qk_rope_head_dim]; token t of a sequence lives in row
 * blocks[t / block_tokens] * block_tokens + t % block_tokens of its block
 * table. Memory is n_blocks, whatever the number of sequences. */
struct k3_mla_pool {
    float **layer;           /* [n_layers]: the rows of MLA layers, NULL for the others */
    int n_layers;
    int64_t n_blocks, block_tokens, lat;
};

int k3_mla_pool_init(struct k3_mla_pool *p, const struct k3_model_config *cfg, int64_t n_blocks,
                     int64_t block_tokens, struct k3_err *err);
void k3_mla_pool_free(struct k3_mla_pool *p);

struct k3_seq_cache {
    int64_t n_past;          /* tokens already in the cache */
    int64_t max_ctx;         /* contiguous caches: rows of mla_latent */
    int n_layers;
    struct k3_layer_cache *layer;
    /* Paged caches (k3_seq_cache_init_paged): mla_latent is NULL and the MLA
     * rows live in pool; the owner points blocks at the sequence's block
     * table (n_blocks entries, enough for n_past + the new tokens) before
     * each k3_forward_run. */
    const struct k3_mla_pool *pool;
    const int32_t *blocks;
    int n_blocks;
};

int k3_seq_cache_init(struct k3_seq_cache *c, const struct k3_model_config *cfg, int64_t max_ctx,
                      struct k3_err *err);
/* KDA state and conv tails only; MLA rows in pool through a block table. */
int k3_seq_cache_init_paged(struct k3_seq_cache *c, const struct k3_model_config *cfg,
                            const struct k3_mla_pool *pool, struct k3_err *err);
void k3_seq_cache_reset(struct k3_seq_cache *c, const struct k3_model_config *cfg);
void k3_seq_cache_free(struct k3_seq_cache *c);

/* Dump hook: put() is called for every wanted intermediate of every slice of
 * tokens, in token order: [n, width] rows with stride ld. */
struct k3_dump {
    int all;                         /* every name */
    const char *const *names;
    int n_names;
    void (*put)(void *ctx, const char *name, const float *x, int64_t n, int64_t width, int64_t ld);
    void *ctx;
};

struct k3_forward;

struct k3_forward_opts {
    int64_t max_tok;         /* tokens per slice (workspace rows); default 512 */
    int64_t max_ctx;         /* longest sequence (sizes the MLA prefill workspace); default 4096 */
    int kda_chunk;           /* KDA chunk size for multi-token calls; 0 = recurrent; default 64 */
    int mla_absorb;          /* -1: weight absorption for single-token calls only (default);
                                0: never; 1: always */
    const struct k3_model_par *par; /* sharded run (model/parallel.h; weights cut by
                                       k3_weights_shard); NULL on one rank */
    int vocab_local;         /* sharded run: logits are this rank's vocabulary rows
                                [n, v1 - v0] (k3_forward_vocab_range), for sampling
                                across the group without gathering [n, vocab] */
};

int k3_forward_init(struct k3_forward **out, const struct k3_model_config *cfg,
                    const struct k3_weights *w, struct k3_backend *be,
                    const struct k3_forward_opts *opts, struct k3_err *err);
void k3_forward_free(struct k3_forward *f);
void k3_forward_set_dump(struct k3_forward *f, const struct k3_dump *dump);

/* Runs ids[0..n) at positions c->n_past.. and writes logits [n, vocab]
 * (logits may be NULL to skip lm_head). Returns 0 or -1 (cache full). */
int k3_forward_run(struct k3_forward *f, struct k3_seq_cache *c, const int32_t *ids, int64_t n,
                   float *logits, struct k3_err *err);

/* The same, but lm_head runs for the last slice of tokens only (a prefill
 * whose next token is sampled needs one row, not n): logits [rows, vocabulary
 * slice], rows = the last slice's length (at most k3_forward_slice_tokens),
 * the last token's row last. Returns rows, or -1 as k3_forward_run. */
int64_t k3_forward_run_last(struct k3_forward *f, struct k3_seq_cache *c, const int32_t *ids, int64_t n,
                            float *logits, struct k3_err *err);
/* Several sequences in one pass (the serving loop's step): the new tokens
 * of seqs[0..n_seqs) are laid one after another and run as one call, so the
 * weights are read once per slice whatever the number of sequences (small
 * decode batches are bound by reading them) and a sharded run makes one set
 * of collectives. The token-wise parts (embedding, norms, projections,
 * AttnRes, router, experts, lm_head) run over all rows; KDA and MLA per
 * sequence, each on its own cache (contiguous or paged; distinct caches) at
 * positions cache->n_past.. . Rows past max_tok go to further slices: a
 * sequence starts a new slice unless it fits in the current one, so it is
 * cut where a call of it alone would be (at multiples of max_tok) and gets
 * what k3_forward_run per sequence gives (bitwise on the CPU backend, except
 * one fp32 sum order under tp > 1: tests/dist/test_forward_batch.c). Each
 * sequence's tokens [logits_from, n) get logits, written to logits [rows,
 * vocabulary slice] in sequence then token order (logits may be NULL when no
 * sequence asks for any). Returns the rows written, or -1 (a sequence
 * exceeds its cache, an id is out of range, or another rank refused), with
 * nothing run then. */
struct k3_batch_seq {
    struct k3_seq_cache *cache;
    const int32_t *ids;      /* [n] */
    int64_t n;
    int64_t logits_from;     /* n: no logits; n - 1: the last token's only; 0: all */
};

int64_t k3_forward_run_batch(struct k3_forward *f, const struct k3_batch_seq *seqs, int n_seqs,
                             float *logits, struct k3_err *err);

/* Tokens per slice (max_tok). */
int64_t k3_forward_slice_tokens(const struct k3_forward *f);

/* The vocabulary rows [v0, v1) this rank's logits hold ([0, vocab) unless
 * sharded with vocab_local). */
void k3_forward_vocab_range(const struct k3_forward *f, int64_t *v0, int64_t *v1);

/* Sharded runs: a call of k3_forward_run(_last, _batch) on one rank is
 * matched by a call (of any of them) on every other rank; a rank whose group
 * has nothing to run calls this. It returns -1 when some rank refused its
 * input in this call (as k3_forward_run does on every rank then), so that
 * all stop together. */
int k3_forward_idle(struct k3_forward *f);

#endif
