/* api_misc.c - the small routes: GET /v1/models, GET /health, GET /metrics,
 * POST /tokenize and POST /detokenize (vLLM's shapes, research/frontend.md §5.4). */
#include <stdlib.h>
#include <string.h>

#include "frontend/chat_render.h"
#include "frontend/request.h"
#include "server/api_util.h"
#include "server/route.h"
#include "server/srv_internal.h"

void k3_api_models(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    (void)rq;
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", s->model_name, "object", "model", "created",
                          (json_int_t)s->created, "owned_by", "k3", "max_model_len", s->cfg.context_tokens);
    k3_srv_json(out, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
}

void k3_api_health(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    (void)rq;
    pthread_mutex_lock(&s->mu);
    int draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    if (draining) k3_srv_error(out, 503, "server_error", NULL, NULL, "the server is shutting down");
    else k3_srv_json(out, 200, json_pack("{s:s}", "status", "ok"));
}

void k3_api_metrics(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    (void)rq;
    struct k3_sched_stats st;
    if (s->sched) k3_sched_stats(s->sched, &st);
    struct k3_tok_chunk_stats tk;
    if (s->tok) k3_tok_chunk_stats(s->tok, &tk);
    k3_metrics_write(&s->metrics, s->sched ? &st : NULL, k3_srv_n_active(s), s->tok ? &tk : NULL, &out->body);
    out->status = 200;
    out->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* {"prompt": "text"} (special-token text recognised, as /v1/completions does) or a chat
 * request's {"messages", "tools", ...} rendered with the K3 template. */
void k3_api_tokenize(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    json_t *body = k3_srv_body_json(rq, out);
    if (!body) return;
    struct k3_tok_ids ids = {0};
    const json_t *pr = json_object_get(body, "prompt");
    if (json_is_string(pr)) {
        k3_tok_encode(s->tok, json_string_value(pr), json_string_length(pr), K3_TOK_SPECIAL, NULL, &ids);
    } else if (json_object_get(body, "messages")) {
        struct k3_chat_req req;
        struct k3_chat_prompt p;
        memset(&p, 0, sizeof p);
        struct k3_api_err e;
        if (k3_chat_req_from_json(body, &req, &e)) {
            k3_srv_api_error(out, &e);
            goto done;
        }
        if (k3_chat_req_render(&req, &p, &e)) {
            k3_srv_api_error(out, &e);
            k3_chat_req_free(&req);
            goto done;
        }
        size_t counted = k3_chat_prompt_encode(s->tok, &p, &ids);
        k3_chat_prompt_free(&p);
        k3_chat_req_free(&req);
        json_t *arr = json_array();
        for (size_t i = 0; i < ids.n; i++) json_array_append_new(arr, json_integer(ids.ids[i]));
        k3_srv_json(out, 200, json_pack("{s:o,s:i,s:i,s:i}", "tokens", arr, "count", (json_int_t)ids.n,
                                        "prompt_tokens", (json_int_t)counted, "max_model_len",
                                        s->cfg.context_tokens));
        goto done;
    } else {
        k3_srv_error(out, 400, "invalid_request_error", "prompt", NULL,
                     "send {\"prompt\": \"text\"} or a chat request with \"messages\"");
        goto done;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < ids.n; i++) json_array_append_new(arr, json_integer(ids.ids[i]));
    k3_srv_json(out, 200, json_pack("{s:o,s:i,s:i}", "tokens", arr, "count", (json_int_t)ids.n, "max_model_len",
                                    s->cfg.context_tokens));
done:
    k3_tok_ids_free(&ids);
    json_decref(body);
}

void k3_api_detokenize(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    json_t *body = k3_srv_body_json(rq, out);
    if (!body) return;
    const json_t *t = json_object_get(body, "tokens");
    size_t n = json_is_array(t) ? json_array_size(t) : 0;
    int32_t *ids = malloc(sizeof *ids * (n ? n : 1));
    int ok = json_is_array(t) && ids;
    for (size_t i = 0; ok && i < n; i++) {
        const json_t *v = json_array_get(t, i);
        ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < k3_tok_n_vocab(s->tok);
        if (ok) ids[i] = (int32_t)json_integer_value(v);
    }
    if (!ok) {
        k3_srv_error(out, 400, "invalid_request_error", "tokens", NULL,
                     "'tokens' must be an array of token ids below %d", k3_tok_n_vocab(s->tok));
    } else {
        /* the streaming detokenizer: invalid UTF-8 comes out as U+FFFD, as Python's
         * decode(errors="replace") */
        struct k3_detok dt;
        k3_detok_init(&dt, s->tok);
        struct k3_sbuf text = {0};
        char buf[K3_DETOK_MAX_OUT + 8];
        for (size_t i = 0; i < n; i++) {
            int m = k3_detok_push(&dt, ids[i], buf);
            if (m > 0) k3_sbuf_add(&text, buf, (size_t)m);
        }
        int m = k3_detok_flush(&dt, buf);
        if (m > 0) k3_sbuf_add(&text, buf, (size_t)m);
        k3_srv_json(out, 200, json_pack("{s:o}", "prompt", k3_api_str(text.p, text.n)));
        k3_sbuf_free(&text);
    }
    free(ids);
    json_decref(body);
}
