/* api_completions.c - POST /v1/completions: a raw prompt (a string, tokenized with
 * special-token text recognised, so a client can send an already-rendered chat prompt as
 * K2VV does; or token ids) and raw text out, no chat template, no output parser. Special
 * ids the model samples are left out of the text; the end-of-message ids stop it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/grow.h"
#include "core/log.h"
#include "server/api_util.h"
#include "server/gen.h"
#include "server/route.h"
#include "server/srv_internal.h"

struct cmpl_stream {
    struct k3_srv *srv;
    struct k3_gen *gen;
    struct k3_gen_events ev;
    char id[48];
    long long created;
    int include_usage, logprobs, ended;
};

/* OpenAI legacy logprobs: tokens, token_logprobs, top_logprobs ({token: logprob}). */
static json_t *legacy_logprobs(const struct k3_tok *tok, const struct k3_gen_logprob *lp, size_t n)
{
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array();
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        const uint8_t *b = k3_tok_bytes(tok, lp[i].token, &len);
        json_array_append_new(toks, k3_api_str((const char *)b, b ? len : 0));
        json_array_append_new(lps, json_real(lp[i].logprob));
        json_t *t = json_object();
        for (int k = 0; k < lp[i].n_top; k++) {
            b = k3_tok_bytes(tok, lp[i].top_ids[k], &len);
            json_t *key = k3_api_str((const char *)b, b ? len : 0);
            json_object_set_new(t, json_string_value(key), json_real(lp[i].top_logprobs[k]));
            json_decref(key);
        }
        json_array_append_new(tops, t);
    }
    return json_pack("{s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops);
}

static json_t *cmpl_obj(const char *id, long long created, const char *model, json_t *choice, json_t *usage)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "text_completion", "created",
                          (json_int_t)created, "model", model);
    json_object_set_new(o, "choices", choice ? json_pack("[o]", choice) : json_array());
    json_object_set_new(o, "usage", usage ? usage : json_null());
    return o;
}

static int cmpl_next(void *ctx, struct k3_sbuf *out, double timeout_s)
{
    struct cmpl_stream *c = ctx;
    if (c->ended) return -1;
    if (!k3_gen_wait(c->gen, timeout_s, &c->ev)) return 0;
    const struct k3_tok *tok = k3_srv_tok(c->srv);
    if (c->ev.delta.content.n || c->ev.n_lp) {
        json_t *ch = json_pack("{s:i,s:o,s:o,s:n}", "index", 0, "text",
                               k3_api_str(c->ev.delta.content.p, c->ev.delta.content.n), "logprobs",
                               c->logprobs ? legacy_logprobs(tok, c->ev.lp, c->ev.n_lp) : json_null(),
                               "finish_reason");
        json_t *o = cmpl_obj(c->id, c->created, c->srv->model_name, ch, NULL);
        k3_srv_sse(out, NULL, o);
        json_decref(o);
    }
    k3_gen_events_clear(&c->ev);
    if (!c->ev.done) return 1;
    c->ended = 1;
    if (c->ev.error) {
        k3_sbuf_adds(out, "data: ");
        k3_srv_err_openai(out, 503, "server_error", NULL, c->ev.error, "the request was cancelled");
        k3_sbuf_adds(out, "\n\n");
    } else {
        json_t *ch = json_pack("{s:i,s:s,s:n,s:s}", "index", 0, "text", "", "logprobs", "finish_reason",
                               c->ev.finish_reason);
        json_t *o = cmpl_obj(c->id, c->created, c->srv->model_name, ch, NULL);
        k3_srv_sse(out, NULL, o);
        json_decref(o);
        if (c->include_usage) {
            o = cmpl_obj(c->id, c->created, c->srv->model_name, NULL, k3_api_usage(&c->ev.usage));
            k3_srv_sse(out, NULL, o);
            json_decref(o);
        }
    }
    k3_sbuf_adds(out, "data: [DONE]\n\n");
    return -1;
}

static void cmpl_close(void *ctx, int aborted)
{
    struct cmpl_stream *c = ctx;
    (void)aborted;
    k3_gen_release(c->gen);
    k3_gen_events_free(&c->ev);
    free(c);
}

/* The prompt: "text", ["text"], [ids], [[ids]]; one prompt per request. */
static int prompt_ids(struct k3_srv *s, const json_t *pr, struct k3_tok_ids *ids, struct k3_srv_resp *out)
{
    if (json_is_array(pr) && json_array_size(pr) == 1 &&
        (json_is_string(json_array_get(pr, 0)) || json_is_array(json_array_get(pr, 0))))
        pr = json_array_get(pr, 0);
    if (json_is_string(pr)) {
        k3_tok_encode(s->tok, json_string_value(pr), json_string_length(pr), K3_TOK_SPECIAL, NULL, ids);
        return 0;
    }
    if (json_is_array(pr) && json_array_size(pr) > 0) {
        for (size_t i = 0; i < json_array_size(pr); i++) {
            const json_t *v = json_array_get(pr, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= (s->cfg.vocab_size > 0 ? s->cfg.vocab_size : 1 << 30))
                goto bad;
            ids->ids = k3_grow(ids->ids, &ids->cap, ids->n + 1, sizeof *ids->ids, 64, "prompt ids");
            ids->ids[ids->n++] = (int32_t)json_integer_value(v);
        }
        return 0;
    }
bad:
    k3_srv_error(out, 400, "invalid_request_error", "prompt", NULL,
                 "'prompt' must be a non-empty string or an array of token ids below %d (one prompt per "
                 "request)", s->cfg.vocab_size);
    return -1;
}

