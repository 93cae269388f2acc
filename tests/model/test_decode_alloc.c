/* test_decode_alloc.c - a decode step allocates nothing (DESIGN.md §2): after
 * one warm-up step (the CPU backend's kept scratch grows to its decode size),
 * ten more decode steps of k3-tiny and kimi-linear-tiny make no call to
 * malloc, calloc, realloc or aligned_alloc. The calls are counted by linking
 * with -Wl,--wrap (so this test is not built with sanitizers, which intercept
 * the same functions).
 * usage: test_decode_alloc CONFIGS_DIR OUT_DIR */
#include <stdio.h>
#include <stdlib.h>

#include "k3_test.h"
#include "kernels/cpu/cpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/gen_weights.h"
#include "model/weights.h"

static long n_alloc;

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__wrap_malloc(size_t n) { n_alloc++; return __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { n_alloc++; return __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { n_alloc++; return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { n_alloc++; return __real_aligned_alloc(a, n); }

static void test_model(const char *configs, const char *out, const char *name)
{
    char cpath[1024], dir[1024];
    snprintf(cpath, sizeof cpath, "%s/%s/config.json", configs, name);
    snprintf(dir, sizeof dir, "%s/alloc-%s", out, name);
    struct k3_err err;
    struct k3_gen_opts g = {.config_path = cpath, .out_dir = dir, .seed = 9, .layer_lo = -1, .layer_hi = -1};
    struct k3_gen_stats st;
    CHECK_MSG(k3_gen_weights(&g, &st, &err) == 0, "%s", err.msg);
    struct k3_model_config cfg;
    struct k3_checkpoint *ck;
    struct k3_weights w;
    CHECK_MSG(k3_model_config_load(dir, &cfg, &err) == 0 && k3_checkpoint_open(dir, &ck, &err) == 0 &&
                  k3_weights_load(&cfg, ck, &w, &err) == 0, "%s", err.msg);
    struct k3_backend be;
    struct k3_forward *f;
    struct k3_seq_cache c;
    struct k3_forward_opts o = {.max_tok = 64, .max_ctx = 64, .kda_chunk = 64, .mla_absorb = -1};
    CHECK(k3_cpu_backend_init(&be, 2) == 0);
    CHECK(k3_forward_init(&f, &cfg, &w, &be, &o, &err) == 0 && k3_seq_cache_init(&c, &cfg, 64, &err) == 0);
    float *logits = malloc(sizeof(float) * (size_t)(32 * cfg.vocab_size));
    int32_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = (int32_t)((i * 31 + 5) % cfg.vocab_size);
    CHECK(k3_forward_run(f, &c, ids, 20, logits, &err) == 0);
    CHECK(k3_forward_run(f, &c, ids + 20, 1, logits, &err) == 0);  /* warm-up decode step */
    long before = n_alloc;
    /* The loading above allocated: if nothing was counted, --wrap is not in effect. */
    CHECK_MSG(before > 0, "the allocation counter counted nothing (is -Wl,--wrap=malloc linked?)");
    for (int t = 21; t < 31; t++) CHECK(k3_forward_run(f, &c, ids + t, 1, logits, &err) == 0);
    long during = n_alloc - before;
    printf("  %-18s allocations in 10 decode steps: %ld\n", name, during);
    CHECK_MSG(during == 0, "%s: %ld allocations on the decode path", name, during);
    free(logits);
    k3_seq_cache_free(&c);
    k3_forward_free(f);
    k3_cpu_backend_free(&be);
    k3_weights_free(&w);
    k3_checkpoint_free(ck);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_decode_alloc CONFIGS_DIR OUT_DIR\n");
        return 2;
    }
    test_model(argv[1], argv[2], "k3-tiny");
    test_model(argv[1], argv[2], "kimi-linear-tiny");
    return k3_test_summary();
}
