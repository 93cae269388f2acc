/* metrics.h - the server's counters and their Prometheus text exposition (/metrics).
 *
 * Counters are updated from HTTP threads (requests by route and status) and the step
 * thread (step times, tokens); one mutex guards them, held for a few increments. The
 * scheduler's gauges (queued, running, free/total KDA slots and MLA blocks) are read from
 * k3_sched_stats when scraped. Names follow Prometheus conventions (k3_ prefix, _total for
 * counters, _seconds for times) and the output is checked by a parser test. */
#ifndef K3_SERVER_METRICS_H
#define K3_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "engine/scheduler.h"
#include "frontend/fe_buf.h"
#include "frontend/tokenizer.h"

#define K3_METRICS_MAX_ROUTES 32
#define K3_METRICS_N_CODES 8      /* 200 400 401 404 405 413 429 503, + other */
#define K3_METRICS_N_STEP_BUCKETS 12

struct k3_metrics {
    pthread_mutex_t mu;
    const char *route_paths[K3_METRICS_MAX_ROUTES + 1]; /* + one row for unknown routes */
    int n_routes;
    uint64_t requests[K3_METRICS_MAX_ROUTES + 1][K3_METRICS_N_CODES + 1];
    uint64_t prompt_tokens, completion_tokens, reasoning_tokens;
    uint64_t finished[4];         /* stop, length, tool_calls, cancelled */
    uint64_t step_buckets[K3_METRICS_N_STEP_BUCKETS]; /* cumulative at exposition time */
    uint64_t n_steps;
    double step_seconds;
    double ttft_sum_s;
    uint64_t n_ttft;
};

void k3_metrics_init(struct k3_metrics *m, const char *const *route_paths, int n_routes);
void k3_metrics_free(struct k3_metrics *m);

/* route: index into route_paths, or -1 for an unknown route. */
void k3_metrics_request(struct k3_metrics *m, int route, int status);
void k3_metrics_step(struct k3_metrics *m, double step_s);
void k3_metrics_finish(struct k3_metrics *m, const char *finish_reason, int prompt_tokens,
                       int completion_tokens, int reasoning_tokens);
void k3_metrics_ttft(struct k3_metrics *m, double seconds);

/* Appends the exposition (text format 0.0.4); st may be NULL (no engine), tok NULL (no
 * tokenizer: its kept chunks are not reported). */
void k3_metrics_write(struct k3_metrics *m, const struct k3_sched_stats *st, int active,
                      const struct k3_tok_chunk_stats *tok, struct k3_sbuf *out);

#endif
