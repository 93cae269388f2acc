/* gen.c - one generation request between an API module and the scheduler (see gen.h).
 *
 * The step thread owns the parsing state (detokenizer, output parser, stop-string buffer)
 * and touches it only in the callbacks; what is ready goes, under the request's mutex,
 * into `pend` (taken by k3_gen_wait) and `res` (the whole answer). */
#include "server/gen.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/grow.h"
#include "core/log.h"
#include "server/srv_internal.h"

struct k3_gen {
    struct k3_srv *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                     /* module + scheduler; under mu */
    uint64_t id;                  /* the scheduler's id (under srv->mu) */
    struct k3_gen *prev, *next;   /* srv->active (under srv->mu) */
    int prompt_tokens, logprobs, parse, thinking;
    double t_submit;
    /* step thread only */
    struct k3_detok dt;
    struct k3_outp *outp;
    struct k3_outp_delta scratch; /* what one token completed */
    char *stops[K3_GEN_MAX_STOPS];
    int n_stops;
    char **tool_names;            /* copies: the parser may outlive the module's request */
    size_t n_tool_names;
    struct k3_sbuf vis;           /* visible text: [0, n_released) released, the rest held */
    size_t n_released;
    int stopped;                  /* a stop string matched */
    int stop_matched;             /* 1 + which one (gen.h) */
    int think_over;               /* content or a tool call appeared */
    int n_reasoning, n_tokens;
    /* shared, under mu */
    struct k3_gen_events pend;
    struct k3_gen_result res;
    int done;
};

static void result_free(struct k3_gen_result *r)
{
    k3_sbuf_free(&r->reasoning);
    k3_sbuf_free(&r->content);
    for (size_t i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        k3_sbuf_free(&r->calls[i].args);
    }
    free(r->calls);
}

