/* err.h - recoverable errors: a status plus a message that says what to do next.
 *
 * Functions that can fail on bad input (a config file, a request, a checkpoint)
 * return 0 on success or -1 on failure and fill a caller-owned struct k3_err.
 * Fatal, unrecoverable errors use K3_FATAL / K3_CHECK_* from log.h instead. */
#ifndef K3_CORE_ERR_H
#define K3_CORE_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

#define K3_ERR_MSG_BYTES 1024

struct k3_err {
    char msg[K3_ERR_MSG_BYTES];
};

/* Sets err->msg (if err is non-NULL) and returns -1, so callers can write
 * `return k3_err_set(err, "...", ...);`. */
int k3_err_set(struct k3_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefixes the message already in err with more context: "<prefix>: <msg>". */
int k3_err_prefix(struct k3_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
