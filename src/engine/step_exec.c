/* step_exec.c - see step_exec.h. */
#include "engine/step_exec.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "engine/sample_dist.h"

int k3_step_exec_init(struct k3_step_exec *ex, const struct k3_model_config *cfg,
                      struct k3_forward *fwd, const struct k3_groups *groups, struct k3_comm *tp_comm,
                      MPI_Comm world,
                      int n_slots, int64_t max_ctx, int64_t max_new, struct k3_err *err)
{
    memset(ex, 0, sizeof *ex);
    ex->cfg = cfg;
    ex->fwd = fwd;
    ex->groups = groups;
    ex->tp_comm = tp_comm;
    ex->world = world;
    ex->max_new = max_new;
    ex->slots = calloc((size_t)n_slots, sizeof *ex->slots);
    ex->logits = malloc(sizeof(float) * (size_t)(max_new * cfg->vocab_size));
    if (!ex->slots || !ex->logits) {
        k3_step_exec_free(ex);
        return k3_err_set(err, "out of memory for %d cache slots", n_slots);
    }
    for (int i = 0; i < n_slots; i++, ex->n_slots++)
        if (k3_seq_cache_init(&ex->slots[i], cfg, max_ctx, err)) {
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
    free(ex->mine);
    memset(ex, 0, sizeof *ex);
}

int k3_step_exec_run(struct k3_step_exec *ex, const struct k3_step_plan *plan, struct k3_sampled *out)
{
    const struct k3_groups *g = ex->groups;
    K3_CHECK(plan->n_groups == g->adp, "a plan for %d groups on a job of %d", plan->n_groups, g->adp);
    int most = 0;
    for (int i = 0; i < plan->n_groups; i++) {
        int c = plan->group_first[i + 1] - plan->group_first[i];
        if (c > most) most = c;
    }
    if (ex->mine_cap < plan->n_seqs) {
        free(ex->mine);
        ex->mine = malloc(sizeof *ex->mine * (size_t)(plan->n_seqs + 1));
        K3_CHECK(ex->mine, "out of memory");
        ex->mine_cap = plan->n_seqs;
    }
    int first = plan->group_first[g->group], count = plan->group_first[g->group + 1] - first, n_mine = 0;
    int64_t v0, v1;
    k3_forward_vocab_range(ex->fwd, &v0, &v1);
    int64_t nv = v1 - v0;
    struct k3_comm *vocab_comm = nv < ex->cfg->vocab_size ? ex->tp_comm : NULL;
    for (int j = 0; j < most; j++) {
        if (j >= count) {
            K3_CHECK(k3_forward_idle(ex->fwd) == 0, "another rank refused its part of step %llu",
                     (unsigned long long)plan->step);
            continue;
        }
        const struct k3_plan_seq *s = &plan->seqs[first + j];
        K3_CHECK(s->kda_slot >= 0 && s->kda_slot < ex->n_slots && s->n_new <= ex->max_new,
                 "step %llu: sequence %llu has slot %d (of %d) and %d new tokens (at most %lld)",
                 (unsigned long long)plan->step, (unsigned long long)s->seq_id, s->kda_slot, ex->n_slots,
                 s->n_new, (long long)ex->max_new);
        K3_CHECK(!(s->flags & K3_SEQ_SAMPLE) || s->sampling.temperature == 0,
                 "step %llu: sequence %llu asks for temperature %g; this executor samples greedily",
                 (unsigned long long)plan->step, (unsigned long long)s->seq_id, s->sampling.temperature);
        struct k3_seq_cache *c = &ex->slots[s->kda_slot];
        if (s->flags & K3_SEQ_RESET) k3_seq_cache_reset(c, ex->cfg);
        K3_CHECK(c->n_past == s->pos0, "step %llu: sequence %llu starts at %d but its slot holds %lld tokens",
                 (unsigned long long)plan->step, (unsigned long long)s->seq_id, s->pos0, (long long)c->n_past);
        struct k3_err err;
        if (k3_forward_run(ex->fwd, c, plan->tokens + s->first_token, s->n_new, ex->logits, &err))
            K3_FATAL("step %llu, sequence %llu: %s", (unsigned long long)plan->step,
                     (unsigned long long)s->seq_id, err.msg);
        if (s->flags & K3_SEQ_SAMPLE) {
            struct k3_sampled m = {.seq = first + j};
            k3_dist_greedy(ex->logits + (int64_t)(s->n_new - 1) * nv, nv, v0, vocab_comm, &m.token, &m.logprob);
            if (g->tp_rank == 0) ex->mine[n_mine++] = m;
        }
    }
    return k3_plan_gather_sampled(plan, ex->world, 0, ex->mine, n_mine, out);
}
