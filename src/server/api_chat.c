/* api_chat.c - POST /v1/chat/completions (OpenAI), non-streamed and streamed.
 *
 * Validation and rendering are the frontend's (request.h, chat_render.h); this module maps
 * a valid request onto a generation (gen.h) and the generation's pieces onto OpenAI's
 * response and chunk objects (research/frontend.md §5.2): the first chunk carries
 * role "assistant"; then reasoning_content, content and tool_calls deltas (a call's first
 * delta has its id, type and name, later ones argument fragments); a last chunk with an
 * empty delta and finish_reason; with stream_options.include_usage, a chunk with empty
 * choices and usage; then [DONE]. The non-streamed message is k3_gen_result, the
 * concatenation of the same deltas.
 *
 * Sampling policy: under "kimi", request.h's checks are the policy; under "open", the
 * sampling keys are checked here against OpenAI's ranges and removed from the body before
 * request.h sees it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "frontend/chat_render.h"
#include "frontend/request.h"
#include "server/api_util.h"
#include "server/gen.h"
#include "server/route.h"
#include "server/srv_internal.h"

struct chat_stream {
    struct k3_srv *srv;
    struct k3_gen *gen;
    struct k3_gen_events ev;
    char id[48];
    long long created;
    int include_usage, logprobs, started, ended;
};

static json_t *chunk(const struct chat_stream *c, json_t *delta, const char *finish, json_t *logprobs)
{
    json_t *ch = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs",
                           logprobs ? logprobs : json_null(), "finish_reason",
                           finish ? json_string(finish) : json_null());
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:n}", "id", c->id, "object", "chat.completion.chunk",
                     "created", (json_int_t)c->created, "model", c->srv->model_name, "choices", ch,
                     "usage");
}

static void emit(struct k3_sbuf *out, json_t *j)
{
    k3_srv_sse(out, NULL, j);
    json_decref(j);
}

static json_t *tool_delta_json(const struct k3_outp_tool_delta *t)
{
    json_t *fn = json_object();
    if (t->first) json_object_set_new(fn, "name", k3_api_str(t->name, t->name ? strlen(t->name) : 0));
    json_object_set_new(fn, "arguments", k3_api_str(t->args.p, t->args.n));
    json_t *o = json_pack("{s:i}", "index", t->index);
    if (t->first) {
        json_object_set_new(o, "id", json_string(t->id));
        json_object_set_new(o, "type", json_string("function"));
    }
    json_object_set_new(o, "function", fn);
    return o;
}

/* Formats what the events hold; returns -1 once the stream has ended. */
static int chat_next(void *ctx, struct k3_sbuf *out, double timeout_s)
{
    struct chat_stream *c = ctx;
    if (c->ended) return -1;
    if (!c->started) {
        c->started = 1;
        emit(out, chunk(c, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, NULL));
        return 1;
    }
    if (!k3_gen_wait(c->gen, timeout_s, &c->ev)) return 0;
    struct k3_outp_delta *d = &c->ev.delta;
    json_t *lp = NULL;
    if (c->logprobs && c->ev.n_lp) {
        json_t *arr = json_array();
        k3_api_chat_logprobs(k3_srv_tok(c->srv), c->ev.lp, c->ev.n_lp, arr);
        lp = json_pack("{s:o}", "content", arr);
    }
    /* the token logprobs ride on the first chunk of this batch */
    if (d->reasoning.n) {
        emit(out, chunk(c, json_pack("{s:o}", "reasoning_content", k3_api_str(d->reasoning.p, d->reasoning.n)),
                        NULL, lp));
        lp = NULL;
    }
    if (d->content.n) {
        emit(out, chunk(c, json_pack("{s:o}", "content", k3_api_str(d->content.p, d->content.n)), NULL, lp));
        lp = NULL;
    }
    for (size_t i = 0; i < d->n_tools; i++) {
        emit(out, chunk(c, json_pack("{s:[o]}", "tool_calls", tool_delta_json(&d->tools[i])), NULL, lp));
        lp = NULL;
    }
    if (lp) emit(out, chunk(c, json_object(), NULL, lp));
    k3_gen_events_clear(&c->ev);
    if (!c->ev.done) return 1;
    c->ended = 1;
    if (c->ev.error) {
        struct k3_sbuf e = {0};
        k3_srv_err_openai(&e, 503, "server_error", NULL, c->ev.error, "the request was cancelled (server shutting down)");
        k3_sbuf_adds(out, "data: ");
        k3_sbuf_add(out, e.p, e.n);
        k3_sbuf_adds(out, "\n\n");
        k3_sbuf_free(&e);
    } else {
        emit(out, chunk(c, json_object(), c->ev.finish_reason, NULL));
        if (c->include_usage) {
            json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", c->id, "object", "chat.completion.chunk",
                                  "created", (json_int_t)c->created, "model", c->srv->model_name, "choices",
                                  "usage", k3_api_usage(&c->ev.usage));
            emit(out, u);
        }
    }
    k3_sbuf_adds(out, "data: [DONE]\n\n");
    return -1;
}

