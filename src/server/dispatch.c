/* dispatch.c - the socket-free server: route lookup, the checks every route shares (body
 * limit, API key, shutdown), counting, and the helpers API modules answer with.
 *
 * Order of the checks, so that each error means one thing: unknown path 404, wrong method
 * 405, body too large 413, bad or missing key 401, draining or missing engine 503, then the
 * handler (400 validation, 404 model, 429 overload). */
#include "server/route.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "server/gen.h"
#include "server/srv_internal.h"

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int k3_srv_init(struct k3_srv **out, const struct k3_srv_cfg *cfg, const struct k3_tok *tok,
                struct k3_sched *sched, struct k3_err *err)
{
    struct k3_srv *s = calloc(1, sizeof *s);
    if (!s) return k3_err_set(err, "out of memory");
    s->cfg = *cfg;
    snprintf(s->model_name, sizeof s->model_name, "%s", cfg->model_name ? cfg->model_name : "k3");
    snprintf(s->api_key, sizeof s->api_key, "%s", cfg->api_key ? cfg->api_key : "");
    s->cfg.model_name = s->model_name;
    s->cfg.api_key = s->api_key;
    if (s->cfg.max_active < 1) s->cfg.max_active = 1;
    if (s->cfg.request_timeout_s <= 0) s->cfg.request_timeout_s = 600;
    s->tok = tok;
    s->sched = sched;
    if (tok) {
        static const char *const ends[] = {"<|end_of_msg|>", "[EOS]", "<|im_end|>"};
        for (int i = 0; i < 3; i++) {
            int32_t id = k3_tok_special_id(tok, ends[i]);
            if (id >= 0) s->end_ids[s->n_end_ids++] = id;
        }
    }
    const char *paths[K3_METRICS_MAX_ROUTES];
    int n = k3_srv_n_routes < K3_METRICS_MAX_ROUTES ? k3_srv_n_routes : K3_METRICS_MAX_ROUTES;
    for (int i = 0; i < n; i++) paths[i] = k3_srv_routes[i].path;
    k3_metrics_init(&s->metrics, paths, n);
    pthread_mutex_init(&s->mu, NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->created = (uint64_t)ts.tv_sec;
    s->rng = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)s;
    *out = s;
    return 0;
}

