/* step_exec.c - see step_exec.h. */
#include "engine/step_exec.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "mpi/mpi_check.h"

int k3_step_exec_init(struct k3_step_exec *ex, const struct k3_model_config *cfg,
                      struct k3_forward *fwd, const struct k3_groups *groups, struct k3_comm *tp_comm,
                      MPI_Comm world, const struct k3_step_exec_size *size, struct k3_err *err)
{
    int n_slots = size->n_slots;
    int64_t max_ctx = size->max_ctx, max_new = size->max_new;
    memset(ex, 0, sizeof *ex);
    ex->cfg = cfg;
    ex->fwd = fwd;
    ex->groups = groups;
    ex->tp_comm = tp_comm;
    ex->world = world;
    ex->max_new = max_new;
    ex->max_ctx = max_ctx;
    ex->slots = calloc((size_t)n_slots, sizeof *ex->slots);
    /* this rank's vocabulary slice only (the forward keeps logits local when sharded) */
    int64_t v0, v1;
    k3_forward_vocab_range(fwd, &v0, &v1);
    /* the last row of each sampled sequence: at most one per slot */
    ex->logits = malloc(sizeof(float) * (size_t)((n_slots + 1) * (v1 - v0)));
    ex->batch = malloc(sizeof *ex->batch * (size_t)(n_slots + 1));
    ex->hist = malloc(sizeof *ex->hist * (size_t)(n_slots * max_ctx));
    /* a group samples at most one token per slot in a step */
    ex->mine = malloc(sizeof *ex->mine * (size_t)(n_slots + 1));
    ex->mine_cap = n_slots;
    int world_size;
    K3_CHECK_MPI(MPI_Comm_size(world, &world_size));
    ex->gather_counts = malloc(sizeof *ex->gather_counts * 2 * (size_t)world_size);
    if (!ex->slots || !ex->logits || !ex->batch || !ex->hist || !ex->mine || !ex->gather_counts) {
        k3_step_exec_free(ex);
        return k3_err_set(err, "out of memory for %d cache slots", n_slots);
    }
    if (k3_sampler_init(&ex->sampler, v0, v1 - v0, cfg->vocab_size,
                        v1 - v0 < cfg->vocab_size ? tp_comm : NULL, err)) {
        k3_step_exec_free(ex);
        return -1;
    }
    if (size->n_blocks > 0 && k3_mla_pool_init(&ex->pool, cfg, size->n_blocks, size->block_tokens, err)) {
        k3_step_exec_free(ex);
        return -1;
    }
    for (int i = 0; i < n_slots; i++, ex->n_slots++)
        if (ex->pool.n_blocks ? k3_seq_cache_init_paged(&ex->slots[i], cfg, &ex->pool, err)
                              : k3_seq_cache_init(&ex->slots[i], cfg, max_ctx, err)) {
            k3_step_exec_free(ex);
            return -1;
        }
    return 0;
}

void k3_step_exec_free(struct k3_step_exec *ex)
{
    for (int i = 0; i < ex->n_slots; i++) k3_seq_cache_free(&ex->slots[i]);
    free(ex->slots);
    free(ex->logits);
    free(ex->batch);
    free(ex->mine);
    free(ex->hist);
    free(ex->gather_counts);
    if (ex->pool.layer) k3_mla_pool_free(&ex->pool);
    k3_sampler_free(&ex->sampler);
    memset(ex, 0, sizeof *ex);
}

/* Checks a sequence of this group's part of the plan and points its slot's
 * cache at its block table; returns the cache. */
