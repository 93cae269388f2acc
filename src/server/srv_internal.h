/* srv_internal.h - the server's state, shared by dispatch.c, gen.c and the API modules
 * (not part of the interface: modules use route.h and gen.h). */
#ifndef K3_SERVER_SRV_INTERNAL_H
#define K3_SERVER_SRV_INTERNAL_H

#include <pthread.h>

#include "server/metrics.h"
#include "server/server.h"

struct k3_gen;

struct k3_srv {
    struct k3_srv_cfg cfg;        /* model_name and api_key point at the copies below */
    char model_name[256];
    char api_key[256];
    const struct k3_tok *tok;     /* NULL: tokenizer routes answer 503 */
    struct k3_sched *sched;       /* NULL: generation routes answer 503 */
    int32_t end_ids[4];           /* the model's end-of-message ids (default stop ids) */
    int n_end_ids;
    struct k3_metrics metrics;
    pthread_mutex_t mu;           /* guards everything below */
    struct k3_gen *active;        /* generation requests the scheduler has not finished */
    int n_active;
    int draining;
    double drain_t0;
    uint64_t rng;                 /* splitmix64 state for ids and tool-call id seeds */
    uint64_t created;             /* wall-clock seconds at start (the models' "created") */
};

/* gen.c: every active generation's sequence is cancelled. */
void k3_gen_cancel_all(struct k3_srv *s);

#endif
