/* err.c - see err.h. */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int k3_err_set(struct k3_err *err, const char *fmt, ...)
{
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int k3_err_prefix(struct k3_err *err, const char *fmt, ...)
{
    if (!err) return -1;
    char prefix[K3_ERR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Keep the prefix short enough that the original message still fits. */
    size_t np = strlen(prefix);
    if (np > sizeof err->msg / 2) np = sizeof err->msg / 2;
    size_t nm = strnlen(err->msg, sizeof err->msg - 1);
    if (np + 2 + nm > sizeof err->msg - 1) nm = sizeof err->msg - 1 - np - 2;
    memmove(err->msg + np + 2, err->msg, nm);
    memcpy(err->msg, prefix, np);
    err->msg[np] = ':';
    err->msg[np + 1] = ' ';
    err->msg[np + 2 + nm] = 0;
    return -1;
}
