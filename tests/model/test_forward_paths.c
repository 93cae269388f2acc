/* test_forward_paths.c - the forward pass's equivalent paths give the same
 * logits (tolerance 1e-5 of max|ref|, the issue-4 prefill/decode tolerance):
 *   - prefill in slices of 7 tokens (max_tok) vs one slice;
 *   - KDA recurrent (chunk 0) and chunk 16 vs chunk 64 in prefill;
 *   - MLA weight absorption in prefill vs the expanded form;
 *   - prefill then decode (absorbed MLA, recurrent KDA) vs one prefill;
 *   - one thread vs two, bitwise.
 * On k3-tiny and kimi-linear-tiny checkpoints written with k3_gen_weights().
 * usage: test_forward_paths CONFIGS_DIR OUT_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k3_test.h"
#include "kernels/cpu/cpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/gen_weights.h"
#include "model/weights.h"

#define N_TOK 41

static void run(const struct k3_model_config *cfg, const struct k3_weights *w, struct k3_backend *be,
                struct k3_forward_opts o, const int32_t *ids, int64_t split, float *logits)
{
    struct k3_err err;
    struct k3_forward *f;
    struct k3_seq_cache c;
    o.max_ctx = N_TOK;
    CHECK(k3_forward_init(&f, cfg, w, be, &o, &err) == 0);
    CHECK(k3_seq_cache_init(&c, cfg, N_TOK, &err) == 0);
    CHECK(k3_forward_run(f, &c, ids, split, logits, &err) == 0);
    for (int64_t t = split; t < N_TOK; t++)
        CHECK(k3_forward_run(f, &c, ids + t, 1, logits + t * cfg->vocab_size, &err) == 0);
    k3_seq_cache_free(&c);
    k3_forward_free(f);
}

static void expect_close(const char *what, const float *got, const float *ref, int64_t n, double tol)
{
    double merr = 0, mref = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= merr)) { merr = e; worst = i; }
        if (fabs(ref[i]) > mref) mref = fabs(ref[i]);
    }
    double rel = merr / mref;
    printf("  %-44s max|d|/max|ref| %.3e (tol %.0e, %5.1f%% used) worst [%lld]\n", what, rel, tol,
           100 * rel / tol, (long long)worst);
    CHECK_MSG(rel <= tol, "%s: %.3e", what, rel);
}

static void test_model(const char *configs, const char *out, const char *name)
{
    char cpath[1024], dir[1024];
    snprintf(cpath, sizeof cpath, "%s/%s/config.json", configs, name);
    snprintf(dir, sizeof dir, "%s/paths-%s", out, name);
    struct k3_err err;
    struct k3_gen_opts g = {.config_path = cpath, .out_dir = dir, .seed = 5, .layer_lo = -1, .layer_hi = -1};
    struct k3_gen_stats st;
    CHECK_MSG(k3_gen_weights(&g, &st, &err) == 0, "%s", err.msg);
    struct k3_model_config cfg;
    struct k3_checkpoint *ck;
    struct k3_weights w;
    CHECK_MSG(k3_model_config_load(dir, &cfg, &err) == 0 && k3_checkpoint_open(dir, &ck, &err) == 0 &&
                  k3_weights_load(&cfg, ck, &w, &err) == 0, "%s", err.msg);
    printf("%s\n", name);
    int64_t n = N_TOK * cfg.vocab_size;
    int32_t ids[N_TOK];
    for (int i = 0; i < N_TOK; i++) ids[i] = (int32_t)((i * 7919 + 13) % cfg.vocab_size);
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    struct k3_backend be1, be2;
    CHECK(k3_cpu_backend_init(&be1, 1) == 0 && k3_cpu_backend_init(&be2, 2) == 0);
    struct k3_forward_opts base = {.max_tok = 512, .kda_chunk = 64, .mla_absorb = -1};
    run(&cfg, &w, &be2, base, ids, N_TOK, ref);

    struct k3_forward_opts o = base;
    o.max_tok = 7;
    run(&cfg, &w, &be2, o, ids, N_TOK, got);
    expect_close("prefill in slices of 7 tokens", got, ref, n, 1e-5);
    o = base;
    o.kda_chunk = 0;
    run(&cfg, &w, &be2, o, ids, N_TOK, got);
    expect_close("KDA recurrent prefill", got, ref, n, 1e-5);
    o.kda_chunk = 16;
    run(&cfg, &w, &be2, o, ids, N_TOK, got);
    expect_close("KDA chunk 16 prefill", got, ref, n, 1e-5);
    o = base;
    o.mla_absorb = 1;
    run(&cfg, &w, &be2, o, ids, N_TOK, got);
    expect_close("MLA absorbed prefill", got, ref, n, 1e-5);
    run(&cfg, &w, &be2, base, ids, 20, got);
    expect_close("prefill 20 + decode 21", got, ref, n, 1e-5);
    o.mla_absorb = 0;
    run(&cfg, &w, &be2, o, ids, 20, got);
    expect_close("prefill 20 + decode 21, MLA expanded", got, ref, n, 1e-5);
    run(&cfg, &w, &be1, base, ids, N_TOK, got);
    CHECK_MSG(memcmp(got, ref, sizeof(float) * (size_t)n) == 0, "1 vs 2 threads differ");
    printf("  1 vs 2 threads: %s\n", memcmp(got, ref, sizeof(float) * (size_t)n) ? "DIFFER" : "bitwise equal");
    k3_cpu_backend_free(&be1);
    k3_cpu_backend_free(&be2);
    free(ref);
    free(got);
    k3_weights_free(&w);
    k3_checkpoint_free(ck);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_forward_paths CONFIGS_DIR OUT_DIR\n");
        return 2;
    }
    test_model(argv[1], argv[2], "k3-tiny");
    test_model(argv[1], argv[2], "kimi-linear-tiny");
    return k3_test_summary();
}
