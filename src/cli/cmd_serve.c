/* cmd_serve.c - `k3 serve`: the OpenAI-compatible HTTP API on rank 0 while every rank runs
 * the steps.
 *
 *   mpirun -np W k3 serve --model DIR [--config FILE] [--host H] [--port P] [--tokenizer DIR]
 *
 * Rank 0's main thread runs the step loop (cli/engine_job.h, K3_ENGINE_UNTIL_STOP);
 * libmicrohttpd's threads run the HTTP side (src/server) and only talk to the scheduler
 * through its thread-safe inbox. The other ranks run k3_engine_job_worker.
 *
 * Shutdown: SIGTERM or SIGINT on rank 0 stops the step loop (k3_engine_job_stop is
 * async-signal-safe); rank 0 then stops accepting, answers new requests with 503, steps
 * until in-flight requests finish or server.shutdown_grace_s passes (then cancels them),
 * closes the connections and tells the workers to leave. The other ranks ignore the
 * signal (mpirun forwards it to every rank) and leave with rank 0; every rank exits 0.
 * The handler needs the job at file scope: a signal handler has no context argument. */
#include <stdio.h>

#include "cli/cli.h"
#include "mpi/bootstrap.h"

#ifdef K3_NO_SERVER
int k3_cmd_serve(struct k3_cli *cli)
{
    if (cli->job->rank == 0)
        fprintf(stderr, "k3 serve: this k3 was built without libmicrohttpd; install libmicrohttpd-dev "
                        "and configure again\n");
    return K3_EXIT_FAIL;
}
#else
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/engine_job.h"
#include "cli/model_job.h"
#include "core/clock.h"
#include "core/log.h"
#include "frontend/tokenizer.h"
#include "mpi/mpi_check.h"
#include "server/http.h"
#include "server/server.h"

static struct k3_engine_job *volatile serve_job; /* for the signal handler only */
static volatile sig_atomic_t serve_signal;

static void on_signal(int sig)
{
    serve_signal = sig;
    if (serve_job) k3_engine_job_stop(serve_job);
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that left must not kill the server */
}

/* Rank 0: the server's settings from the deployment and the model. */
static int server_cfg(struct k3_cli *cli, const struct k3_model_job *mj, struct k3_srv_cfg *sc, char *name,
                      size_t name_n, const char **key)
{
    const struct k3_deploy *d = &cli->deploy;
    const char *dir = k3_arg(&cli->args, "model") ? k3_arg(&cli->args, "model") : d->model.path;
    if (d->server.served_model_name[0]) {
        snprintf(name, name_n, "%s", d->server.served_model_name);
    } else {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && dir[b - 1] != '/') b--;
        snprintf(name, name_n, "%.*s", (int)(n - b), dir + b);
    }
    *key = d->server.api_key;
    if (d->server.api_key_env[0]) {
        *key = getenv(d->server.api_key_env);
        if (!*key || !**key) {
            fprintf(stderr, "k3 serve: server.api_key_env names %s, which is not set\n", d->server.api_key_env);
            return -1;
        }
    }
    long long ctx = mj->cfg.max_position_embeddings > 0 ? mj->cfg.max_position_embeddings : 1ll << 30;
    if (d->scheduler.context_tokens && d->scheduler.context_tokens < ctx) ctx = d->scheduler.context_tokens;
    int k3_model = !strcmp(mj->cfg.model_type, "kimi_k3");
    *sc = (struct k3_srv_cfg){
        .model_name = name,
        .api_key = *key,
        .max_body_bytes = (size_t)d->server.max_body_bytes,
        .max_active = d->scheduler.max_queue + d->scheduler.max_seqs * d->parallel.adp,
        .context_tokens = (int)ctx,
        .vocab_size = (int)mj->cfg.vocab_size,
        .policy = !strcmp(d->server.sampling_policy, "open") ? K3_SRV_POLICY_OPEN
                  : !strcmp(d->server.sampling_policy, "kimi") || k3_model ? K3_SRV_POLICY_KIMI
                                                                           : K3_SRV_POLICY_OPEN,
        .request_timeout_s = d->server.request_timeout_s,
        .shutdown_grace_s = d->server.shutdown_grace_s,
    };
    return 0;
}

