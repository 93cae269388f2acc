/* fe_buf.c - the growable byte string of fe_buf.h. */
#include "frontend/fe_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

void k3_sbuf_reserve(struct k3_sbuf *b, size_t extra)
{
    if (b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) K3_FATAL("out of memory growing a frontend buffer to %zu bytes", cap);
    b->p = p;
    b->cap = cap;
}

void k3_sbuf_add(struct k3_sbuf *b, const char *s, size_t len)
{
    k3_sbuf_reserve(b, len);
    if (len) memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

void k3_sbuf_adds(struct k3_sbuf *b, const char *s) { k3_sbuf_add(b, s, strlen(s)); }

void k3_sbuf_addc(struct k3_sbuf *b, char c) { k3_sbuf_add(b, &c, 1); }

void k3_sbuf_addf(struct k3_sbuf *b, const char *fmt, ...)
{
    /* gcc -O2 with -fsanitize=undefined otherwise sees a path with fmt NULL and warns
     * "null format string" */
    if (!fmt) return;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0) len = 0;
    k3_sbuf_reserve(b, (size_t)len);
    vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap2);
    va_end(ap2);
    b->n += (size_t)len;
}

void k3_sbuf_clear(struct k3_sbuf *b)
{
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

void k3_sbuf_free(struct k3_sbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

char *k3_sbuf_take(struct k3_sbuf *b)
{
    k3_sbuf_reserve(b, 0);
    char *p = b->p;
    b->p = NULL;
    b->n = b->cap = 0;
    return p;
}