static void chat_close(void *ctx, int aborted)
{
    struct chat_stream *c = ctx;
    (void)aborted; /* release cancels an unfinished sequence either way */
    k3_gen_release(c->gen);
    k3_gen_events_free(&c->ev);
    free(c);
}

/* The non-streamed answer. */
static json_t *message_json(const struct k3_gen_result *r)
{
    json_t *m = json_pack("{s:s}", "role", "assistant");
    /* null when there is no answer text (only reasoning or tool calls), as OpenAI sends it */
    json_object_set_new(m, "content", r->content.n ? k3_api_str(r->content.p, r->content.n) : json_null());
    if (r->reasoning.n) json_object_set_new(m, "reasoning_content", k3_api_str(r->reasoning.p, r->reasoning.n));
    if (r->n_calls) {
        json_t *calls = json_array();
        for (size_t i = 0; i < r->n_calls; i++)
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:o,s:o}}", "id", r->calls[i].id, "type",
                                                   "function", "function", "name",
                                                   k3_api_str(r->calls[i].name, strlen(r->calls[i].name)),
                                                   "arguments", k3_api_str(r->calls[i].args.p, r->calls[i].args.n)));
        json_object_set_new(m, "tool_calls", calls);
    }
    return m;
}

/* Waits for the whole answer (bounded by request_timeout_s) and answers with it. */
static void respond_whole(struct k3_srv *s, struct k3_gen *g, const char *id, int logprobs,
                          struct k3_srv_resp *out)
{
    struct k3_gen_events ev = {0};
    double limit = s->cfg.request_timeout_s;
    int rc = k3_gen_wait_all(g, out, limit, &ev);
    if (rc == -2) {
        /* nobody reads this; 499 as nginx logs it, counted in /metrics */
        k3_srv_error(out, 499, "client_closed_request", NULL, NULL, "the client closed the connection");
    } else if (rc == -1) {
        k3_srv_error(out, 503, "server_error", NULL, "timeout",
                     "no token within %.0f s (server.request_timeout_s)", limit);
    } else if (ev.error) {
        k3_srv_error(out, 503, "server_error", NULL, ev.error, "the request was %s (server shutting down)",
                     ev.error);
    } else {
        json_t *lp = json_null();
        if (logprobs) {
            json_t *arr = json_array();
            k3_api_chat_logprobs(s->tok, ev.lp, ev.n_lp, arr);
            lp = json_pack("{s:o}", "content", arr);
        }
        json_t *choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "message", message_json(k3_gen_result(g)),
                                   "logprobs", lp, "finish_reason", ev.finish_reason);
        k3_srv_json(out, 200, json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", id, "object", "chat.completion",
                                        "created", (json_int_t)time(NULL), "model", s->model_name,
                                        "choices", choice, "usage", k3_api_usage(&ev.usage)));
    }
    k3_gen_events_free(&ev);
    k3_gen_release(g);
}