/* Rank 0 after the signal: drain, then stop the HTTP side. */
static void drain(struct k3_engine_job *e, struct k3_srv *srv, struct k3_http *http, double grace_s)
{
    k3_http_quiesce(http);
    int n = k3_srv_drain(srv);
    K3_INFO("k3 serve: signal %d: not accepting connections; %d requests in flight get %.0f s", (int)serve_signal,
            n, grace_s);
    double t0 = k3_now_s();
    int cancelled = 0;
    while (k3_srv_n_active(srv) > 0) {
        k3_engine_job_run(e, K3_ENGINE_UNTIL_IDLE, k3_srv_on_step, srv);
        if (k3_srv_n_active(srv) == 0) break;
        /* a request between the drain check and its submit: it arrives in a moment */
        usleep(10 * 1000);
        if (k3_now_s() - t0 > grace_s) {
            if (!cancelled) K3_INFO("k3 serve: cancelling %d requests", k3_srv_n_active(srv));
            cancelled = 1;
            k3_srv_cancel_all(srv);
        }
    }
    k3_http_stop(http);
}

int k3_cmd_serve(struct k3_cli *cli)
{
    const char *cmd = "k3 serve";
    int root = cli->job->rank == 0;
    if (!k3_arg(&cli->args, "model") && !k3_arg(&cli->args, "config")) {
        if (root) fprintf(stderr, "%s: --model (or model.path in --config) is required (see k3 serve --help)\n", cmd);
        return K3_EXIT_USAGE;
    }
    struct k3_model_job mj;
    int rc = k3_model_job_init(&mj, cli, cmd);
    if (rc) {
        k3_model_job_free(&mj);
        return rc;
    }
    const struct k3_deploy *d = &cli->deploy;
    struct k3_tok *tok = NULL;
    struct k3_err err;
    struct k3_srv_cfg sc;
    char name[256];
    const char *key = NULL;
    int ok = 1;
    if (root) {
        const char *tdir = k3_arg(&cli->args, "tokenizer");
        if (!tdir) tdir = k3_arg(&cli->args, "model") ? k3_arg(&cli->args, "model") : d->model.path;
        if (k3_tok_load(&tok, tdir, &err)) {
            fprintf(stderr, "%s: no tokenizer in %s (%s); copy tiktoken.model and tokenizer_config.json there "
                            "(k3 gen-weights --tokenizer) or pass --tokenizer DIR\n", cmd, tdir, err.msg);
            ok = 0;
        } else {
            k3_tok_chunk_budget(tok, (size_t)d->server.tokenizer_cache_bytes);
            if (server_cfg(cli, &mj, &sc, name, sizeof name, &key)) ok = 0;
        }
    }
    K3_CHECK_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, cli->job->world_comm));
    if (!ok) {
        k3_tok_free(tok);
        k3_model_job_free(&mj);
        return K3_EXIT_USAGE;
    }
    install_signals();
    struct k3_engine_size size = {0};
    struct k3_engine_job *e = NULL;
    if (k3_engine_job_init(&e, &mj, d, &size, &err)) K3_FATAL("%s: %s", cmd, err.msg);
    serve_job = e;
    rc = K3_EXIT_OK;
    if (root) {
        struct k3_srv *srv = NULL;
        struct k3_http *http = NULL;
        struct k3_http_cfg hc = {.host = d->server.host, .port = d->server.port,
                                 .max_connections = d->server.max_connections,
                                 .idle_timeout_s = d->server.request_timeout_s};
        if (k3_srv_init(&srv, &sc, tok, k3_engine_job_sched(e), &err) || k3_http_start(&http, srv, &hc, &err)) {
            fprintf(stderr, "%s: %s\n", cmd, err.msg);
            rc = K3_EXIT_FAIL;
        } else {
            K3_INFO("%s: serving \"%s\" on http://%s:%d (pid %d; %s sampling policy; context %d tokens)", cmd,
                    name, d->server.host, k3_http_port(http), (int)getpid(),
                    sc.policy == K3_SRV_POLICY_KIMI ? "kimi" : "open", sc.context_tokens);
            if (!serve_signal) k3_engine_job_run(e, K3_ENGINE_UNTIL_STOP, k3_srv_on_step, srv);
            drain(e, srv, http, sc.shutdown_grace_s);
            K3_INFO("%s: stopped", cmd);
        }
        if (srv) k3_srv_free(srv);
        k3_engine_job_shutdown(e);
    } else {
        k3_engine_job_worker(e);
    }
    serve_job = NULL;
    k3_engine_job_free(e);
    k3_tok_free(tok);
    k3_model_job_free(&mj);
    return rc;
}
#endif
