/* api_messages.c - POST /v1/messages (Anthropic Messages API), non-streamed and streamed.
 *
 * The translation is the frontend's (frontend/anthropic.h): the body becomes an OpenAI chat
 * request, so rendering, sampling, parsing and stop strings are exactly api_chat.c's; this
 * module maps the generation (gen.h) onto a Message or its SSE events (message_start,
 * content blocks, message_delta, message_stop). Errors are Anthropic objects; an
 * overloaded server (gen's 429 queue full, 503 no engine / draining) answers 529
 * overloaded_error, as Anthropic's API does.
 *
 * Sampling policy: under "kimi" the frontend's checks are the policy (as for chat); under
 * "open", temperature and top_p are checked here against Anthropic's ranges and removed
 * before the frontend sees them. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "frontend/anthropic.h"
#include "frontend/chat_render.h"
#include "server/api_util.h"
#include "server/gen.h"
#include "server/route.h"

/* An Anthropic error in out, with its status (529 is not one the shared formats know). */
static void anth_error(struct k3_srv_resp *out, int status, const char *message)
{
    char *j = k3_anth_err_json_msg(status, message);
    k3_sbuf_clear(&out->body);
    k3_sbuf_adds(&out->body, j);
    free(j);
    out->status = status;
    out->content_type = "application/json";
}

static void gen_error(struct k3_srv_resp *out, const struct k3_api_err *e)
{
    int st = e->status == 429 || e->status == 503 ? 529 : e->status ? e->status : 400;
    anth_error(out, st, e->message);
}

/* The finished generation as the output parser's result (the view k3_anth_* read). */
struct view {
    struct k3_outp_result res;
    struct k3_anth_usage usage;
    const char *stop_sequence;
};

static void view_init(struct view *v, const struct k3_gen_result *r, const struct k3_gen_events *ev,
                      const json_t *stops)
{
    memset(v, 0, sizeof *v);
    if (r) {
        v->res.reasoning = r->reasoning;  /* shallow: r outlives the view */
        v->res.content = r->content;
        v->res.n_calls = r->n_calls;
        v->res.calls = r->n_calls ? calloc(r->n_calls, sizeof *v->res.calls) : NULL;
        K3_CHECK(!r->n_calls || v->res.calls, "out of memory");
        for (size_t i = 0; i < r->n_calls; i++) {
            memcpy(v->res.calls[i].id, r->calls[i].id, sizeof v->res.calls[i].id);
            v->res.calls[i].name = r->calls[i].name;
            v->res.calls[i].args = r->calls[i].args;
        }
    }
    v->res.finish_reason = ev->finish_reason;
    v->usage = (struct k3_anth_usage){ev->usage.prompt_tokens, ev->usage.completion_tokens,
                                      ev->usage.cached_tokens};
    if (ev->stop_matched > 0 && json_is_array(stops))
        v->stop_sequence = json_string_value(json_array_get(stops, (size_t)ev->stop_matched - 1));
    else if (ev->stop_matched > 0 && json_is_string(stops))
        v->stop_sequence = json_string_value(stops);
}

static void view_free(struct view *v) { free(v->res.calls); }

struct msg_stream {
    struct k3_gen *gen;
    struct k3_gen_events ev;
    struct k3_anth_stream *w;
    json_t *stops;  /* the request's stop strings (a reference), for stop_sequence */
    int prompt_tokens, started, ended;
};

static int msg_next(void *ctx, struct k3_sbuf *out, double timeout_s)
{
    struct msg_stream *m = ctx;
    if (m->ended) return -1;
    if (!m->started) {
        m->started = 1;
        struct k3_anth_usage u = {.input_tokens = m->prompt_tokens};
        k3_anth_stream_begin(m->w, &u, out);
        return 1;
    }
    if (!k3_gen_wait(m->gen, timeout_s, &m->ev)) return 0;
    k3_anth_stream_feed(m->w, &m->ev.delta, out);
    k3_gen_events_clear(&m->ev);
    if (!m->ev.done) return 1;
    m->ended = 1;
    if (m->ev.error) {
        k3_anth_sse_error(529, "the request was cancelled (server shutting down)", out);
        return -1;
    }
    struct view v;
    view_init(&v, k3_gen_result(m->gen), &m->ev, m->stops);
    k3_anth_stream_end(m->w, &v.res, v.stop_sequence, &v.usage, out);
    view_free(&v);
    return -1;
}

static void msg_close(void *ctx, int aborted)
{
    struct msg_stream *m = ctx;
    (void)aborted; /* release cancels an unfinished sequence either way */
    k3_gen_release(m->gen);
    k3_gen_events_free(&m->ev);
    k3_anth_stream_free(m->w);
    json_decref(m->stops);
    free(m);
}

