/* scheduler.c - see scheduler.h. */
#include "engine/scheduler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"

enum { REQ_QUEUED, REQ_RUNNING };

struct k3_req {
    uint64_t id, admitted;      /* admission order, for picking preemption victims */
    int state;
    int32_t *tokens;            /* [cap] prompt, then output */
    int n_prompt, n_tok, cap, max_out;
    int n_cached;               /* tokens in the caches; tokens[n_cached, n_tok) are still to feed */
    int group, slot;
    int32_t *blocks;            /* [blocks_for(cap)] this sequence's MLA block table */
    int n_blocks;
    uint64_t planned;           /* last step it is in (+1) */
    struct k3_sampling sampling;
    int32_t stop_ids[8];
    int n_stop_ids;
    struct k3_sched_callbacks cb;
    struct k3_sched_usage usage;
    struct k3_req *prev, *next; /* queue, or inbox */
};

struct group {
    struct k3_req **run;        /* [max_seqs] */
    int n_run;
    int *free_slots, n_free_slots;
    int32_t *free_blocks;
    int n_free_blocks;
    int budget;                 /* this step's tokens left */
    struct k3_req **ent;        /* [max_seqs] this step's sequences */
    int *ent_new;               /* [max_seqs] their new tokens */
    int n_ent;
    struct k3_req **cand, **cand_tmp; /* [max_seqs] decodes to plan, in admission order (and merge scratch) */
};

struct k3_sched {
    struct k3_sched_limits lim;
    struct group *g;
    struct k3_req *qhead, *qtail;
    int n_queued;
    uint64_t step, next_id, n_admitted;
    struct k3_req **planned;    /* [n_groups * max_seqs] plan index -> request */
    /* shared with other threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t wake;        /* signalled by submit and cancel (k3_sched_wait) */
    struct k3_req *inbox_head, *inbox_tail;
    uint64_t *cancels;
    int n_cancels, cancel_cap, n_waiting;
    struct k3_sched_stats stats;
};

const char *k3_finish_name(enum k3_finish f)
{
    switch (f) {
    case K3_FINISH_STOP: return "stop";
    case K3_FINISH_LENGTH: return "length";
    case K3_FINISH_CANCELLED: return "cancelled";
    case K3_FINISH_REJECTED: return "rejected";
    }
    return "?";
}

static int blocks_for(const struct k3_sched *s, int n_tok)
{
    return (n_tok + s->lim.block_tokens - 1) / s->lim.block_tokens;
}

int k3_sched_init(struct k3_sched **out, const struct k3_sched_limits *lim, struct k3_err *err)
{
    const struct k3_sched_limits *l = lim;
    if (l->n_groups < 1 || l->max_batch_tokens < 1 || l->max_seqs < 1 || l->prefill_chunk < 1 ||
        l->max_queue < 1 || l->context_tokens < 2 || l->kda_slots < 1 || l->block_tokens < 1 || l->n_blocks < 1)
        return k3_err_set(err, "scheduler limits: every count must be positive (groups %d, batch tokens %d, "
                          "seqs %d, chunk %d, queue %d, context %d, slots %d, block tokens %d, blocks %d)",
                          l->n_groups, l->max_batch_tokens, l->max_seqs, l->prefill_chunk, l->max_queue,
                          l->context_tokens, l->kda_slots, l->block_tokens, l->n_blocks);
    struct k3_sched *s = calloc(1, sizeof *s);
    if (!s) return k3_err_set(err, "out of memory");
    s->lim = *l;
    s->next_id = 1;
    pthread_mutex_init(&s->mu, NULL);
    /* monotonic, so that a wall-clock jump neither ends nor prolongs a wait */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    s->g = calloc((size_t)l->n_groups, sizeof *s->g);
    s->planned = calloc((size_t)l->n_groups * (size_t)l->max_seqs, sizeof *s->planned);
    int ok = s->g && s->planned;
    for (int i = 0; ok && i < l->n_groups; i++) {
        struct group *g = &s->g[i];
        g->run = calloc((size_t)l->max_seqs, sizeof *g->run);
        g->ent = calloc((size_t)l->max_seqs, sizeof *g->ent);
        g->ent_new = calloc((size_t)l->max_seqs, sizeof *g->ent_new);
        g->free_slots = calloc((size_t)l->kda_slots, sizeof *g->free_slots);
        g->free_blocks = calloc((size_t)l->n_blocks, sizeof *g->free_blocks);
        g->cand = calloc((size_t)l->max_seqs, sizeof *g->cand);
        g->cand_tmp = calloc((size_t)l->max_seqs, sizeof *g->cand_tmp);
        ok = g->run && g->ent && g->ent_new && g->free_slots && g->free_blocks && g->cand && g->cand_tmp;
        if (!ok) break;
        for (int j = 0; j < l->kda_slots; j++) g->free_slots[g->n_free_slots++] = l->kda_slots - 1 - j;
        for (int j = 0; j < l->n_blocks; j++) g->free_blocks[g->n_free_blocks++] = l->n_blocks - 1 - j;
    }
    if (!ok) {
        k3_sched_free(s);
        return k3_err_set(err, "out of memory for the scheduler");
    }
    s->stats.total_slots = s->stats.free_slots = l->n_groups * l->kda_slots;
    s->stats.total_blocks = s->stats.free_blocks = l->n_groups * l->n_blocks;
    *out = s;
    return 0;
}

