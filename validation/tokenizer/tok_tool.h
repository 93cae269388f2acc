/* tok_tool.h - what the tokenizer's measuring programs share (tok_bench, tok_ab, tok_prof,
 * tok_reps, tok_pieces): the tokenizer loaded (tok_ab loads each build's own), the input file
 * read whole, both from the MODEL CONFIG FILE arguments most of them start with, and the
 * ordering of timings for qsort. Their clock is core/clock.h's k3_now_s. */
#ifndef K3_VALIDATION_TOK_TOOL_H
#define K3_VALIDATION_TOK_TOOL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "frontend/tokenizer.h"

/* The tokenizer of MODEL and CONFIG, or NULL after a message naming prog. */
static inline struct k3_tok *tok_tool_load(const char *prog, const char *model, const char *config)
{
    struct k3_err err;
    struct k3_tok *tok;
    if (k3_tok_load_files(&tok, model, config, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return NULL;
    }
    return tok;
}

/* The file at path, whole and NUL-terminated, its length in *len; NULL after a message
 * naming prog when it cannot be read. The caller frees it. */
static inline char *tok_tool_read(const char *prog, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s\n", prog, path);
        return NULL;
    }
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    char *text = n < 0 || fseek(f, 0, SEEK_SET) ? NULL : malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: cannot read %s\n", prog, path);
        free(text);
        fclose(f);
        return NULL;
    }
    fclose(f);
    text[n] = 0;
    *len = (size_t)n;
    return text;
}

/* The arguments MODEL CONFIG FILE that the tools start with (argv[1..3]): the tokenizer in
 * *tok and the file's text, its length in *len; NULL (and *tok NULL) after a message naming
 * prog. The caller frees both. */
static inline char *tok_tool_open(const char *prog, char **argv, struct k3_tok **tok, size_t *len)
{
    *tok = tok_tool_load(prog, argv[1], argv[2]);
    char *text = *tok ? tok_tool_read(prog, argv[3], len) : NULL;
    if (*tok && !text) {
        k3_tok_free(*tok);
        *tok = NULL;
    }
    return text;
}

/* A 64-bit hash of a piece's bytes (FNV-1a, the length folded in), never 0: the key of the
 * tools' tables of distinct pieces (tok_pieces, tok_first), whose empty slot is 0. */
static inline uint64_t tok_tool_piece_hash(const uint8_t *s, size_t n)
{
    uint64_t h = 0xCBF29CE484222325ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001B3ull;
    return h | 1;
}

/* qsort's order for doubles, ascending. */
static inline int tok_tool_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The process's anonymous memory on transparent huge pages, in kB (AnonHugePages of
 * /proc/self/smaps_rollup), or -1 where that is not there: whether the tokenizer's tables got
 * the 2 MiB pages they ask for (k3_tok_table_alloc), which a process cannot choose. */
static inline long tok_tool_huge_kb(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

#endif
