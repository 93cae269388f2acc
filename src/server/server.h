/* server.h - rank 0's HTTP API without the sockets: a request (method, path, headers,
 * body) goes in, a response (status, headers, body, or a stream of body pieces) comes out.
 *
 *   struct k3_srv *s;
 *   k3_srv_init(&s, &cfg, tok, sched, &err);          tok and sched may be NULL (see below)
 *   struct k3_srv_resp r; k3_srv_dispatch(s, &req, &r);
 *   if (r.stream.next) while (r.stream.next(r.stream.ctx, &buf, 1.0) >= 0) ...send buf...
 *   k3_srv_resp_free(&r);                             closes a stream (aborted if unfinished)
 *   k3_srv_free(s);
 *
 * The HTTP layer (http.h, libmicrohttpd) is a thin shell around k3_srv_dispatch, so tests
 * and the fuzzer of issue #10 can drive every route, limit and error without a socket.
 * Dispatch does what every route shares: route lookup (404 / 405 with Allow), the body
 * limit (413), the API key (401), the shutdown state (503), counting for /metrics; then it
 * calls the route's handler (route.h lists the routes and the module interface).
 *
 * Without a tokenizer, routes that need one answer 503; without a scheduler, routes that
 * generate answer 503 ("no engine"), so validation paths run with neither.
 *
 * Threads: k3_srv_dispatch and the stream callbacks run on any number of HTTP threads at
 * once; k3_srv_on_step and the generation callbacks run on the step thread (rank 0's main
 * thread) and never wait for an HTTP thread. */
#ifndef K3_SERVER_SERVER_H
#define K3_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/scheduler.h"
#include "frontend/fe_buf.h"
#include "frontend/tokenizer.h"

/* Which sampling parameters chat requests may set (server.sampling_policy). */
enum k3_srv_policy {
    K3_SRV_POLICY_KIMI,  /* Kimi's published policy (KVV tests/params): temperature in [0, 1],
                            top_p 0.95, penalties 0, n 1; anything else is a 400 */
    K3_SRV_POLICY_OPEN,  /* OpenAI's ranges: temperature [0, 2], top_p (0, 1], penalties
                            [-2, 2]; n is still 1 (one choice per request) */
};

struct k3_srv_cfg {
    const char *model_name;     /* the id clients send as "model" and /v1/models lists */
    const char *api_key;        /* NULL or "": no key; else Bearer / x-api-key must match */
    size_t max_body_bytes;      /* larger bodies: 413 */
    int max_active;             /* generating requests at once (queued + running); 429 beyond */
    int context_tokens;         /* prompt + completion limit; a longer prompt is a 400 */
    int vocab_size;             /* the model's vocabulary: prompt ids must be below it */
    enum k3_srv_policy policy;
    double request_timeout_s;   /* a non-streamed request waits at most this long */
    double shutdown_grace_s;    /* on SIGTERM, in-flight requests get this long to finish */
};

/* One header. Names compare case-insensitively. */
struct k3_srv_header {
    const char *name, *value;
};

struct k3_srv_req {
    const char *method;   /* "GET", "POST", ... */
    const char *path;     /* without the query string */
    const struct k3_srv_header *headers;
    int n_headers;
    const char *body;     /* not NUL-terminated; may be NULL when body_len is 0 */
    size_t body_len;
};

/* A body produced piece by piece (SSE). next() appends the next bytes to out, waiting at
 * most timeout_s for them: returns 1 when it appended something, 0 when nothing came in
 * time (the caller may send a keep-alive and call again), -1 at the end (out may still
 * have received the last bytes). close() is called exactly once, by k3_srv_resp_free or
 * the HTTP layer: aborted = the client left before the end (its sequence is cancelled). */
struct k3_srv_stream {
    int (*next)(void *ctx, struct k3_sbuf *out, double timeout_s);
    void (*close)(void *ctx, int aborted);
    void *ctx;
};

/* Writes an error body in one API's format (route.h has the two there are). type is an
 * OpenAI type name: "invalid_request_error", "authentication_error", "not_found_error",
 * "rate_limit_error", "request_too_large", "server_error", "overloaded_error" (a format maps
 * them to its own). param and code may be NULL. */
typedef void (*k3_srv_err_format)(struct k3_sbuf *b, int status, const char *type,
                                  const char *param, const char *code, const char *message);

#define K3_SRV_MAX_RESP_HEADERS 4

struct k3_srv_resp {
    int status;
    const char *content_type;                     /* static string */
    struct k3_srv_header headers[K3_SRV_MAX_RESP_HEADERS]; /* static strings (Allow, ...) */
    int n_headers;
    struct k3_sbuf body;                          /* the whole body, when not a stream */
    struct k3_srv_stream stream;                  /* stream.next != NULL: status 200 + stream */
    k3_srv_err_format err_format;                 /* set by dispatch: the route's error format */
    /* Set by k3_srv_dispatch_conn (NULL without a socket): 1 while the client is still
     * connected. A handler that waits for a whole answer asks it and cancels when the
     * client has left (k3_gen_wait_all). */
    int (*client_alive)(void *ctx);
    void *client_ctx;
};

struct k3_srv;

int k3_srv_init(struct k3_srv **s, const struct k3_srv_cfg *cfg, const struct k3_tok *tok,
                struct k3_sched *sched, struct k3_err *err);
/* After every stream is closed and the scheduler has finished every request. */
void k3_srv_free(struct k3_srv *s);

/* Fills out (zero-initialised here). Never fails: every problem is a status and an error
 * object. A request waits here only for a non-streamed generation. */
void k3_srv_dispatch(struct k3_srv *s, const struct k3_srv_req *rq, struct k3_srv_resp *out);
/* The same from a connection: client_alive(ctx) says whether its client is still there. */
void k3_srv_dispatch_conn(struct k3_srv *s, const struct k3_srv_req *rq, int (*client_alive)(void *ctx),
                          void *ctx, struct k3_srv_resp *out);
/* Frees the body; closes a stream still open as aborted. */
void k3_srv_resp_free(struct k3_srv_resp *r);

/* Step thread: after each step (engine_job's on_step). Step time histogram; during a
 * drain, cancels what is left once the grace period is over. */
void k3_srv_on_step(void *srv, const struct k3_step_plan *plan, double step_s);

/* Graceful shutdown, rank 0's main thread: from now on new requests get 503. Returns the
 * number of generation requests still in flight. */
int k3_srv_drain(struct k3_srv *s);
/* Cancels every generation request still in flight (past the grace period). */
void k3_srv_cancel_all(struct k3_srv *s);
/* Generation requests not yet finished by the scheduler. */
int k3_srv_n_active(struct k3_srv *s);

#endif