void k3_srv_free(struct k3_srv *s)
{
    if (!s) return;
    K3_CHECK(s->n_active == 0, "k3_srv_free with %d generation requests in flight", s->n_active);
    k3_metrics_free(&s->metrics);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const struct k3_srv_cfg *k3_srv_config(const struct k3_srv *s) { return &s->cfg; }
const struct k3_tok *k3_srv_tok(const struct k3_srv *s) { return s->tok; }

uint64_t k3_srv_random(struct k3_srv *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t r = splitmix(&s->rng);
    pthread_mutex_unlock(&s->mu);
    return r;
}

void k3_srv_new_id(struct k3_srv *s, const char *prefix, char *out, size_t n)
{
    static const char b62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    char tail[25];
    uint64_t a = k3_srv_random(s), b = k3_srv_random(s);
    for (int i = 0; i < 24; i++) {
        uint64_t *w = i < 12 ? &a : &b;
        tail[i] = b62[*w % 62];
        *w /= 62;
    }
    tail[24] = 0;
    snprintf(out, n, "%s%s", prefix, tail);
}

/* --- error formats --- */

static void json_add_str(struct k3_sbuf *b, const char *s)
{
    json_t *j = json_string(s ? s : "");
    if (!j) j = json_string("(message not valid UTF-8)");
    char *t = json_dumps(j, JSON_ENCODE_ANY);
    k3_sbuf_adds(b, t);
    free(t);
    json_decref(j);
}

void k3_srv_err_openai(struct k3_sbuf *b, int status, const char *type, const char *param,
                       const char *code, const char *message)
{
    (void)status;
    k3_sbuf_adds(b, "{\"error\":{\"message\":");
    json_add_str(b, message);
    k3_sbuf_adds(b, ",\"type\":");
    json_add_str(b, type);
    k3_sbuf_adds(b, ",\"param\":");
    if (param && *param) json_add_str(b, param);
    else k3_sbuf_adds(b, "null");
    k3_sbuf_adds(b, ",\"code\":");
    if (code && *code) json_add_str(b, code);
    else k3_sbuf_adds(b, "null");
    k3_sbuf_adds(b, "}}");
}

void k3_srv_err_anthropic(struct k3_sbuf *b, int status, const char *type, const char *param,
                          const char *code, const char *message)
{
    (void)param, (void)code, (void)type;
    const char *t = "api_error";
    switch (status) {
    case 400: t = "invalid_request_error"; break;
    case 401: t = "authentication_error"; break;
    case 403: t = "permission_error"; break;
    case 404: t = "not_found_error"; break;
    case 405: t = "invalid_request_error"; break;
    case 413: t = "request_too_large"; break;
    case 429: t = "rate_limit_error"; break;
    case 503: t = "overloaded_error"; break;
    }
    k3_sbuf_adds(b, "{\"type\":\"error\",\"error\":{\"type\":\"");
    k3_sbuf_adds(b, t);
    k3_sbuf_adds(b, "\",\"message\":");
    json_add_str(b, message);
    k3_sbuf_adds(b, "}}");
}

/* --- response helpers --- */

void k3_srv_error(struct k3_srv_resp *out, int status, const char *type, const char *param,
                  const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    k3_sbuf_clear(&out->body);
    out->status = status;
    out->content_type = "application/json";
    (out->err_format ? out->err_format : k3_srv_err_openai)(&out->body, status, type, param, code,
                                                            msg);
}

void k3_srv_api_error(struct k3_srv_resp *out, const struct k3_api_err *e)
{
    const char *code = NULL;
    if (e->status == 400 && strstr(e->message, "context window")) code = "context_length_exceeded";
    k3_srv_error(out, e->status ? e->status : 400, e->type[0] ? e->type : "invalid_request_error",
                 e->param, code, "%s", e->message);
}

void k3_srv_json(struct k3_srv_resp *out, int status, json_t *body)
{
    char *t = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(body);
    K3_CHECK(t, "out of memory encoding a response");
    k3_sbuf_clear(&out->body);
    k3_sbuf_adds(&out->body, t);
    free(t);
    out->status = status;
    out->content_type = "application/json";
}

void k3_srv_stream_start(struct k3_srv_resp *out, const struct k3_srv_stream *st)
{
    out->status = 200;
    out->content_type = "text/event-stream";
    out->stream = *st;
    out->headers[out->n_headers++] = (struct k3_srv_header){"Cache-Control", "no-cache"};
}

void k3_srv_sse(struct k3_sbuf *b, const char *event, const json_t *data)
{
    if (event) k3_sbuf_addf(b, "event: %s\n", event);
    char *t = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY);
    K3_CHECK(t, "out of memory encoding an event");
    k3_sbuf_adds(b, "data: ");
    k3_sbuf_adds(b, t);
    k3_sbuf_adds(b, "\n\n");
    free(t);
}