static void gen_free(struct k3_gen *g)
{
    if (g->outp) k3_outp_free(g->outp);
    k3_outp_delta_free(&g->scratch);
    for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
    for (size_t i = 0; i < g->n_tool_names; i++) free(g->tool_names[i]);
    free(g->tool_names);
    k3_sbuf_free(&g->vis);
    k3_gen_events_free(&g->pend);
    result_free(&g->res);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

static void unref(struct k3_gen *g)
{
    pthread_mutex_lock(&g->mu);
    int left = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (!left) gen_free(g);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    K3_CHECK(d, "out of memory");
    memcpy(d, s, n + 1);
    return d;
}

/* --- step thread --- */

/* Moves a tool delta into pend (a copy) and into the result. Under mu. */
static void take_tool(struct k3_gen *g, const struct k3_outp_tool_delta *t)
{
    struct k3_outp_delta *d = &g->pend.delta;
    d->tools = k3_grow(d->tools, &d->cap_tools, d->n_tools + 1, sizeof *d->tools, 4, "tool deltas");
    struct k3_outp_tool_delta *c = &d->tools[d->n_tools++];
    memset(c, 0, sizeof *c);
    c->index = t->index, c->first = t->first;
    memcpy(c->id, t->id, sizeof c->id);
    c->name = t->name ? dup_str(t->name) : NULL;
    k3_sbuf_add(&c->args, t->args.p ? t->args.p : "", t->args.n);
    struct k3_gen_result *r = &g->res;
    if (t->first || (size_t)t->index >= r->n_calls) {
        r->calls = k3_grow(r->calls, &r->cap_calls, r->n_calls + 1, sizeof *r->calls, 4, "tool calls");
        struct k3_gen_call *call = &r->calls[r->n_calls++];
        memset(call, 0, sizeof *call);
        memcpy(call->id, t->id, sizeof call->id);
        call->name = dup_str(t->name ? t->name : "");
    }
    struct k3_gen_call *call = &r->calls[(size_t)t->index < r->n_calls ? (size_t)t->index : r->n_calls - 1];
    k3_sbuf_add(&call->args, t->args.p ? t->args.p : "", t->args.n);
}

/* The longest suffix of vis that is a proper prefix of a stop string: held back. */
static size_t held_suffix(const struct k3_gen *g)
{
    size_t best = 0;
    for (int i = 0; i < g->n_stops; i++) {
        size_t m = strlen(g->stops[i]);
        for (size_t k = m - 1; k > best; k--)
            if (k <= g->vis.n - g->n_released && !memcmp(g->vis.p + g->vis.n - k, g->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Appends visible text, applies stop strings; returns the bytes that may be released now
 * (from n_released). at_end: release everything held that is not a stop. */
static size_t visible(struct k3_gen *g, const char *text, size_t len, int at_end)
{
    if (g->stopped) return 0;
    size_t from = g->vis.n;
    k3_sbuf_add(&g->vis, text, len);
    for (int i = 0; i < g->n_stops; i++) {
        size_t m = strlen(g->stops[i]);
        size_t start = from >= m ? from - m + 1 : 0;
        if (start < g->n_released) start = g->n_released;
        if (g->vis.n < m) continue;
        for (size_t p = start; p + m <= g->vis.n; p++)
            if (!memcmp(g->vis.p + p, g->stops[i], m)) {
                g->stopped = 1;
                g->stop_matched = i + 1;
                g->vis.n = p;
                break;
            }
        if (g->stopped) break;
    }
    size_t keep = g->stopped || at_end ? 0 : held_suffix(g);
    return g->vis.n - keep - g->n_released;
}

/* Publishes what the step produced (g->scratch + visible text) and logprob. */
static void publish(struct k3_gen *g, const struct k3_sampled *t, int finished)
{
    struct k3_outp_delta *s = &g->scratch;
    size_t vis_new = 0;
    if (g->parse) {
        if (s->content.n || finished) vis_new = visible(g, s->content.p ? s->content.p : "", s->content.n, finished);
    } else {
        /* raw text: the visible text is all of it */
        vis_new = visible(g, s->content.p ? s->content.p : "", s->content.n, finished);
    }
    pthread_mutex_lock(&g->mu);
    if (s->reasoning.n && !g->stopped) {
        k3_sbuf_add(&g->pend.delta.reasoning, s->reasoning.p, s->reasoning.n);
        k3_sbuf_add(&g->res.reasoning, s->reasoning.p, s->reasoning.n);
    }
    if (vis_new) {
        const char *p = g->vis.p + g->n_released;
        k3_sbuf_add(&g->pend.delta.content, p, vis_new);
        k3_sbuf_add(&g->res.content, p, vis_new);
        g->n_released += vis_new;
    }
    if (!g->stopped || finished)
        for (size_t i = 0; i < s->n_tools; i++) take_tool(g, &s->tools[i]);
    if (t && g->logprobs) {
        struct k3_gen_events *e = &g->pend;
        e->lp = k3_grow(e->lp, &e->cap_lp, e->n_lp + 1, sizeof *e->lp, 16, "logprobs");
        struct k3_gen_logprob *l = &e->lp[e->n_lp++];
        l->token = t->token, l->logprob = t->logprob;
        l->n_top = t->n_top < K3_PLAN_TOP_MAX ? t->n_top : K3_PLAN_TOP_MAX;
        memcpy(l->top_ids, t->top_ids, sizeof l->top_ids);
        memcpy(l->top_logprobs, t->top_logprobs, sizeof l->top_logprobs);
    }
    g->pend.n_tokens = g->n_tokens;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    k3_outp_delta_clear(s);
}

static int on_token(void *ctx, uint64_t id, const struct k3_sampled *t)
{
    struct k3_gen *g = ctx;
    (void)id;
    if (g->n_tokens++ == 0) k3_metrics_ttft(&g->srv->metrics, k3_now_s() - g->t_submit);
    if (g->parse) {
        k3_outp_feed_ids(g->outp, &g->dt, &t->token, 1, &g->scratch);
        if (g->scratch.content.n || g->scratch.n_tools) g->think_over = 1;
        if (g->thinking && !g->think_over) g->n_reasoning++;
    } else if (!k3_tok_is_special(g->srv->tok, t->token)) {
        char buf[K3_DETOK_MAX_OUT + 8];
        int n = k3_detok_push(&g->dt, t->token, buf);
        if (n > 0) k3_sbuf_add(&g->scratch.content, buf, (size_t)n);
    }
    publish(g, t, 0);
    return g->stopped;
}

static void on_finish(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *u)
{
    struct k3_gen *g = ctx;
    (void)id;
    char tail[16];
    int n = k3_detok_flush(&g->dt, tail);
    if (g->parse) {
        if (n > 0) k3_outp_feed(g->outp, tail, (size_t)n, &g->scratch);
        k3_outp_finish(g->outp, why == K3_FINISH_LENGTH ? K3_OUTP_LENGTH : K3_OUTP_STOP, &g->scratch);
    } else if (n > 0) {
        k3_sbuf_add(&g->scratch.content, tail, (size_t)n);
    }
    publish(g, NULL, 1);
    const char *finish = NULL, *error = NULL;
    if (why == K3_FINISH_CANCELLED) error = "cancelled";
    else if (why == K3_FINISH_REJECTED) error = "rejected";
    else if (g->parse) finish = k3_outp_result(g->outp)->finish_reason;
    else finish = why == K3_FINISH_LENGTH ? "length" : "stop";
    if (finish && g->stopped) finish = g->res.n_calls ? "tool_calls" : "stop";
    struct k3_gen_usage usage = {.prompt_tokens = g->prompt_tokens,
                                 .completion_tokens = u->completion_tokens,
                                 .reasoning_tokens = g->n_reasoning < u->completion_tokens ? g->n_reasoning
                                                                                           : u->completion_tokens};
    k3_metrics_finish(&g->srv->metrics, finish ? finish : "cancelled", usage.prompt_tokens,
                      usage.completion_tokens, usage.reasoning_tokens);
    struct k3_srv *s = g->srv;
    pthread_mutex_lock(&s->mu);
    if (g->prev) g->prev->next = g->next;
    else s->active = g->next;
    if (g->next) g->next->prev = g->prev;
    s->n_active--;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&g->mu);
    g->done = 1;
    g->pend.done = 1;
    g->pend.finish_reason = finish;
    g->pend.error = error;
    g->pend.stop_matched = g->stop_matched;
    g->pend.usage = usage;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    unref(g); /* the scheduler's reference: no callback touches g after this */
}

/* --- module side --- */

static int fail(struct k3_api_err *e, int status, const char *type, const char *param, const char *msg)
{
    memset(e, 0, sizeof *e);
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->message, sizeof e->message, "%s", msg);
    return -1;
}

int k3_gen_start(struct k3_srv *s, const struct k3_gen_params *p, struct k3_gen **out,
                 struct k3_api_err *e)
{
    char msg[512];
    *out = NULL;
    if (!s->sched) return fail(e, 503, "server_error", NULL, "no engine is running");
    if (p->n_prompt < 1) return fail(e, 400, "invalid_request_error", "prompt", "the prompt is empty");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (s->cfg.vocab_size > 0 && p->prompt[i] >= s->cfg.vocab_size)) {
            snprintf(msg, sizeof msg, "token id %d is outside the vocabulary (%d ids)", p->prompt[i],
                     s->cfg.vocab_size);
            return fail(e, 400, "invalid_request_error", "prompt", msg);
        }
    int ctx = s->cfg.context_tokens;
    if (ctx > 0 && p->n_prompt >= ctx) {
        snprintf(msg, sizeof msg,
                 "the prompt has %d tokens and the context window %d: no room for an answer "
                 "(shorten the messages; context window exceeded)", p->n_prompt, ctx);
        return fail(e, 400, "invalid_request_error", "messages", msg);
    }
    int max_tokens = p->max_tokens > 0 ? p->max_tokens : 0;
    if (ctx > 0 && (max_tokens == 0 || max_tokens > ctx - p->n_prompt)) max_tokens = ctx - p->n_prompt;

    struct k3_gen *g = calloc(1, sizeof *g);
    K3_CHECK(g, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    g->srv = s;
    g->refs = 2;
    g->prompt_tokens = p->prompt_tokens;
    g->logprobs = p->logprobs;
    g->parse = p->parse;
    g->thinking = p->parse && p->outp.thinking;
    k3_detok_init(&g->dt, s->tok);
    if (p->parse) {
        struct k3_outp_cfg oc = p->outp;
        if (oc.tool_names) {
            g->tool_names = calloc(oc.n_tool_names + 1, sizeof *g->tool_names);
            K3_CHECK(g->tool_names, "out of memory");
            for (size_t i = 0; i < oc.n_tool_names; i++) g->tool_names[i] = dup_str(oc.tool_names[i]);
            g->n_tool_names = oc.n_tool_names;
            oc.tool_names = (const char *const *)g->tool_names;
        }
        g->outp = k3_outp_new(&oc);
    }
    for (int i = 0; i < p->n_stops && i < K3_GEN_MAX_STOPS; i++)
        if (p->stops[i] && p->stops[i][0]) g->stops[g->n_stops++] = dup_str(p->stops[i]);

    struct k3_sched_request q = {.prompt = p->prompt, .n_prompt = p->n_prompt, .max_tokens = max_tokens,
                                 .sampling = p->sampling, .cb = {on_token, on_finish, g}};
    q.sampling.n_prompt = p->n_prompt;
    if (p->n_stop_ids > 0) {
        q.n_stop_ids = p->n_stop_ids < 8 ? p->n_stop_ids : 8;
        memcpy(q.stop_ids, p->stop_ids, sizeof(int32_t) * (size_t)q.n_stop_ids);
    } else {
        q.n_stop_ids = s->n_end_ids;
        memcpy(q.stop_ids, s->end_ids, sizeof(int32_t) * (size_t)s->n_end_ids);
    }

    /* Into the active list before submitting: on_finish may run before submit returns. */
    pthread_mutex_lock(&s->mu);
    if (s->draining || s->n_active >= s->cfg.max_active) {
        int draining = s->draining;
        pthread_mutex_unlock(&s->mu);
        gen_free(g);
        return draining ? fail(e, 503, "server_error", NULL, "the server is shutting down")
                        : fail(e, 429, "rate_limit_error", NULL,
                               "too many requests in flight; retry later");
    }
    g->next = s->active;
    if (s->active) s->active->prev = g;
    s->active = g;
    s->n_active++;
    g->t_submit = k3_now_s();
    pthread_mutex_unlock(&s->mu);

    struct k3_err err;
    uint64_t id = k3_sched_submit(s->sched, &q, &err);
    pthread_mutex_lock(&s->mu);
    if (!id) {
        if (g->prev) g->prev->next = g->next;
        else s->active = g->next;
        if (g->next) g->next->prev = g->prev;
        s->n_active--;
        pthread_mutex_unlock(&s->mu);
        gen_free(g);
        if (strstr(err.msg, "does not fit")) {
            snprintf(msg, sizeof msg, "%.300s: the context window has no room for it (shorten the messages)",
                     err.msg);
            return fail(e, 400, "invalid_request_error", "messages", msg);
        }
        snprintf(msg, sizeof msg, "the engine cannot take the request now: %.400s", err.msg);
        return fail(e, 429, "rate_limit_error", NULL, msg);
    }
    g->id = id;
    pthread_mutex_unlock(&s->mu);
    *out = g;
    return 0;
}

static int pend_empty(const struct k3_gen_events *p)
{
    return !p->delta.reasoning.n && !p->delta.content.n && !p->delta.n_tools && !p->n_lp;
}

int k3_gen_wait(struct k3_gen *g, double timeout_s, struct k3_gen_events *ev)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + (timeout_s > 0 ? timeout_s : 0);
    until.tv_sec = (time_t)t;
    until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&g->mu);
    while (!g->done && pend_empty(&g->pend) && !ev->done)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT) break;
    int got = !pend_empty(&g->pend) || (g->done && !ev->done);
    struct k3_gen_events *p = &g->pend;
    k3_sbuf_add(&ev->delta.reasoning, p->delta.reasoning.p ? p->delta.reasoning.p : "", p->delta.reasoning.n);
    k3_sbuf_add(&ev->delta.content, p->delta.content.p ? p->delta.content.p : "", p->delta.content.n);
    for (size_t i = 0; i < p->delta.n_tools; i++) {
        ev->delta.tools = k3_grow(ev->delta.tools, &ev->delta.cap_tools, ev->delta.n_tools + 1,
                                  sizeof *ev->delta.tools, 4, "tool deltas");
        ev->delta.tools[ev->delta.n_tools++] = p->delta.tools[i]; /* moved */
    }
    p->delta.n_tools = 0;
    for (size_t i = 0; i < p->n_lp; i++) {
        ev->lp = k3_grow(ev->lp, &ev->cap_lp, ev->n_lp + 1, sizeof *ev->lp, 16, "logprobs");
        ev->lp[ev->n_lp++] = p->lp[i];
    }
    p->n_lp = 0;
    k3_outp_delta_clear(&p->delta);
    ev->n_tokens = p->n_tokens;
    if (g->done) {
        ev->done = 1;
        ev->finish_reason = p->finish_reason;
        ev->error = p->error;
        ev->usage = p->usage;
        ev->stop_matched = p->stop_matched;
    }
    pthread_mutex_unlock(&g->mu);
    return got;
}

