/* tok_ab.c - paired timing of several builds of the tokenizer in one process: each build is a
 * shared library (tok_so.sh), loaded side by side, and every round calls k3_tok_encode of
 * each once, in a rotating order, so the calls of a round share the machine's state (a shared
 * host's load changes by the second; separate processes also differ in where the memos' pages
 * fall in the caches, so run it several times: ab_libs.sh).
 *
 *   tok_ab MODEL CONFIG FILE ROUNDS LIB.so...
 *
 * Prints one JSON object per library: best and median ms, and the quartiles of its time over
 * lib 0's in the same round. Every call's id count is checked against lib 0's. Every call is
 * on new text: a build that keeps memos between calls has them emptied first (k3_tok_forget);
 * with TOK_AB_WARM=1 in the environment they are not, so every call follows one on the same
 * text (the warm-up rounds make the first). TOK_AB_SPECIAL=1 encodes with special tokens
 * recognised (a chat prompt's segments). TOK_AB_ANY_IDS=1 skips the id count check, for
 * bounds: builds that skip part of the work on purpose and give other ids (runs 54 and 55).
 * TOK_AB_NO_CHUNKS=1 keeps no chunks (k3_tok_chunk_budget 0), so that warm calls time the
 * memos' hits rather than the kept chunks' copies (run 66). Each switch is on when set to
 * anything but 0. TOK_AB_LOAD_FIRST=k loads library k (mod their count) first and the others
 * after it in turn; lib 0 stays the one the others are timed against. The library loaded first
 * is the quickest by 1-2% even against an identical copy of itself (run 121), so ab_libs.sh
 * lets each library come first in as many processes as the others. TOK_AB_THRASH=MiB writes a
 * line of every 64 bytes of a buffer that large between the forget and the timed call, so that
 * what the forget wrote (a seeded memo: bpe.c, memo_seed) is no longer in the caches (run 131). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "frontend/tokenizer.h"
#include "tok_tool.h"

#define MAX_LIBS 16

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && strcmp(v, "0") != 0;
}

struct lib {
    const char *path;
    struct k3_tok *tok;
    void (*encode)(const struct k3_tok *, const char *, size_t, enum k3_tok_mode, struct k3_pool *,
                   struct k3_tok_ids *);
    void (*ids_free)(struct k3_tok_ids *);
    void (*forget)(const struct k3_tok *);
};

static int lib_open(struct lib *l, const char *path, const char *model, const char *config)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "tok_ab: %s\n", dlerror());
        return -1;
    }
    int (*load)(struct k3_tok **, const char *, const char *, struct k3_err *) =
        (int (*)(struct k3_tok **, const char *, const char *, struct k3_err *))dlsym(h, "k3_tok_load_files");
    l->encode = (void (*)(const struct k3_tok *, const char *, size_t, enum k3_tok_mode, struct k3_pool *,
                          struct k3_tok_ids *))dlsym(h, "k3_tok_encode");
    l->ids_free = (void (*)(struct k3_tok_ids *))dlsym(h, "k3_tok_ids_free");
    /* builds that keep memos between calls: emptied before each call, so every call is on
     * new text as in builds that keep none (NULL in those) */
    l->forget = (void (*)(const struct k3_tok *))dlsym(h, "k3_tok_forget");
    void (*chunk_budget)(struct k3_tok *, size_t) =
        (void (*)(struct k3_tok *, size_t))dlsym(h, "k3_tok_chunk_budget");
    if (!load || !l->encode || !l->ids_free) {
        fprintf(stderr, "tok_ab: %s lacks the tokenizer's functions\n", path);
        return -1;
    }
    struct k3_err err;
    if (load(&l->tok, model, config, &err)) {
        fprintf(stderr, "tok_ab: %s: %s\n", path, err.msg);
        return -1;
    }
    if (chunk_budget && env_on("TOK_AB_NO_CHUNKS")) chunk_budget(l->tok, 0);
    l->path = path;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc - 5 > MAX_LIBS || atoi(argv[4]) < 1) {
        fprintf(stderr, "usage: tok_ab MODEL CONFIG FILE ROUNDS LIB.so... (up to %d)\n", MAX_LIBS);
        return 2;
    }
    int n_libs = argc - 5, rounds = atoi(argv[4]);
    struct lib libs[MAX_LIBS];
    const char *first = getenv("TOK_AB_LOAD_FIRST");
    int k0 = first ? (atoi(first) % n_libs + n_libs) % n_libs : 0; /* a negative k too */
    for (int j = 0; j < n_libs; j++) {
        int i = (k0 + j) % n_libs;
        if (lib_open(&libs[i], argv[5 + i], argv[1], argv[2])) return 1;
    }
    size_t len;
    char *text = tok_tool_read("tok_ab", argv[3], &len);
    if (!text) return 1;

    double *t = calloc((size_t)rounds * n_libs, sizeof *t); /* [round][lib] seconds */
    if (!t) return 1;
    size_t n_ids0 = 0;
    int warm = env_on("TOK_AB_WARM"), any_ids = env_on("TOK_AB_ANY_IDS");
    enum k3_tok_mode mode = env_on("TOK_AB_SPECIAL") ? K3_TOK_SPECIAL : K3_TOK_PLAIN;
    const char *th = getenv("TOK_AB_THRASH");
    size_t thrash = th ? (size_t)strtoul(th, NULL, 10) << 20 : 0;
    unsigned char *junk = thrash ? calloc(thrash, 1) : NULL;
    if (thrash && !junk) return 1;
    for (int r = -2; r < rounds; r++) /* two rounds of warm-up */
        for (int j = 0; j < n_libs; j++) {
            int i = (j + (r < 0 ? 0 : r)) % n_libs;
            struct k3_tok_ids ids = {0};
            if (libs[i].forget && !warm) libs[i].forget(libs[i].tok);
            for (size_t b = 0; b < thrash; b += 64) junk[b]++; /* what the forget wrote, out of the caches */
            double t0 = k3_now_s();
            libs[i].encode(libs[i].tok, text, len, mode, NULL, &ids);
            double dt = k3_now_s() - t0;
            if (i == 0) n_ids0 = ids.n;
            else if (r >= 0 && ids.n != n_ids0 && !any_ids) {
                fprintf(stderr, "tok_ab: %s gives %zu ids, %s %zu\n", libs[i].path, ids.n, libs[0].path, n_ids0);
                return 1;
            }
            if (r >= 0) t[(size_t)r * n_libs + i] = dt;
            libs[i].ids_free(&ids);
        }
    double *v = malloc(sizeof(double) * rounds), *q = malloc(sizeof(double) * rounds);
    if (!v || !q) return 1;
    for (int i = 0; i < n_libs; i++) {
        for (int r = 0; r < rounds; r++) {
            v[r] = t[(size_t)r * n_libs + i];
            q[r] = v[r] / t[(size_t)r * n_libs];
        }
        qsort(v, (size_t)rounds, sizeof *v, tok_tool_cmp_double);
        qsort(q, (size_t)rounds, sizeof *q, tok_tool_cmp_double);
        printf("{\"lib\": \"%s\", \"file\": \"%s\", \"rounds\": %d, \"best_ms\": %.3f, \"med_ms\": %.3f, "
               "\"ratio_q1\": %.4f, \"ratio_med\": %.4f, \"ratio_q3\": %.4f}\n",
               libs[i].path, argv[3], rounds, v[0] * 1e3, v[rounds / 2] * 1e3, q[rounds / 4], q[rounds / 2],
               q[3 * rounds / 4]);
    }
    free(v);
    free(q);
    free(t);
    free(text);
    free(junk);
    return 0;
}