json_t *k3_srv_body_json(const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    json_error_t je;
    json_t *j = json_loadb(rq->body ? rq->body : "", rq->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        k3_srv_error(out, 400, "invalid_request_error", NULL, NULL,
                     "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                     je.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        k3_srv_error(out, 400, "invalid_request_error", NULL, NULL, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

int k3_srv_check_model(struct k3_srv *s, const json_t *body, int required, struct k3_srv_resp *out)
{
    const json_t *m = json_object_get(body, "model");
    if (!m || json_is_null(m)) {
        if (!required) return 0;
        k3_srv_error(out, 400, "invalid_request_error", "model", NULL,
                     "'model' is required (this server serves \"%s\")", s->model_name);
        return -1;
    }
    if (!json_is_string(m)) {
        k3_srv_error(out, 400, "invalid_request_error", "model", NULL, "'model' must be a string");
        return -1;
    }
    if (strcmp(json_string_value(m), s->model_name) != 0) {
        k3_srv_error(out, 404, "not_found_error", "model", "model_not_found",
                     "the model '%.200s' does not exist; this server serves \"%s\"",
                     json_string_value(m), s->model_name);
        return -1;
    }
    return 0;
}

/* --- dispatch --- */

static const char *header(const struct k3_srv_req *rq, const char *name)
{
    for (int i = 0; i < rq->n_headers; i++)
        if (rq->headers[i].name && !strcasecmp(rq->headers[i].name, name)) return rq->headers[i].value;
    return NULL;
}

/* Constant time in the key's length, so the comparison does not leak a prefix. */
static int key_equal(const char *got, const char *want)
{
    size_t n = strlen(want), m = strlen(got);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < m ? got[i] : 0);
    return diff == 0;
}

static int authorized(const struct k3_srv *s, const struct k3_srv_req *rq)
{
    const char *auth = header(rq, "Authorization"), *xk = header(rq, "x-api-key");
    if (auth && !strncasecmp(auth, "Bearer ", 7)) {
        auth += 7;
        while (*auth == ' ') auth++;
        if (key_equal(auth, s->api_key)) return 1;
    }
    return xk && key_equal(xk, s->api_key);
}

void k3_srv_dispatch(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out)
{
    k3_srv_dispatch_conn(s, rq, NULL, NULL, out);
}

void k3_srv_dispatch_conn(struct k3_srv *s, const struct k3_srv_req *rq, int (*client_alive)(void *ctx),
                          void *ctx, struct k3_srv_resp *out)
{
    memset(out, 0, sizeof *out);
    out->client_alive = client_alive;
    out->client_ctx = ctx;
    const struct k3_route *r = NULL;
    int route = -1, path_known = 0;
    for (int i = 0; i < k3_srv_n_routes; i++) {
        if (strcmp(k3_srv_routes[i].path, rq->path)) continue;
        path_known = 1;
        if (!strcmp(k3_srv_routes[i].method, rq->method)) r = &k3_srv_routes[i], route = i;
    }
    if (r) out->err_format = r->err;
    if (!path_known) {
        k3_srv_error(out, 404, "not_found_error", NULL, NULL, "no route %.200s %.200s", rq->method,
                     rq->path);
    } else if (!r) {
        /* the methods this path has, for Allow */
        const char *allow = "GET";
        for (int i = 0; i < k3_srv_n_routes; i++)
            if (!strcmp(k3_srv_routes[i].path, rq->path)) allow = k3_srv_routes[i].method;
        k3_srv_error(out, 405, "invalid_request_error", NULL, "method_not_allowed",
                     "%.200s takes %s, not %.20s", rq->path, allow, rq->method);
        out->headers[out->n_headers++] = (struct k3_srv_header){"Allow", allow};
    } else if (rq->body_len > s->cfg.max_body_bytes) {
        k3_srv_error(out, 413, "invalid_request_error", NULL, "request_too_large",
                     "the body has %zu bytes; this server takes at most %zu (server.max_body_bytes)",
                     rq->body_len, s->cfg.max_body_bytes);
    } else if (s->api_key[0] && !(r->flags & K3_ROUTE_OPEN) && !authorized(s, rq)) {
        k3_srv_error(out, 401, "authentication_error", NULL, "invalid_api_key",
                     "a valid API key is required (Authorization: Bearer <key>)");
        out->headers[out->n_headers++] = (struct k3_srv_header){"WWW-Authenticate", "Bearer"};
    } else if ((r->flags & K3_ROUTE_TOKENIZER) && !s->tok) {
        k3_srv_error(out, 503, "server_error", NULL, NULL, "no tokenizer is loaded");
    } else if ((r->flags & K3_ROUTE_GENERATES) && !s->sched) {
        k3_srv_error(out, 503, "server_error", NULL, NULL, "no engine is running");
    } else {
        pthread_mutex_lock(&s->mu);
        int draining = s->draining;
        pthread_mutex_unlock(&s->mu);
        if (draining && (r->flags & K3_ROUTE_GENERATES))
            k3_srv_error(out, 503, "server_error", NULL, NULL, "the server is shutting down");
        else
            r->handler(s, rq, out);
    }
    if (!out->content_type) out->content_type = "application/json";
    k3_metrics_request(&s->metrics, route, out->status);
}

void k3_srv_resp_free(struct k3_srv_resp *r)
{
    if (r->stream.close) r->stream.close(r->stream.ctx, 1);
    r->stream = (struct k3_srv_stream){0};
    k3_sbuf_free(&r->body);
}

/* --- engine side --- */

void k3_srv_on_step(void *srv, const struct k3_step_plan *plan, double step_s)
{
    struct k3_srv *s = srv;
    (void)plan;
    k3_metrics_step(&s->metrics, step_s);
    pthread_mutex_lock(&s->mu);
    int late = s->draining && k3_now_s() - s->drain_t0 > s->cfg.shutdown_grace_s;
    pthread_mutex_unlock(&s->mu);
    if (late) k3_gen_cancel_all(s);
}

int k3_srv_drain(struct k3_srv *s)
{
    pthread_mutex_lock(&s->mu);
    if (!s->draining) s->draining = 1, s->drain_t0 = k3_now_s();
    int n = s->n_active;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void k3_srv_cancel_all(struct k3_srv *s) { k3_gen_cancel_all(s); }

int k3_srv_n_active(struct k3_srv *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n_active;
    pthread_mutex_unlock(&s->mu);
    return n;
}