static struct k3_seq_cache *seq_prepare(struct k3_step_exec *ex, const struct k3_step_plan *plan,
                                        const struct k3_plan_seq *s)
{
    K3_CHECK(s->kda_slot >= 0 && s->kda_slot < ex->n_slots && s->n_new <= ex->max_new,
             "step %llu: sequence %llu has slot %d (of %d) and %d new tokens (at most %lld)",
             (unsigned long long)plan->step, (unsigned long long)s->seq_id, s->kda_slot, ex->n_slots,
             s->n_new, (long long)ex->max_new);
    K3_CHECK(s->pos0 >= 0 && s->pos0 + s->n_new <= ex->max_ctx,
             "step %llu: sequence %llu runs to position %d (context %lld)", (unsigned long long)plan->step,
             (unsigned long long)s->seq_id, s->pos0 + s->n_new, (long long)ex->max_ctx);
    struct k3_seq_cache *c = &ex->slots[s->kda_slot];
    if (ex->pool.n_blocks) {
        const int32_t *bt = plan->blocks + s->first_block;
        K3_CHECK((int64_t)s->n_blocks * ex->pool.block_tokens >= s->pos0 + s->n_new,
                 "step %llu: sequence %llu runs to position %d with %d blocks of %lld tokens",
                 (unsigned long long)plan->step, (unsigned long long)s->seq_id, s->pos0 + s->n_new,
                 s->n_blocks, (long long)ex->pool.block_tokens);
        for (int b = 0; b < s->n_blocks; b++)
            K3_CHECK(bt[b] >= 0 && bt[b] < ex->pool.n_blocks, "step %llu: sequence %llu names block %d of %lld",
                     (unsigned long long)plan->step, (unsigned long long)s->seq_id, bt[b],
                     (long long)ex->pool.n_blocks);
        c->blocks = bt;
        c->n_blocks = s->n_blocks;
    }
    if (s->flags & K3_SEQ_RESET) k3_seq_cache_reset(c, ex->cfg);
    K3_CHECK(c->n_past == s->pos0, "step %llu: sequence %llu starts at %d but its slot holds %lld tokens",
             (unsigned long long)plan->step, (unsigned long long)s->seq_id, s->pos0, (long long)c->n_past);
    return c;
}

int k3_step_exec_run(struct k3_step_exec *ex, const struct k3_step_plan *plan, struct k3_sampled *out)
{
    const struct k3_groups *g = ex->groups;
    K3_CHECK(plan->n_groups == g->adp, "a plan for %d groups on a job of %d", plan->n_groups, g->adp);
    int first = plan->group_first[g->group], count = plan->group_first[g->group + 1] - first, n_mine = 0;
    K3_CHECK(count <= ex->mine_cap, "step %llu: %d sequences in a group of %d slots",
             (unsigned long long)plan->step, count, ex->mine_cap);
    int64_t nv = ex->sampler.nv;
    if (!count) { /* the other groups' batched calls have collectives this rank joins */
        K3_CHECK(k3_forward_idle(ex->fwd) == 0, "another rank refused its part of step %llu",
                 (unsigned long long)plan->step);
        return k3_plan_gather_sampled(plan, ex->world, 0, ex->mine, 0, out, ex->gather_counts);
    }
    /* The group's prefill chunks and decodes as one forward call: logits of
     * the last token of each sampled sequence, in plan order. (A prefill
     * chunk that samples nothing asks for none.) */
    for (int j = 0; j < count; j++) {
        const struct k3_plan_seq *s = &plan->seqs[first + j];
        struct k3_seq_cache *c = seq_prepare(ex, plan, s);
        for (int i = 0; i < j; i++)
            K3_CHECK(ex->batch[i].cache != c, "step %llu: sequence %llu shares slot %d with another",
                     (unsigned long long)plan->step, (unsigned long long)s->seq_id, s->kda_slot);
        ex->batch[j] = (struct k3_batch_seq){.cache = c, .ids = plan->tokens + s->first_token, .n = s->n_new,
                                             .logits_from = s->flags & K3_SEQ_SAMPLE ? s->n_new - 1 : s->n_new};
    }
    struct k3_err err;
    if (k3_forward_run_batch(ex->fwd, ex->batch, count, ex->logits, &err) < 0)
        K3_FATAL("step %llu: %s", (unsigned long long)plan->step, err.msg);
    int64_t row = 0;
    for (int j = 0; j < count; j++) {
        const struct k3_plan_seq *s = &plan->seqs[first + j];
        int32_t *hist = ex->hist + (int64_t)s->kda_slot * ex->max_ctx;
        memcpy(hist + s->pos0, plan->tokens + s->first_token, sizeof *hist * (size_t)s->n_new);
        if (!(s->flags & K3_SEQ_SAMPLE)) continue;
        struct k3_sample_hist h = {hist, s->pos0 + s->n_new, s->sampling.n_prompt};
        struct k3_sample_out o;
        k3_sampler_pick(&ex->sampler, &s->sampling, s->seq_id, ex->logits + row++ * nv, &h, s->pos0 + s->n_new,
                        &o);
        struct k3_sampled m = {.seq = first + j, .token = o.token, .logprob = o.logprob, .n_top = o.n_top};
        memcpy(m.top_ids, o.top_ids, sizeof m.top_ids);
        memcpy(m.top_logprobs, o.top_logprobs, sizeof m.top_logprobs);
        if (g->tp_rank == 0) ex->mine[n_mine++] = m;
    }
    return k3_plan_gather_sampled(plan, ex->world, 0, ex->mine, n_mine, out, ex->gather_counts);
}