static const char *const sampling_keys[] = {"temperature", "top_p", "presence_penalty", "frequency_penalty", "n"};

void k3_api_chat(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    json_t *body = k3_srv_body_json(rq, out);
    if (!body) return;
    struct k3_chat_req req;
    memset(&req, 0, sizeof req);
    struct k3_chat_prompt prompt;
    memset(&prompt, 0, sizeof prompt);
    struct k3_tok_ids ids = {0};
    struct k3_api_err e;
    struct k3_gen_params p;
    memset(&p, 0, sizeof p);
    int have_req = 0;
    if (k3_srv_check_model(s, body, 0, out)) goto done;
    struct k3_sampling open_smp = {0};
    if (s->cfg.policy == K3_SRV_POLICY_OPEN) {
        /* OpenAI's ranges here; request.h (Kimi's policy) must not see these keys */
        if (k3_api_sampling(s, body, -1, &open_smp, out)) goto done;
        for (size_t i = 0; i < sizeof sampling_keys / sizeof *sampling_keys; i++) json_object_del(body, sampling_keys[i]);
    }
    if (k3_chat_req_from_json(body, &req, &e)) {
        k3_srv_api_error(out, &e);
        goto done;
    }
    have_req = 1;
    if (k3_chat_req_render(&req, &prompt, &e)) {
        k3_srv_api_error(out, &e);
        goto done;
    }
    p.prompt_tokens = (int)k3_chat_prompt_encode(s->tok, &prompt, &ids);
    p.prompt = ids.ids, p.n_prompt = (int)ids.n;
    p.max_tokens = req.max_tokens > 0 ? (int)(req.max_tokens < 1 << 30 ? req.max_tokens : 1 << 30) : 0;
    struct k3_sampling smp = {0};
    if (k3_api_sampling(s, req.root, req.temperature, &smp, out)) goto done; /* seed, extensions */
    if (s->cfg.policy == K3_SRV_POLICY_OPEN) {
        smp.temperature = open_smp.temperature >= 0 ? open_smp.temperature : (float)req.temperature;
        smp.top_p = open_smp.top_p, smp.presence_penalty = open_smp.presence_penalty;
        smp.frequency_penalty = open_smp.frequency_penalty;
    } else {
        smp.temperature = (float)req.temperature, smp.top_p = (float)req.top_p;
    }
    p.logprobs = json_is_true(json_object_get(req.root, "logprobs"));
    const json_t *tl = json_object_get(req.root, "top_logprobs");
    if (p.logprobs && json_is_integer(tl)) smp.n_logprobs = (int32_t)json_integer_value(tl);
    p.sampling = smp;
    p.parse = 1;
    p.outp = k3_chat_req_outp_cfg(&req, &prompt, k3_srv_random(s));
    if (k3_api_stops(req.root, &p, out)) goto done;
    struct k3_gen *g;
    if (k3_gen_start(s, &p, &g, &e)) {
        k3_srv_api_error(out, &e);
        goto done;
    }
    char id[48];
    k3_srv_new_id(s, "chatcmpl-", id, sizeof id);
    if (!req.stream) {
        respond_whole(s, g, id, p.logprobs, out);
    } else {
        struct chat_stream *c = calloc(1, sizeof *c);
        K3_CHECK(c, "out of memory");
        c->srv = s, c->gen = g, c->created = (long long)time(NULL);
        memcpy(c->id, id, sizeof c->id);
        c->include_usage = req.include_usage, c->logprobs = p.logprobs;
        k3_srv_stream_start(out, &(struct k3_srv_stream){chat_next, chat_close, c});
    }
done:
    k3_tok_ids_free(&ids);
    k3_chat_prompt_free(&prompt);
    if (have_req) k3_chat_req_free(&req);
    json_decref(body);
}
