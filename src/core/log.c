/* log.c - see log.h. One static struct holds the process identity and the abort
 * hooks; writes go to stderr with one fprintf per line so that lines from
 * different threads do not interleave mid-line. */
#include "core/clock.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define K3_MAX_ABORT_HOOKS 8

static struct {
    int rank, world, device;
    enum k3_log_level level;
    int all_ranks;
    char host[64];
    double t0;
    int n_hooks;
    int in_fatal;
    k3_abort_hook hooks[K3_MAX_ABORT_HOOKS];
    void *hook_ctx[K3_MAX_ABORT_HOOKS];
} g_log = {.rank = 0, .world = 1, .device = -1, .level = K3_LOG_INFO};

static void ensure_init(void)
{
    if (g_log.host[0]) return;
    if (gethostname(g_log.host, sizeof g_log.host - 1) != 0) strcpy(g_log.host, "?");
    g_log.host[sizeof g_log.host - 1] = 0;
    g_log.t0 = k3_now_s();
}

void k3_log_set_rank(int rank, int world)
{
    ensure_init();
    g_log.rank = rank;
    g_log.world = world;
}

void k3_log_set_device(int device) { g_log.device = device; }

void k3_log_set_level(enum k3_log_level level, int all_ranks)
{
    g_log.level = level;
    g_log.all_ranks = all_ranks;
}

enum k3_log_level k3_log_get_level(void) { return g_log.level; }

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *k3_log_level_name(enum k3_log_level level)
{
    return (unsigned)level < 4 ? level_names[level] : "?";
}

int k3_log_level_parse(const char *name, enum k3_log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(name, level_names[i]) == 0) {
            *out = (enum k3_log_level)i;
            return 0;
        }
    }
    return -1;
}

void k3_log_add_abort_hook(k3_abort_hook hook, void *ctx)
{
    if (g_log.n_hooks >= K3_MAX_ABORT_HOOKS) return;
    g_log.hooks[g_log.n_hooks] = hook;
    g_log.hook_ctx[g_log.n_hooks] = ctx;
    g_log.n_hooks++;
}

static void vline(const char *tag, const char *fmt, va_list ap)
{
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n') msg[--n] = 0;
    fprintf(stderr, "k3 r%d/%d %s %.3fs %s %s\n", g_log.rank, g_log.world, g_log.host,
            k3_now_s() - g_log.t0, tag, msg);
}

void k3_logv(enum k3_log_level level, const char *fmt, va_list ap)
{
    static const char *const tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    ensure_init();
    if (level > g_log.level) return;
    if (g_log.rank != 0 && !g_log.all_ranks && level > K3_LOG_WARN) return;
    vline(tags[level], fmt, ap);
}

void k3_log(enum k3_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    k3_logv(level, fmt, ap);
    va_end(ap);
}

void k3_fatal(const char *file, int line, const char *what, const char *fmt, ...)
{
    ensure_init();
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char dev[32] = "cpu";
    if (g_log.device >= 0) snprintf(dev, sizeof dev, "gpu %d", g_log.device);
    fprintf(stderr,
            "k3 r%d/%d %s %.3fs FATAL rank %d on %s (%s, pid %d): %s\n"
            "    failed: %s\n    at %s:%d\n    aborting the whole job\n",
            g_log.rank, g_log.world, g_log.host, k3_now_s() - g_log.t0, g_log.rank,
            g_log.host, dev, (int)getpid(), msg, what, file, line);
    fflush(stderr);
    /* A hook that fails fatally itself must not recurse forever. */
    if (!g_log.in_fatal) {
        g_log.in_fatal = 1;
        for (int i = g_log.n_hooks - 1; i >= 0; i--) g_log.hooks[i](g_log.hook_ctx[i]);
    }
    abort();
}
