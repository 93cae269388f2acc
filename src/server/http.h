/* http.h - the socket side of the server: libmicrohttpd (HTTP/1.1, keep-alive, chunked
 * transfer) around k3_srv_dispatch.
 *
 * One thread per connection (MHD_USE_THREAD_PER_CONNECTION): a streamed response's
 * content reader waits on its request's condition variable (k3_gen_wait, 0.5 s at a time,
 * an SSE comment after 10 s of silence), so a slow or stalled reader blocks only its own
 * thread and never the step thread; a non-streamed request waits in the access handler.
 * Bodies are read into memory up to server.max_body_bytes; a larger Content-Length is
 * refused with 413 before the body is read. When a connection ends before its stream did
 * (MHD's request-completed callback with an error code), the stream is closed as aborted,
 * which cancels the sequence. Listens on server.host (loopback unless configured); port
 * 0 picks a free port (k3_http_port). */
#ifndef K3_SERVER_HTTP_H
#define K3_SERVER_HTTP_H

#include "core/err.h"
#include "server/server.h"

struct k3_http_cfg {
    const char *host;          /* numeric IPv4/IPv6 address or a name that resolves */
    int port;                  /* 0: any free port */
    int max_connections;
    int idle_timeout_s;        /* an idle client connection is closed after this */
};

struct k3_http;

int k3_http_start(struct k3_http **h, struct k3_srv *s, const struct k3_http_cfg *cfg,
                  struct k3_err *err);
int k3_http_port(const struct k3_http *h);
/* Stops accepting connections (connections already open keep being served). */
void k3_http_quiesce(struct k3_http *h);
/* Closes every connection (streams are closed as aborted), joins the threads, frees. */
void k3_http_stop(struct k3_http *h);

#endif
