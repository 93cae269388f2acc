/* tok_bench.c - the C side of bench.py: times k3_tok_encode on input files, on one thread
 * and on a pool, and writes the ids so bench.py checks them against tiktoken in the same run.
 *
 *   tok_bench MODEL CONFIG THREADS MIN_SECONDS OUT_IDS_DIR FILE...
 * Prints one JSON object per file: {"file", "bytes", "tokens", "st_s", "mt_s", "st_min_s",
 * "mt_min_s", "st_warm_s", "mt_warm_s", "threads", "mt_ids_equal", "anon_huge_kb"}, latencies
 * the median (and the best) over repetitions that last at least MIN_SECONDS in total (and at
 * least 3), anon_huge_kb the process's memory on 2 MiB pages at the end (tok_tool.h). st_s
 * and mt_s are calls on new text (the memos the tokenizer keeps between calls emptied before
 * each); the *_warm_s ones follow a call on the same text (a re-sent prompt); with THREADS 1 the
 * mt figures are the st ones (one path, timed once). With TOK_BENCH_POOL_ONLY=1 in the
 * environment and THREADS above 1 the one-thread figures are not timed (null): bench.py takes
 * them from its pinned one-thread process. Ids (one-thread, and the pool's compared to them):
 * OUT_IDS_DIR/<index>.ids, int32 little-endian. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "frontend/tokenizer.h"
#include "kernels/cpu/pool.h"
#include "tok_tool.h"

/* cold: every call on new text (the kept memos emptied first, untimed); warm: every call
 * after one on the same text. */
static double time_encode(const struct k3_tok *tok, const char *text, size_t len,
                          struct k3_pool *pool, int cold, double min_s, size_t *n_tokens, double *best)
{
    double t[1000];
    int n = 0;
    double total = 0;
    while (n < 1000 && (n < 3 || total < min_s)) {
        struct k3_tok_ids ids = {0};
        if (cold) k3_tok_forget(tok);
        else if (n == 0) {
            k3_tok_encode(tok, text, len, K3_TOK_PLAIN, pool, &ids);
            k3_tok_ids_free(&ids);
        }
        double t0 = k3_now_s();
        k3_tok_encode(tok, text, len, K3_TOK_PLAIN, pool, &ids);
        t[n] = k3_now_s() - t0;
        total += t[n++];
        *n_tokens = ids.n;
        k3_tok_ids_free(&ids);
    }
    qsort(t, (size_t)n, sizeof t[0], tok_tool_cmp_double);
    *best = t[0];
    return t[n / 2];
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: tok_bench MODEL CONFIG THREADS MIN_SECONDS OUT_IDS_DIR FILE...\n");
        return 2;
    }
    double t0 = k3_now_s();
    struct k3_tok *tok = tok_tool_load("tok_bench", argv[1], argv[2]);
    if (!tok) return 1;
    fprintf(stderr, "tok_bench: tokenizer loaded in %.3f s\n", k3_now_s() - t0);
    int threads = atoi(argv[3]);
    double min_s = atof(argv[4]);
    const char *po = getenv("TOK_BENCH_POOL_ONLY");
    int pool_only = po && !strcmp(po, "1");
    struct k3_pool pool;
    if (k3_pool_init(&pool, threads)) return 1;
    for (int i = 6; i < argc; i++) {
        size_t len;
        char *text = tok_tool_read("tok_bench", argv[i], &len);
        if (!text) return 1;
        size_t n_tok = 0, n_tok_mt = 0;
        double mt_best, best;
        /* a pool of one thread takes the one-thread path (k3_tok_encode): its figures are the
         * one-thread ones, not timed twice (bench.py's pinned one-thread process) */
        int one = pool.n_threads <= 1, st_timed = one || !pool_only;
        double st = -1, st_best = -1, st_warm = -1;
        if (st_timed) {
            st = time_encode(tok, text, len, NULL, 1, min_s, &n_tok, &st_best);
            st_warm = time_encode(tok, text, len, NULL, 0, min_s, &n_tok, &best);
        }
        double mt = one ? (mt_best = st_best, st) : time_encode(tok, text, len, &pool, 1, min_s, &n_tok_mt, &mt_best);
        double mt_warm = one ? st_warm : time_encode(tok, text, len, &pool, 0, min_s, &n_tok_mt, &best);
        struct k3_tok_ids ids = {0}, ids_mt = {0};
        k3_tok_encode(tok, text, len, K3_TOK_PLAIN, NULL, &ids);
        k3_tok_encode(tok, text, len, K3_TOK_PLAIN, &pool, &ids_mt);
        int same = ids.n == ids_mt.n && !memcmp(ids.ids, ids_mt.ids, ids.n * 4);
        char path[4096];
        snprintf(path, sizeof path, "%s/%d.ids", argv[5], i - 6);
        FILE *o = fopen(path, "wb");
        if (!o || fwrite(ids.ids, 4, ids.n, o) != ids.n) return 1;
        fclose(o);
        char st_j[3][32];
        const double st_v[3] = {st, st_best, st_warm};
        for (int k = 0; k < 3; k++) {
            if (st_timed) snprintf(st_j[k], sizeof st_j[k], "%.9f", st_v[k]);
            else snprintf(st_j[k], sizeof st_j[k], "null");
        }
        printf("{\"file\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"st_s\": %s, \"mt_s\": %.9f, "
               "\"st_min_s\": %s, \"mt_min_s\": %.9f, \"st_warm_s\": %s, \"mt_warm_s\": %.9f, "
               "\"threads\": %d, \"mt_ids_equal\": %s, \"anon_huge_kb\": %ld}\n",
               argv[i], len, ids.n, st_j[0], mt, st_j[1], mt_best, st_j[2], mt_warm, pool.n_threads,
               same ? "true" : "false", tok_tool_huge_kb());
        fflush(stdout);
        k3_tok_ids_free(&ids);
        k3_tok_ids_free(&ids_mt);
        free(text);
    }
    k3_pool_free(&pool);
    k3_tok_free(tok);
    return 0;
}