static void req_free(struct k3_req *r)
{
    free(r->tokens);
    free(r->blocks);
    free(r);
}

void k3_sched_free(struct k3_sched *s)
{
    if (!s) return;
    for (int i = 0; s->g && i < s->lim.n_groups; i++) {
        struct group *g = &s->g[i];
        for (int j = 0; g->run && j < g->n_run; j++) req_free(g->run[j]);
        free(g->run), free(g->ent), free(g->ent_new), free(g->free_slots), free(g->free_blocks);
        free(g->cand), free(g->cand_tmp);
    }
    for (struct k3_req *r = s->qhead, *n; r; r = n) n = r->next, req_free(r);
    for (struct k3_req *r = s->inbox_head, *n; r; r = n) n = r->next, req_free(r);
    free(s->g);
    free(s->planned);
    free(s->cancels);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
}

uint64_t k3_sched_submit(struct k3_sched *s, const struct k3_sched_request *q, struct k3_err *err)
{
    int cap = q->n_prompt + (q->max_tokens > 0 ? q->max_tokens : s->lim.context_tokens);
    if (cap > s->lim.context_tokens) cap = s->lim.context_tokens;
    if (q->n_prompt < 1 || q->n_stop_ids < 0 || q->n_stop_ids > 8) {
        k3_err_set(err, "a request needs at least one prompt token and at most 8 stop ids");
        return 0;
    }
    if (q->n_prompt >= s->lim.context_tokens || blocks_for(s, cap) > s->lim.n_blocks) {
        k3_err_set(err, "a prompt of %d tokens does not fit the context (%d tokens, %d blocks of %d per group)",
                   q->n_prompt, s->lim.context_tokens, s->lim.n_blocks, s->lim.block_tokens);
        return 0;
    }
    struct k3_req *r = calloc(1, sizeof *r);
    if (r) {
        r->tokens = malloc(sizeof *r->tokens * (size_t)cap);
        r->blocks = malloc(sizeof *r->blocks * (size_t)blocks_for(s, cap));
    }
    if (!r || !r->tokens || !r->blocks) {
        if (r) req_free(r);
        k3_err_set(err, "out of memory for a request");
        return 0;
    }
    memcpy(r->tokens, q->prompt, sizeof *r->tokens * (size_t)q->n_prompt);
    r->n_prompt = r->n_tok = q->n_prompt;
    r->cap = cap;
    r->max_out = cap - q->n_prompt;
    r->sampling = q->sampling;
    r->sampling.n_prompt = q->n_prompt;
    memcpy(r->stop_ids, q->stop_ids, sizeof r->stop_ids);
    r->n_stop_ids = q->n_stop_ids;
    r->cb = q->cb;
    r->usage.prompt_tokens = q->n_prompt;
    r->slot = -1;
    pthread_mutex_lock(&s->mu);
    if (s->n_waiting >= s->lim.max_queue) {
        pthread_mutex_unlock(&s->mu);
        req_free(r);
        k3_err_set(err, "the queue is full (%d requests); retry later", s->lim.max_queue);
        return 0;
    }
    uint64_t id = r->id = s->next_id++;
    s->n_waiting++;
    if (s->inbox_tail) s->inbox_tail->next = r;
    else s->inbox_head = r;
    s->inbox_tail = r;
    s->stats.submitted++;
    s->stats.queued++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return id;
}

