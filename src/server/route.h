/* route.h - the route table and what an API module (OpenAI, Anthropic, tokenize, metrics)
 * uses to answer: the handler signature, response helpers, the server's shared state.
 *
 * Adding an API (e.g. POST /v1/messages):
 *   1. write the module's handler in src/server/api_<name>.c:
 *        void k3_api_messages(struct k3_srv *s, const struct k3_srv_req *rq,
 *                             struct k3_srv_resp *out);
 *      it validates (400 via k3_srv_error), renders and encodes the prompt, starts a
 *      generation (gen.h), and either waits for it (non-streamed: k3_gen_wait until done,
 *      then k3_srv_json) or hands out a stream (k3_srv_stream_start) whose next() turns
 *      k3_gen_wait's events into the module's SSE events;
 *   2. declare it in this header (next to k3_api_chat) and add one row to k3_srv_routes
 *      in routes.c, with the error format its clients expect (k3_srv_err_anthropic);
 *   3. add the .c file to src/server/CMakeLists.txt and tests to tests/server.
 * The HTTP layer, the limits, auth and metrics need no change. */
#ifndef K3_SERVER_ROUTE_H
#define K3_SERVER_ROUTE_H

#include <jansson.h>

#include "frontend/request.h"
#include "server/server.h"

typedef void (*k3_srv_handler)(struct k3_srv *s, const struct k3_srv_req *rq,
                               struct k3_srv_resp *out);

/* {"error":{"message","type","param","code"}} */
void k3_srv_err_openai(struct k3_sbuf *b, int status, const char *type, const char *param,
                       const char *code, const char *message);
/* {"type":"error","error":{"type","message"}} with Anthropic's type names */
void k3_srv_err_anthropic(struct k3_sbuf *b, int status, const char *type, const char *param,
                          const char *code, const char *message);

enum {
    K3_ROUTE_OPEN = 1u << 0,      /* no API key needed (/health, /metrics) */
    K3_ROUTE_GENERATES = 1u << 1, /* needs the scheduler: 503 without one or when draining */
    K3_ROUTE_TOKENIZER = 1u << 2, /* needs the tokenizer: 503 without one */
};

struct k3_route {
    const char *method;         /* "GET" | "POST" */
    const char *path;           /* exact match */
    k3_srv_handler handler;
    k3_srv_err_format err;      /* NULL: OpenAI's format */
    unsigned flags;             /* K3_ROUTE_* */
};

extern const struct k3_route k3_srv_routes[];
extern const int k3_srv_n_routes;

/* --- The handlers (one module per file). --- */
void k3_api_chat(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);
void k3_api_completions(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);
void k3_api_models(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);
void k3_api_health(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);
void k3_api_metrics(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);
void k3_api_tokenize(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);
void k3_api_detokenize(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);
void k3_api_messages(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);

/* --- What handlers use. --- */
const struct k3_srv_cfg *k3_srv_config(const struct k3_srv *s);
const struct k3_tok *k3_srv_tok(const struct k3_srv *s);

/* An error response in the route's format (the handler's route; OpenAI's outside one). */
void k3_srv_error(struct k3_srv_resp *out, int status, const char *type, const char *param,
                  const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A frontend validation error (request.h) as the route's error response. */
void k3_srv_api_error(struct k3_srv_resp *out, const struct k3_api_err *e);
/* A JSON response; body is stolen (json_decref'ed). */
void k3_srv_json(struct k3_srv_resp *out, int status, json_t *body);
/* A 200 text/event-stream response whose body comes from st. */
void k3_srv_stream_start(struct k3_srv_resp *out, const struct k3_srv_stream *st);
/* One SSE event: ["event: NAME\n"] "data: JSON\n\n" (compact JSON; event may be NULL). */
void k3_srv_sse(struct k3_sbuf *b, const char *event, const json_t *data);

/* The body as a JSON object, or a 400 in out (returns NULL). */
json_t *k3_srv_body_json(const struct k3_srv_req *rq, struct k3_srv_resp *out);
/* "model" must name the served model: 404 (model_not_found) otherwise; a missing model is
 * accepted when required is 0. Returns 0 or -1 with out filled. */
int k3_srv_check_model(struct k3_srv *s, const json_t *body, int required, struct k3_srv_resp *out);

/* "chatcmpl-" + 24 random base-62 characters, and a random 64-bit seed for tool-call ids. */
void k3_srv_new_id(struct k3_srv *s, const char *prefix, char *out, size_t n);
uint64_t k3_srv_random(struct k3_srv *s);

#endif
