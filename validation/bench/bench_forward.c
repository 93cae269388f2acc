/* bench_forward.c - prefill and decode tokens/s of the CPU forward pass, at 1
 * thread and at all threads, with a correctness check in the same run.
 *
 *   bench_forward --model DIR [--prompt 128] [--decode 32] [--threads 1,0] [--json]
 *
 * Prefill: the prompt through the caches, logits of its last token only (what
 * serving needs). Decode: greedy, one token per step, logits every step.
 * Check: a fresh cache runs prompt + generated tokens as one prefill; the
 * decode steps' logits must match it (max|d|/max|ref| <= 1e-5, the issue-4
 * prefill/decode tolerance) and give the same argmax (#wrong counts
 * mismatches). Threads 0 = all cores this process may use. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/weights.h"

struct result {
    int threads;
    double prefill_s, decode_s, check_rel;
    int n_wrong;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int32_t argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int32_t)b;
}

static int run_one(const struct k3_model_config *cfg, const struct k3_weights *w, int threads, int n_prompt,
                   int n_decode, struct result *r)
{
    struct k3_err err;
    struct k3_backend be;
    struct k3_forward *f = NULL;
    struct k3_seq_cache c = {0}, c2 = {0};
    int64_t V = cfg->vocab_size, n_all = n_prompt + n_decode;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_all);
    float *lg = malloc(sizeof(float) * (size_t)((n_decode + 1) * V));
    float *ref = malloc(sizeof(float) * (size_t)(n_all * V));
    K3_CHECK(ids && lg && ref, "out of memory");
    K3_CHECK(k3_cpu_backend_init(&be, threads) == 0, "cannot start %d threads", threads);
    struct k3_forward_opts o = {.max_tok = 512, .max_ctx = n_all, .kda_chunk = 64, .mla_absorb = -1};
    if (k3_forward_init(&f, cfg, w, &be, &o, &err) || k3_seq_cache_init(&c, cfg, n_all, &err) ||
        k3_seq_cache_init(&c2, cfg, n_all, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        return -1;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n_prompt; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
    r->threads = be.n_threads;
    double t0 = now_s();
    K3_CHECK(k3_forward_run(f, &c, ids, n_prompt - 1, NULL, &err) == 0, "%s", err.msg);
    K3_CHECK(k3_forward_run(f, &c, ids + n_prompt - 1, 1, lg, &err) == 0, "%s", err.msg);
    double t1 = now_s();
    for (int t = 0; t < n_decode; t++) {
        ids[n_prompt + t] = argmax(lg + (int64_t)t * V, V);
        K3_CHECK(k3_forward_run(f, &c, ids + n_prompt + t, 1, lg + (int64_t)(t + 1) * V, &err) == 0, "%s",
                 err.msg);
    }
    double t2 = now_s();
    r->prefill_s = t1 - t0;
    r->decode_s = t2 - t1;
    /* Check: one prefill of everything; decode step t produced the logits of position n_prompt + t. */
    K3_CHECK(k3_forward_run(f, &c2, ids, n_all, ref, &err) == 0, "%s", err.msg);
    double merr = 0, mref = 0;
    r->n_wrong = 0;
    for (int t = 0; t <= n_decode; t++) {
        const float *a = lg + (int64_t)t * V, *b = ref + (int64_t)(n_prompt - 1 + t) * V;
        for (int64_t i = 0; i < V; i++) {
            double e = fabs((double)a[i] - b[i]);
            if (e > merr || isnan(e)) merr = isnan(e) ? INFINITY : e;
            if (fabs(b[i]) > mref) mref = fabs(b[i]);
        }
        r->n_wrong += argmax(a, V) != argmax(b, V);
    }
    r->check_rel = merr / mref;
    k3_seq_cache_free(&c);
    k3_seq_cache_free(&c2);
    k3_forward_free(f);
    k3_cpu_backend_free(&be);
    free(ids);
    free(lg);
    free(ref);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *threads_s = "1,0";
    int n_prompt = 128, n_decode = 32, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads_s = argv[++i];
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "usage: bench_forward --model DIR [--prompt N] [--decode M] [--threads 1,0] [--json]\n");
            return 2;
        }
    }
    if (!model || n_prompt < 1 || n_decode < 0) {
        fprintf(stderr, "bench_forward: --model DIR is required; --prompt >= 1, --decode >= 0\n");
        return 2;
    }
    k3_log_set_level(K3_LOG_WARN, 0);
    struct k3_err err;
    struct k3_model_config cfg;
    struct k3_checkpoint *ck;
    struct k3_weights w;
    if (k3_model_config_load(model, &cfg, &err) || k3_checkpoint_open(model, &ck, &err) ||
        k3_weights_load(&cfg, ck, &w, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        return 1;
    }
    struct result res[8];
    int n_res = 0, bad = 0;
    char *list = strdup(threads_s);
    for (char *t = strtok(list, ","); t && n_res < 8; t = strtok(NULL, ",")) {
        if (run_one(&cfg, &w, atoi(t), n_prompt, n_decode, &res[n_res])) return 1;
        bad |= !(res[n_res].check_rel <= 1e-5) || res[n_res].n_wrong;
        n_res++;
    }
    free(list);
    if (json) {
        printf("{\"model\": \"%s\", \"prompt\": %d, \"decode\": %d, \"runs\": [", model, n_prompt, n_decode);
        for (int i = 0; i < n_res; i++)
            printf("%s{\"threads\": %d, \"prefill_s\": %.4f, \"prefill_tok_s\": %.3f, \"decode_s\": %.4f, "
                   "\"decode_tok_s\": %.3f, \"check_rel\": %.3e, \"wrong\": %d}", i ? ", " : "", res[i].threads,
                   res[i].prefill_s, n_prompt / res[i].prefill_s, res[i].decode_s,
                   n_decode / res[i].decode_s, res[i].check_rel, res[i].n_wrong);
        printf("]}\n");
    } else {
        printf("# k3 forward, CPU backend: %s (%s, d %lld, %d layers, vocab %lld)\n", model,
               k3_arch_name(cfg.arch), (long long)cfg.hidden_size, cfg.n_layers, (long long)cfg.vocab_size);
        printf("# prefill: %d prompt tokens, logits of the last; decode: %d greedy steps\n", n_prompt, n_decode);
        printf("# check: decode logits vs one prefill of all tokens, max|d|/max|ref| (tol 1e-5), #wrong = argmax mismatches\n");
        printf("# %7s %10s %13s %10s %12s %11s %6s\n", "threads", "prefill_s", "prefill_tok_s", "decode_s",
               "decode_tok_s", "check_rel", "#wrong");
        for (int i = 0; i < n_res; i++)
            printf("  %7d %10.3f %13.2f %10.3f %12.2f %11.2e %6d\n", res[i].threads, res[i].prefill_s,
                   n_prompt / res[i].prefill_s, res[i].decode_s, n_decode / res[i].decode_s, res[i].check_rel,
                   res[i].n_wrong);
        if (n_res >= 2)
            printf("# speedup %d vs %d threads: prefill %.2fx, decode %.2fx\n", res[n_res - 1].threads,
                   res[0].threads, res[0].prefill_s / res[n_res - 1].prefill_s,
                   res[0].decode_s / res[n_res - 1].decode_s);
    }
    k3_weights_free(&w);
    k3_checkpoint_free(ck);
    return bad ? 1 : 0;
}
