/* http.c - libmicrohttpd around k3_srv_dispatch (see http.h for the threading choice). */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/grow.h"
#include "core/log.h"
#include "server/route.h"

/* A streamed response waits this long per try, and sends an SSE comment after this much
 * silence (which also finds a client that left during a long prefill). */
#define POLL_S 0.5
#define KEEPALIVE_S 10.0

struct k3_http {
    struct k3_srv *srv;
    struct MHD_Daemon *d;
    int port;
    size_t max_body;
    atomic_int stopping;
    atomic_int n_streams;      /* streamed responses not yet completed */
};

/* One request on a connection (MHD's con_cls). */
struct conn {
    struct k3_http *h;
    struct k3_srv_header *hdr;
    size_t n_hdr, cap_hdr;
    struct k3_sbuf body;
    size_t body_seen;          /* bytes the client sent (more than body.n once too large) */
    int too_large;
    struct k3_srv_resp resp;
    int have_resp;
    struct k3_sbuf out;        /* stream bytes not yet handed to MHD */
    size_t out_off;
    int ended, closed;
};

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct conn *c = cls;
    (void)kind;
    c->hdr = k3_grow(c->hdr, &c->cap_hdr, c->n_hdr + 1, sizeof *c->hdr, 16, "request headers");
    c->hdr[c->n_hdr++] = (struct k3_srv_header){key, value ? value : ""};
    return MHD_YES;
}

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct conn *c = cls;
    (void)pos;
    double idle = 0;
    while (c->out_off >= c->out.n) {
        if (c->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (atomic_load(&c->h->stopping)) return MHD_CONTENT_READER_END_WITH_ERROR;
        k3_sbuf_clear(&c->out);
        c->out_off = 0;
        int r = c->resp.stream.next(c->resp.stream.ctx, &c->out, POLL_S);
        if (r < 0) c->ended = 1;
        idle = r == 0 ? idle + POLL_S : 0;
        if (idle >= KEEPALIVE_S) {
            k3_sbuf_adds(&c->out, ": keep-alive\n\n");
            idle = 0;
        }
    }
    size_t n = c->out.n - c->out_off < max ? c->out.n - c->out_off : max;
    memcpy(buf, c->out.p + c->out_off, n);
    c->out_off += n;
    return (ssize_t)n;
}

/* Whether the peer is still there: a zero-byte peek means it closed its end. Only the
 * connection's own thread calls this (thread per connection), between its callbacks'
 * waits, and a peek consumes nothing. */
static int client_alive(void *ctx)
{
    struct MHD_Connection *mc = ctx;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return 1; /* a pipelined next request */
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

static enum MHD_Result respond(struct MHD_Connection *mc, struct conn *c, const struct k3_srv_req *rq)
{
    k3_srv_dispatch_conn(c->h->srv, rq, client_alive, mc, &c->resp);
    c->have_resp = 1;
    struct MHD_Response *r;
    if (c->resp.stream.next) {
        atomic_fetch_add(&c->h->n_streams, 1); /* until on_completed */
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, read_stream, c, NULL);
    }
    else
        r = MHD_create_response_from_buffer(c->resp.body.n, c->resp.body.p ? c->resp.body.p : (char *)"",
                                            MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, c->resp.content_type);
    for (int i = 0; i < c->resp.n_headers; i++)
        MHD_add_response_header(r, c->resp.headers[i].name, c->resp.headers[i].value);
    enum MHD_Result ok = MHD_queue_response(mc, (unsigned)c->resp.status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_n, void **con_cls)
{
    struct k3_http *h = cls;
    (void)version;
    struct conn *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        c->h = h;
        *con_cls = c;
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->max_body) {
            /* refuse before reading the body; MHD closes the connection afterwards */
            MHD_get_connection_values(mc, MHD_HEADER_KIND, add_header, c);
            struct k3_srv_req rq = {method, url, c->hdr, (int)c->n_hdr, NULL, (size_t)strtoull(cl, NULL, 10)};
            return respond(mc, c, &rq);
        }
        return MHD_YES;
    }
    if (c->have_resp) {
        *upload_n = 0; /* the rest of a refused body */
        return MHD_YES;
    }
    if (*upload_n) {
        c->body_seen += *upload_n;
        if (c->body_seen > h->max_body) c->too_large = 1;
        else k3_sbuf_add(&c->body, upload, *upload_n);
        *upload_n = 0;
        return MHD_YES;
    }
    MHD_get_connection_values(mc, MHD_HEADER_KIND, add_header, c);
    struct k3_srv_req rq = {method, url, c->hdr, (int)c->n_hdr, c->too_large ? NULL : c->body.p,
                            c->too_large ? c->body_seen : c->body.n};
    return respond(mc, c, &rq);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)mc;
    struct conn *c = *con_cls;
    if (!c) return;
    if (c->resp.stream.next) atomic_fetch_sub(&c->h->n_streams, 1);
    if (c->resp.stream.close) {
        int aborted = !(toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && c->ended);
        if (aborted) K3_DEBUG("http: a client left before its stream ended (code %d)", (int)toe);
        c->resp.stream.close(c->resp.stream.ctx, aborted);
        c->resp.stream = (struct k3_srv_stream){0};
    }
    k3_srv_resp_free(&c->resp);
    k3_sbuf_free(&c->body);
    k3_sbuf_free(&c->out);
    free(c->hdr);
    free(c);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    K3_DEBUG("http: %s", msg);
}

int k3_http_start(struct k3_http **out, struct k3_srv *s, const struct k3_http_cfg *cfg, struct k3_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int rc = getaddrinfo(cfg->host, port, &hints, &ai);
    if (rc) return k3_err_set(err, "server.host '%s': %s", cfg->host, gai_strerror(rc));
    struct k3_http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        return k3_err_set(err, "out of memory");
    }
    h->srv = s;
    h->max_body = k3_srv_config(s)->max_body_bytes;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        free(h);
        return k3_err_set(err, "cannot listen on %s port %d (in use, or not an address of this host?)",
                          cfg->host, cfg->port);
    }
    const union MHD_DaemonInfo *li = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    h->port = cfg->port;
    if (li && getsockname(li->listen_fd, (struct sockaddr *)&ss, &sl) == 0)
        h->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    *out = h;
    return 0;
}

int k3_http_port(const struct k3_http *h) { return h->port; }

void k3_http_quiesce(struct k3_http *h)
{
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void k3_http_stop(struct k3_http *h)
{
    if (!h) return;
    /* Streams whose generation is over still send their last events and [DONE]: give
     * them a moment (they need no engine step) before the connections are closed. */
    for (int i = 0; i < 500 && atomic_load(&h->n_streams) > 0; i++) usleep(10 * 1000);
    atomic_store(&h->stopping, 1);
    MHD_stop_daemon(h->d);
    free(h);
}
