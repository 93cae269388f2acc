/* fe_buf.h - a growable byte string for the frontend (prompt text, JSON, deltas).
 *
 * Zero-initialise, append, free. The bytes stay NUL-terminated so a buffer can be
 * printed, but the length is authoritative: JSON strings may hold U+0000. Running out of
 * memory aborts (K3_FATAL), like every allocation on rank 0's request path. */
#ifndef K3_FRONTEND_FE_BUF_H
#define K3_FRONTEND_FE_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct k3_sbuf {
    char *p;
    size_t n, cap;
};

void k3_sbuf_reserve(struct k3_sbuf *b, size_t extra);
void k3_sbuf_add(struct k3_sbuf *b, const char *s, size_t len);
void k3_sbuf_adds(struct k3_sbuf *b, const char *s);
void k3_sbuf_addc(struct k3_sbuf *b, char c);
void k3_sbuf_addf(struct k3_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void k3_sbuf_clear(struct k3_sbuf *b);
void k3_sbuf_free(struct k3_sbuf *b);
/* Hands the bytes over (NUL-terminated; never NULL) and resets b. */
char *k3_sbuf_take(struct k3_sbuf *b);

#endif
