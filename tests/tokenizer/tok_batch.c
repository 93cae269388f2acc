/* tok_batch.c - the C side of the Python checks in validation/tokenizer/: encodes many
 * texts in one process so the differential tests do not pay a process per case.
 *
 *   tok_batch TIKTOKEN_MODEL TOKENIZER_CONFIG MODE THREADS [again] < cases > ids
 *   tok_batch TIKTOKEN_MODEL TOKENIZER_CONFIG conv THREADS [CHUNK_BUDGET] < cases > ids
 * MODE: plain | special | ref (ref = the O(n^2) reference BPE, plain mode, one thread).
 * again: each text is encoded three times and the third call's ids are written (the first
 * leaves its chunks' hashes, the second keeps them, the third finds them: tok_chunks.c); the
 * number of chunks found goes to stderr as "chunks found N".
 * conv: every case has its own mode and thread use, all in one process, so later calls find
 * what earlier ones left in the kept memos and chunks (a server's calls, both modes): a flags
 * byte before each case, bit 0 special mode, bit 1 the pool, bit 2 k3_tok_forget first;
 * CHUNK_BUDGET sets k3_tok_chunk_budget. Stderr gets "chunks found N".
 * cases: repeated [u32 byte length][bytes]; ids: per case [u32 count][count x i32]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/tok_internal.h"
#include "kernels/cpu/pool.h"

static int read_all(void *p, size_t n)
{
    return fread(p, 1, n, stdin) == n;
}

/* Plain mode with the reference BPE (no cuts, no specials): for checking bpe.c. */
static void encode_ref(const struct k3_tok *t, const uint8_t *s, size_t n, struct k3_tok_ids *o)
{
    for (size_t p = 0; p < n;) {
        size_t e = k3_pretok_next(s, p, n);
        if (o->cap < o->n + (e - p)) {
            o->cap = (o->n + (e - p)) * 2;
            o->ids = realloc(o->ids, o->cap * sizeof(int32_t));
        }
        o->n += k3_bpe_piece_ref(t, s + p, e - p, o->ids + o->n);
        p = e;
    }
}

int main(int argc, char **argv)
{
    int conv = argc >= 4 && !strcmp(argv[3], "conv");
    if (argc != 5 && !(argc == 6 && (conv || !strcmp(argv[5], "again")))) {
        fprintf(stderr, "usage: tok_batch TIKTOKEN_MODEL TOKENIZER_CONFIG plain|special|ref "
                        "THREADS [again] < cases\n"
                        "       tok_batch TIKTOKEN_MODEL TOKENIZER_CONFIG conv THREADS "
                        "[CHUNK_BUDGET] < flagged cases\n");
        return 2;
    }
    int again = argc == 6 && !conv;
    struct k3_err err;
    struct k3_tok *tok;
    if (k3_tok_load_files(&tok, argv[1], argv[2], &err)) {
        fprintf(stderr, "tok_batch: %s\n", err.msg);
        return 1;
    }
    int ref = !strcmp(argv[3], "ref");
    enum k3_tok_mode mode = !strcmp(argv[3], "special") ? K3_TOK_SPECIAL : K3_TOK_PLAIN;
    int threads = atoi(argv[4]);
    struct k3_pool pool;
    if (threads > 1 && k3_pool_init(&pool, threads)) return 1;
    if (conv && argc == 6) k3_tok_chunk_budget(tok, (size_t)strtoull(argv[5], NULL, 10));
    uint32_t len;
    uint8_t flags = 0;
    char *buf = NULL;
    size_t cap = 0;
    while ((!conv || read_all(&flags, 1)) && read_all(&len, 4)) {
        if (len + 1 > cap) {
            cap = (size_t)len * 2 + 1;
            buf = realloc(buf, cap);
        }
        if (!read_all(buf, len)) return 1;
        struct k3_tok_ids ids = {0};
        for (int call = 0; again && !ref && call < 2; call++) {
            k3_tok_encode(tok, buf, len, mode, threads > 1 ? &pool : NULL, &ids);
            k3_tok_ids_free(&ids);
        }
        if (conv) {
            if (flags & 4) k3_tok_forget(tok);
            k3_tok_encode(tok, buf, len, (flags & 1) ? K3_TOK_SPECIAL : K3_TOK_PLAIN,
                          threads > 1 && (flags & 2) ? &pool : NULL, &ids);
        } else if (ref) {
            encode_ref(tok, (const uint8_t *)buf, len, &ids);
        } else {
            k3_tok_encode(tok, buf, len, mode, threads > 1 ? &pool : NULL, &ids);
        }
        uint32_t n = (uint32_t)ids.n;
        fwrite(&n, 4, 1, stdout);
        fwrite(ids.ids, 4, ids.n, stdout);
        k3_tok_ids_free(&ids);
    }
    free(buf);
    if (again || conv) {
        struct k3_tok_chunk_stats st;
        k3_tok_chunk_stats(tok, &st);
        fprintf(stderr, "chunks found %llu\n", (unsigned long long)st.found);
    }
    if (threads > 1) k3_pool_free(&pool);
    k3_tok_free(tok);
    return 0;
}