void k3_api_completions(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    json_t *body = k3_srv_body_json(rq, out);
    if (!body) return;
    struct k3_tok_ids ids = {0};
    struct k3_gen_params p;
    memset(&p, 0, sizeof p);
    struct k3_api_err e;
    if (k3_srv_check_model(s, body, 0, out)) goto done;
    const json_t *pr = json_object_get(body, "prompt");
    if (!pr) {
        k3_srv_error(out, 400, "invalid_request_error", "prompt", NULL, "'prompt' is required");
        goto done;
    }
    if (prompt_ids(s, pr, &ids, out)) goto done;
    if (json_is_true(json_object_get(body, "echo")) || json_object_get(body, "suffix") ||
        (json_is_integer(json_object_get(body, "best_of")) && json_integer_value(json_object_get(body, "best_of")) != 1)) {
        k3_srv_error(out, 400, "invalid_request_error", "echo", NULL, "echo, suffix and best_of are not supported");
        goto done;
    }
    const json_t *mt = json_object_get(body, "max_tokens");
    if (mt && !json_is_null(mt) && !(json_is_integer(mt) && json_integer_value(mt) >= 1)) {
        k3_srv_error(out, 400, "invalid_request_error", "max_tokens", NULL, "'max_tokens' must be an integer >= 1");
        goto done;
    }
    /* OpenAI's default for completions is 16 tokens */
    p.max_tokens = json_is_integer(mt) ? (int)(json_integer_value(mt) < 1 << 30 ? json_integer_value(mt) : 1 << 30) : 16;
    if (k3_api_sampling(s, body, 1.0, &p.sampling, out)) goto done;
    const json_t *lp = json_object_get(body, "logprobs");
    if (lp && !json_is_null(lp)) {
        if (!json_is_integer(lp) || json_integer_value(lp) < 0 || json_integer_value(lp) > K3_PLAN_TOP_MAX) {
            k3_srv_error(out, 400, "invalid_request_error", "logprobs", NULL, "'logprobs' must be an integer 0..%d",
                         K3_PLAN_TOP_MAX);
            goto done;
        }
        p.logprobs = 1, p.sampling.n_logprobs = (int32_t)json_integer_value(lp);
    }
    const json_t *stream = json_object_get(body, "stream");
    if (stream && !json_is_null(stream) && !json_is_boolean(stream)) {
        k3_srv_error(out, 400, "invalid_request_error", "stream", NULL, "'stream' must be a boolean");
        goto done;
    }
    if (k3_api_stops(body, &p, out)) goto done;
    p.prompt = ids.ids, p.n_prompt = (int)ids.n, p.prompt_tokens = (int)ids.n;
    struct k3_gen *g;
    if (k3_gen_start(s, &p, &g, &e)) {
        k3_srv_api_error(out, &e);
        goto done;
    }
    char id[48];
    k3_srv_new_id(s, "cmpl-", id, sizeof id);
    if (json_is_true(stream)) {
        struct cmpl_stream *c = calloc(1, sizeof *c);
        K3_CHECK(c, "out of memory");
        c->srv = s, c->gen = g, c->created = (long long)time(NULL), c->logprobs = p.logprobs;
        c->include_usage = json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage"));
        memcpy(c->id, id, sizeof c->id);
        k3_srv_stream_start(out, &(struct k3_srv_stream){cmpl_next, cmpl_close, c});
        goto done;
    }
    struct k3_gen_events ev = {0};
    int rc = k3_gen_wait_all(g, out, s->cfg.request_timeout_s, &ev);
    if (rc == -2) {
        k3_srv_error(out, 499, "client_closed_request", NULL, NULL, "the client closed the connection");
    } else if (rc == -1 || ev.error) {
        k3_srv_error(out, 503, "server_error", NULL, rc == -1 ? "timeout" : ev.error, "no answer: %s",
                     rc == -1 ? "no token within server.request_timeout_s" : ev.error);
    } else {
        const struct k3_gen_result *r = k3_gen_result(g);
        json_t *ch = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "text", k3_api_str(r->content.p, r->content.n),
                               "logprobs", p.logprobs ? legacy_logprobs(s->tok, ev.lp, ev.n_lp) : json_null(),
                               "finish_reason", ev.finish_reason);
        k3_srv_json(out, 200, cmpl_obj(id, (long long)time(NULL), s->model_name, ch, k3_api_usage(&ev.usage)));
    }
    k3_gen_events_free(&ev);
    k3_gen_release(g);
done:
    k3_tok_ids_free(&ids);
    json_decref(body);
}