void k3_sched_cancel(struct k3_sched *s, uint64_t id)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_cancels == s->cancel_cap) {
        int cap = s->cancel_cap ? 2 * s->cancel_cap : 16;
        uint64_t *c = realloc(s->cancels, sizeof *c * (size_t)cap);
        if (c) s->cancels = c, s->cancel_cap = cap;
    }
    if (s->n_cancels < s->cancel_cap) s->cancels[s->n_cancels++] = id;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void k3_sched_stats(struct k3_sched *s, struct k3_sched_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

static int busy_locked(const struct k3_sched *s)
{
    return s->stats.queued + s->stats.running > 0 || s->n_cancels > 0;
}

int k3_sched_busy(struct k3_sched *s)
{
    pthread_mutex_lock(&s->mu);
    int busy = busy_locked(s);
    pthread_mutex_unlock(&s->mu);
    return busy;
}

int k3_sched_wait(struct k3_sched *s, double timeout_s)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long ns = until.tv_nsec + (long long)(timeout_s * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (!busy_locked(s) && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->wake, &s->mu, &until);
    int busy = busy_locked(s);
    pthread_mutex_unlock(&s->mu);
    return busy;
}

/* ---- step thread ---- */

static void q_unlink(struct k3_sched *s, struct k3_req *r)
{
    if (r->prev) r->prev->next = r->next;
    else s->qhead = r->next;
    if (r->next) r->next->prev = r->prev;
    else s->qtail = r->prev;
    r->prev = r->next = NULL;
    s->n_queued--;
}

static void q_push(struct k3_sched *s, struct k3_req *r, int front)
{
    r->prev = r->next = NULL;
    if (!s->qhead) s->qhead = s->qtail = r;
    else if (front) r->next = s->qhead, s->qhead->prev = r, s->qhead = r;
    else r->prev = s->qtail, s->qtail->next = r, s->qtail = r;
    s->n_queued++;
}

/* Returns a running request's slot and blocks to its group. */
static void release(struct k3_sched *s, struct k3_req *r)
{
    struct group *g = &s->g[r->group];
    for (int i = 0; i < g->n_run; i++)
        if (g->run[i] == r) {
            g->run[i] = g->run[--g->n_run];
            break;
        }
    g->free_slots[g->n_free_slots++] = r->slot;
    while (r->n_blocks) g->free_blocks[g->n_free_blocks++] = r->blocks[--r->n_blocks];
    r->slot = -1;
    r->state = REQ_QUEUED;
}

static void finish(struct k3_sched *s, struct k3_req *r, enum k3_finish why)
{
    if (r->state == REQ_RUNNING) release(s, r);
    if (r->cb.on_finish) r->cb.on_finish(r->cb.ctx, r->id, why, &r->usage);
    pthread_mutex_lock(&s->mu);
    s->stats.finished++;
    s->stats.cancelled += why == K3_FINISH_CANCELLED;
    pthread_mutex_unlock(&s->mu);
    req_free(r);
}

/* Frees r's memory and puts it at the front of the queue, to be recomputed. */
static void preempt(struct k3_sched *s, struct k3_req *r)
{
    release(s, r);
    r->n_cached = 0;
    r->usage.preemptions++;
    q_push(s, r, 1);
    pthread_mutex_lock(&s->mu);
    s->stats.preemptions++;
    s->n_waiting++;
    pthread_mutex_unlock(&s->mu);
}

/* The group's latest-admitted running request not yet in this step, or NULL. */
static struct k3_req *victim(struct k3_sched *s, struct group *g, const struct k3_req *after)
{
    struct k3_req *v = NULL;
    for (int i = 0; i < g->n_run; i++) {
        struct k3_req *r = g->run[i];
        if (r->planned == s->step + 1 || r == after || r->admitted < after->admitted) continue;
        if (!v || r->admitted > v->admitted) v = r;
    }
    return v;
}

/* Gives r blocks for n_tok cached tokens, preempting later-admitted requests
 * of its group if need be. Returns 0, or -1 when it cannot. */
static int grow_blocks(struct k3_sched *s, struct k3_req *r, int n_tok)
{
    struct group *g = &s->g[r->group];
    int need = blocks_for(s, n_tok) - r->n_blocks;
    while (need > g->n_free_blocks) {
        struct k3_req *v = victim(s, g, r);
        if (!v) return -1;
        preempt(s, v);
    }
    for (; need > 0; need--) r->blocks[r->n_blocks++] = g->free_blocks[--g->n_free_blocks];
    return 0;
}

static void add_entry(struct k3_sched *s, struct k3_req *r, int n_new)
{
    struct group *g = &s->g[r->group];
    g->ent[g->n_ent] = r;
    g->ent_new[g->n_ent++] = n_new;
    g->budget -= n_new;
    r->planned = s->step + 1;
}

/* The prefill chunk r may take in its group now (0: none). */
static int chunk_for(struct k3_sched *s, struct k3_req *r)
{
    struct group *g = &s->g[r->group];
    int n = r->n_tok - r->n_cached;
    if (n > s->lim.prefill_chunk) n = s->lim.prefill_chunk;
    if (n > g->budget) n = g->budget;
    while (n > 0 && grow_blocks(s, r, r->n_cached + n)) {
        /* what the free blocks hold */
        int room = (r->n_blocks + g->n_free_blocks) * s->lim.block_tokens - r->n_cached;
        n = room < n ? room : n - 1;
    }
    return n > 0 ? n : 0;
}

static void drain_inbox(struct k3_sched *s)
{
    pthread_mutex_lock(&s->mu);
    struct k3_req *in = s->inbox_head;
    s->inbox_head = s->inbox_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    for (struct k3_req *n; in; in = n) {
        n = in->next;
        q_push(s, in, 0);
    }
    for (;;) {
        pthread_mutex_lock(&s->mu);
        uint64_t id = s->n_cancels ? s->cancels[--s->n_cancels] : 0;
        pthread_mutex_unlock(&s->mu);
        if (!id) break;
        struct k3_req *hit = NULL;
        for (struct k3_req *r = s->qhead; r && !hit; r = r->next)
            if (r->id == id) hit = r;
        if (hit) {
            q_unlink(s, hit);
            pthread_mutex_lock(&s->mu);
            s->n_waiting--;
            pthread_mutex_unlock(&s->mu);
        }
        for (int gi = 0; gi < s->lim.n_groups && !hit; gi++)
            for (int i = 0; i < s->g[gi].n_run && !hit; i++)
                if (s->g[gi].run[i]->id == id) hit = s->g[gi].run[i];
        if (hit) finish(s, hit, K3_FINISH_CANCELLED);
    }
}

static void update_stats(struct k3_sched *s)
{
    int running = 0, slots = 0, blocks = 0;
    for (int i = 0; i < s->lim.n_groups; i++)
        running += s->g[i].n_run, slots += s->g[i].n_free_slots, blocks += s->g[i].n_free_blocks;
    pthread_mutex_lock(&s->mu);
    s->stats.steps = s->step;
    s->stats.running = running;
    s->stats.queued = s->n_waiting;
    s->stats.free_slots = slots;
    s->stats.free_blocks = blocks;
    pthread_mutex_unlock(&s->mu);
}

/* Bottom-up merge sort of a[0, n) by admission order (tmp: n entries); no
 * allocation, n log n, so that a step at 256 sequences stays well under 1 ms. */
static void sort_by_admission(struct k3_req **a, struct k3_req **tmp, int n)
{
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = a[i]->admitted <= a[j]->admitted ? a[i++] : a[j++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, sizeof *a * (size_t)n);
    }
}

