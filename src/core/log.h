/* log.h - rank-tagged logging and the one fatal path of the job.
 *
 * Every line says who wrote it: "k3 r<rank>/<world> <host> <t>s <LEVEL> message".
 * Non-root ranks print warnings and errors only unless log.all_ranks is set, so
 * a 72-rank job does not print 72 copies of every line.
 *
 * Fatal errors go through k3_fatal(): it prints rank, host, device, the failing
 * statement and file:line, runs the abort hooks (the MPI layer registers one that
 * aborts NCCL communicators and calls MPI_Abort), and only then calls abort().
 * Nothing in k3 calls exit() from one rank of a job.
 *
 * The identity of the process (rank, host, device) and the abort hooks live in
 * one process-wide struct in log.c. This is the only global in k3, and it is
 * deliberate: a fatal error can happen anywhere, including in a library
 * callback that has no context pointer to carry. */
#ifndef K3_CORE_LOG_H
#define K3_CORE_LOG_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

enum k3_log_level {
    K3_LOG_ERROR = 0,
    K3_LOG_WARN = 1,
    K3_LOG_INFO = 2,
    K3_LOG_DEBUG = 3,
};

typedef void (*k3_abort_hook)(void *ctx);

/* Identity, set by the MPI bootstrap (and the CUDA runtime for the device). */
void k3_log_set_rank(int rank, int world);
void k3_log_set_device(int device);
void k3_log_set_level(enum k3_log_level level, int all_ranks);
enum k3_log_level k3_log_get_level(void);
int k3_log_level_parse(const char *name, enum k3_log_level *out);
const char *k3_log_level_name(enum k3_log_level level);

/* Abort hooks run in reverse order of registration by k3_fatal(). At most 8. */
void k3_log_add_abort_hook(k3_abort_hook hook, void *ctx);

void k3_log(enum k3_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void k3_logv(enum k3_log_level level, const char *fmt, va_list ap);

void k3_fatal(const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#define K3_ERROR(...) k3_log(K3_LOG_ERROR, __VA_ARGS__)
#define K3_WARN(...)  k3_log(K3_LOG_WARN, __VA_ARGS__)
#define K3_INFO(...)  k3_log(K3_LOG_INFO, __VA_ARGS__)
#define K3_DEBUG(...) k3_log(K3_LOG_DEBUG, __VA_ARGS__)

#define K3_FATAL(...) k3_fatal(__FILE__, __LINE__, "fatal", __VA_ARGS__)

/* Always-on assertion (stays on in release builds). */
#define K3_CHECK(cond, ...)                                                    \
    do {                                                                       \
        if (!(cond)) k3_fatal(__FILE__, __LINE__, #cond, __VA_ARGS__);         \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