/* Waits for the whole answer (bounded by request_timeout_s) and answers with the Message. */
static void respond_whole(struct k3_srv *s, struct k3_gen *g, const char *id, const json_t *stops,
                          struct k3_srv_resp *out)
{
    struct k3_gen_events ev = {0};
    double waited = 0, limit = k3_srv_config(s)->request_timeout_s;
    while (!ev.done && waited < limit) {
        if (!k3_gen_wait(g, 1.0, &ev)) waited += 1.0;
    }
    if (!ev.done) {
        anth_error(out, 529, "no answer within server.request_timeout_s");
    } else if (ev.error) {
        anth_error(out, 529, "the request was cancelled (server shutting down)");
    } else {
        struct view v;
        view_init(&v, k3_gen_result(g), &ev, stops);
        char *j = k3_anth_message_json(id, k3_srv_config(s)->model_name, &v.res, v.stop_sequence,
                                       &v.usage);
        view_free(&v);
        k3_sbuf_clear(&out->body);
        k3_sbuf_adds(&out->body, j);
        free(j);
        out->status = 200;
        out->content_type = "application/json";
    }
    k3_gen_events_free(&ev);
    k3_gen_release(g);
}

/* Under the open policy: Anthropic's ranges for temperature and top_p, then removed from
 * the body so that the frontend's (Kimi's) checks do not apply. */
static int open_sampling(json_t *body, struct k3_sampling *smp, struct k3_srv_resp *out)
{
    smp->temperature = -1, smp->top_p = 1.0f;
    const json_t *t = json_object_get(body, "temperature"), *p = json_object_get(body, "top_p");
    if (t && !json_is_null(t)) {
        if (!json_is_number(t) || !(json_number_value(t) >= 0 && json_number_value(t) <= 1)) {
            anth_error(out, 400, "temperature must be a number between 0 and 1");
            return -1;
        }
        smp->temperature = (float)json_number_value(t);
    }
    if (p && !json_is_null(p)) {
        if (!json_is_number(p) || !(json_number_value(p) > 0 && json_number_value(p) <= 1)) {
            anth_error(out, 400, "top_p must be a number in (0, 1]");
            return -1;
        }
        smp->top_p = (float)json_number_value(p);
    }
    json_object_del(body, "temperature");
    json_object_del(body, "top_p");
    return 0;
}

void k3_api_messages(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    json_t *body = k3_srv_body_json(rq, out);
    if (!body) return;
    struct k3_anth_req req;
    memset(&req, 0, sizeof req);
    struct k3_chat_prompt prompt;
    memset(&prompt, 0, sizeof prompt);
    struct k3_tok_ids ids = {0};
    struct k3_api_err e;
    struct k3_gen_params p;
    memset(&p, 0, sizeof p);
    int have_req = 0, open = k3_srv_config(s)->policy == K3_SRV_POLICY_OPEN;
    struct k3_sampling open_smp = {0};
    if (open && open_sampling(body, &open_smp, out)) goto done;
    if (k3_anth_req_from_json(body, &req, &e)) {
        anth_error(out, e.status ? e.status : 400, e.message);
        goto done;
    }
    have_req = 1;
    if (k3_srv_check_model(s, body, 1, out)) goto done;
    if (k3_anth_req_render(&req, &prompt, &e)) {
        anth_error(out, 400, e.message);
        goto done;
    }
    p.prompt_tokens = (int)k3_chat_prompt_encode(k3_srv_tok(s), &prompt, &ids);
    p.prompt = ids.ids, p.n_prompt = (int)ids.n;
    long long mt = req.chat.max_tokens;
    p.max_tokens = mt > 0 ? (int)(mt < 1 << 30 ? mt : 1 << 30) : 0;
    struct k3_sampling smp = {0};
    if (k3_api_sampling(s, req.chat.root, req.chat.temperature, &smp, out)) goto done; /* top_k, seed */
    if (open) {
        smp.temperature = open_smp.temperature >= 0 ? open_smp.temperature : (float)req.chat.temperature;
        smp.top_p = open_smp.top_p;
    } else {
        smp.temperature = (float)req.chat.temperature, smp.top_p = (float)req.chat.top_p;
    }
    p.sampling = smp;
    p.parse = 1;
    p.outp = k3_chat_req_outp_cfg(&req.chat, &prompt, k3_srv_random(s));
    if (k3_api_stops(req.chat.root, &p, out)) goto done;
    struct k3_gen *g;
    if (k3_gen_start(s, &p, &g, &e)) {
        gen_error(out, &e);
        goto done;
    }
    char id[48];
    k3_srv_new_id(s, "msg_", id, sizeof id);
    if (!req.chat.stream) {
        respond_whole(s, g, id, req.chat.stop, out);
    } else {
        struct msg_stream *m = calloc(1, sizeof *m);
        K3_CHECK(m, "out of memory");
        m->gen = g;
        m->w = k3_anth_stream_new(id, k3_srv_config(s)->model_name);
        m->stops = req.chat.stop ? json_incref((json_t *)req.chat.stop) : NULL;
        m->prompt_tokens = p.prompt_tokens;
        k3_srv_stream_start(out, &(struct k3_srv_stream){msg_next, msg_close, m});
    }
done:
    k3_tok_ids_free(&ids);
    k3_chat_prompt_free(&prompt);
    if (have_req) k3_anth_req_free(&req);
    json_decref(body);
}