void k3_sched_build(struct k3_sched *s, struct k3_step_plan *plan)
{
    drain_inbox(s);
    int ng = s->lim.n_groups;
    for (int i = 0; i < ng; i++) s->g[i].budget = s->lim.max_batch_tokens, s->g[i].n_ent = 0;
    /* 1. decodes, earliest admitted first (they keep their blocks under preemption) */
    for (int gi = 0; gi < ng; gi++) {
        struct group *g = &s->g[gi];
        int n_cand = 0;
        for (int i = 0; i < g->n_run; i++) {
            struct k3_req *r = g->run[i];
            if (r->n_cached > 0 && r->n_tok - r->n_cached == 1) g->cand[n_cand++] = r;
        }
        sort_by_admission(g->cand, g->cand_tmp, n_cand);
        for (int i = 0; i < n_cand && g->budget > 0; i++) {
            struct k3_req *r = g->cand[i];
            if (r->state != REQ_RUNNING) continue; /* preempted for an earlier one */
            if (grow_blocks(s, r, r->n_tok)) preempt(s, r);
            else add_entry(s, r, 1);
        }
        /* 2. prefills in progress */
        for (int i = 0; i < g->n_run && g->budget > 0; i++) {
            struct k3_req *r = g->run[i];
            if (r->planned == s->step + 1) continue;
            int n = chunk_for(s, r);
            if (n > 0) add_entry(s, r, n);
        }
    }
    /* 3. admission in arrival order, into the group with the most budget left */
    while (s->qhead) {
        struct k3_req *r = s->qhead;
        int best = -1;
        for (int gi = 0; gi < ng; gi++) {
            struct group *g = &s->g[gi];
            if (!g->n_free_slots || g->n_run >= s->lim.max_seqs || g->budget <= 0 || !g->n_free_blocks) continue;
            if (best < 0 || g->budget > s->g[best].budget) best = gi;
        }
        if (best < 0) break;
        struct group *g = &s->g[best];
        q_unlink(s, r);
        r->state = REQ_RUNNING;
        r->group = best;
        r->slot = g->free_slots[--g->n_free_slots];
        r->admitted = ++s->n_admitted;
        g->run[g->n_run++] = r;
        pthread_mutex_lock(&s->mu);
        s->n_waiting--;
        pthread_mutex_unlock(&s->mu);
        int n = chunk_for(s, r);
        if (n > 0) add_entry(s, r, n);
        else break; /* no room this step; it keeps its slot and goes first next step */
    }
    /* the plan, in group order */
    k3_plan_reset(plan, s->step, ng);
    struct k3_err err;
    for (int gi = 0; gi < ng; gi++) {
        struct group *g = &s->g[gi];
        for (int e = 0; e < g->n_ent; e++) {
            struct k3_req *r = g->ent[e];
            if (r->state != REQ_RUNNING || r->planned != s->step + 1) continue; /* preempted after planning */
            int n = g->ent_new[e];
            struct k3_plan_seq q = {.seq_id = r->id, .group = gi, .kda_slot = r->slot, .pos0 = r->n_cached,
                                    .n_new = n, .n_blocks = r->n_blocks, .sampling = r->sampling};
            if (r->n_cached == 0) q.flags |= K3_SEQ_RESET;
            if (n > 1 || r->n_cached == 0) q.flags |= K3_SEQ_PREFILL;
            if (r->n_cached + n == r->n_tok) q.flags |= K3_SEQ_SAMPLE;
            s->planned[plan->n_seqs] = r;
            K3_CHECK(k3_plan_add(plan, &q, r->tokens + r->n_cached, r->blocks, &err) == 0, "%s", err.msg);
        }
    }
    s->step++;
    update_stats(s);
}