int k3_gen_wait_all(struct k3_gen *g, const struct k3_srv_resp *out, double idle_timeout_s,
                    struct k3_gen_events *ev)
{
    const double poll_s = 0.25; /* how soon a client that left is noticed */
    double idle = 0;
    for (;;) {
        int got = k3_gen_wait(g, poll_s, ev);
        if (ev->done) return 0;
        idle = got ? 0 : idle + poll_s;
        if (idle >= idle_timeout_s) return -1;
        if (out->client_alive && !out->client_alive(out->client_ctx)) {
            k3_gen_cancel(g);
            return -2;
        }
    }
}

const struct k3_gen_result *k3_gen_result(struct k3_gen *g)
{
    pthread_mutex_lock(&g->mu);
    int done = g->done;
    pthread_mutex_unlock(&g->mu);
    return done ? &g->res : NULL;
}

void k3_gen_cancel(struct k3_gen *g)
{
    struct k3_srv *s = g->srv;
    pthread_mutex_lock(&s->mu);
    uint64_t id = g->id;
    pthread_mutex_unlock(&s->mu);
    k3_sched_cancel(s->sched, id);
}

void k3_gen_release(struct k3_gen *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    int done = g->done;
    pthread_mutex_unlock(&g->mu);
    if (!done) k3_gen_cancel(g);
    unref(g);
}

void k3_gen_cancel_all(struct k3_srv *s)
{
    pthread_mutex_lock(&s->mu);
    for (struct k3_gen *g = s->active; g; g = g->next)
        if (g->id) k3_sched_cancel(s->sched, g->id);
    pthread_mutex_unlock(&s->mu);
}

void k3_gen_events_clear(struct k3_gen_events *ev)
{
    k3_outp_delta_clear(&ev->delta);
    ev->n_lp = 0;
}

void k3_gen_events_free(struct k3_gen_events *ev)
{
    k3_outp_delta_free(&ev->delta);
    free(ev->lp);
    memset(ev, 0, sizeof *ev);
}