void k3_sched_complete(struct k3_sched *s, const struct k3_step_plan *plan, const struct k3_sampled *got, int n)
{
    uint64_t pre = 0, dec = 0;
    for (int i = 0; i < plan->n_seqs; i++) {
        struct k3_req *r = s->planned[i];
        r->n_cached += plan->seqs[i].n_new;
        if (plan->seqs[i].flags & K3_SEQ_PREFILL) pre += (uint64_t)plan->seqs[i].n_new;
        else dec += (uint64_t)plan->seqs[i].n_new;
    }
    for (int j = 0; j < n; j++) {
        K3_CHECK(got[j].seq >= 0 && got[j].seq < plan->n_seqs, "a sampled token for sequence %d of %d", got[j].seq,
                 plan->n_seqs);
        struct k3_req *r = s->planned[got[j].seq];
        r->tokens[r->n_tok++] = got[j].token;
        r->usage.completion_tokens++;
        int stop = r->cb.on_token ? r->cb.on_token(r->cb.ctx, r->id, &got[j]) : 0;
        for (int k = 0; k < r->n_stop_ids; k++) stop |= got[j].token == r->stop_ids[k];
        if (stop) finish(s, r, K3_FINISH_STOP);
        else if (r->n_tok - r->n_prompt >= r->max_out || r->n_tok >= r->cap) finish(s, r, K3_FINISH_LENGTH);
    }
    pthread_mutex_lock(&s->mu);
    s->stats.prefill_tokens += pre;
    s->stats.decode_tokens += dec;
    pthread_mutex_unlock(&s->mu);
    update_stats(s);
}
