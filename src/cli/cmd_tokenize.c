/* cmd_tokenize.c - `k3 tokenize`: text -> ids (a JSON array), or ids -> text (--decode).
 *
 *   k3 tokenize --tokenizer DIR --text "Hello"            [19180]
 *   k3 tokenize --model CKPT --file prompt.txt --special  special-token text -> control ids
 *   echo '[19180, 6949]' | k3 tokenize --tokenizer DIR --decode
 * Input: --text, --file F ('-' = stdin), or standard input when neither is given. Without
 * --special, text such as <|open|> is plain text (how user and tool text is encoded).
 * --json wraps the output: {"n_tokens": N, "ids": [...]} or {"text": "..."}. --decode
 * prints invalid UTF-8 as U+FFFD, as the streaming detokenizer does. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "frontend/tokenizer.h"
#include "kernels/cpu/pool.h"

static char *slurp(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    if (!buf || ferror(f)) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Ids from "[1, 2, 3]" (or just "1 2 3"); -1 on anything else. */
static int parse_ids(const char *s, struct k3_tok_ids *ids, const char **bad)
{
    while (isspace((unsigned char)*s)) s++;
    int bracket = *s == '[';
    if (bracket) s++;
    for (;;) {
        while (isspace((unsigned char)*s) || *s == ',') s++;
        if (!*s || (bracket && *s == ']')) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            *bad = s;
            return -1;
        }
        if (ids->n == ids->cap) {
            ids->cap = ids->cap ? ids->cap * 2 : 256;
            ids->ids = realloc(ids->ids, ids->cap * sizeof(int32_t));
            if (!ids->ids) return -1;
        }
        ids->ids[ids->n++] = (int32_t)v;
        s = end;
    }
    if (bracket && *s != ']') {
        *bad = s;
        return -1;
    }
    return 0;
}

static void json_string_out(const char *s, size_t n, FILE *f)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static int decode(const struct k3_tok *tok, const char *input, int json)
{
    struct k3_tok_ids ids = {0};
    const char *bad = NULL;
    if (parse_ids(input, &ids, &bad)) {
        fprintf(stderr, "k3 tokenize: --decode expects a JSON array of token ids; bad input at "
                        "'%.20s'\n", bad ? bad : "");
        k3_tok_ids_free(&ids);
        return K3_EXIT_FAIL;
    }
    /* Through the streaming detokenizer: the text it would stream, U+FFFD for bad bytes. */
    size_t cap = ids.n * 8 + 64, n = 0;
    char *text = malloc(cap + K3_DETOK_MAX_OUT), piece[K3_DETOK_MAX_OUT];
    struct k3_detok d;
    k3_detok_init(&d, tok);
    int rc = K3_EXIT_OK;
    for (size_t i = 0; i < ids.n && text; i++) {
        int w = k3_detok_push(&d, ids.ids[i], piece);
        if (w < 0) {
            fprintf(stderr, "k3 tokenize: token id %d (position %zu) is out of range 0..%d\n",
                    ids.ids[i], i, k3_tok_n_vocab(tok) - 1);
            rc = K3_EXIT_FAIL;
            break;
        }
        if (n + (size_t)w + 8 > cap) {
            char *nt = realloc(text, (cap = cap * 2 + (size_t)w) + K3_DETOK_MAX_OUT);
            if (!nt) free(text);
            text = nt;
        }
        if (text) memcpy(text + n, piece, (size_t)w), n += (size_t)w;
    }
    if (!text) {
        fprintf(stderr, "k3 tokenize: out of memory\n");
        rc = K3_EXIT_FAIL;
    }
    if (rc == K3_EXIT_OK) {
        n += (size_t)k3_detok_flush(&d, text + n);
        if (json) {
            fputs("{\"text\": ", stdout);
            json_string_out(text, n, stdout);
            fputs("}\n", stdout);
        } else {
            fwrite(text, 1, n, stdout);
        }
    }
    free(text);
    k3_tok_ids_free(&ids);
    return rc;
}

int k3_cmd_tokenize(struct k3_cli *cli)
{
    const struct k3_args *a = &cli->args;
    const char *dir = k3_arg(a, "tokenizer") ? k3_arg(a, "tokenizer") : k3_arg(a, "model");
    const char *text_arg = k3_arg(a, "text"), *file = k3_arg(a, "file");
    long long threads;
    if (!dir) {
        fprintf(stderr, "k3 tokenize: give --tokenizer DIR (with tiktoken.model and "
                        "tokenizer_config.json) or --model CHECKPOINT_DIR\n");
        return K3_EXIT_USAGE;
    }
    if (text_arg && file) {
        fprintf(stderr, "k3 tokenize: give --text or --file, not both\n");
        return K3_EXIT_USAGE;
    }
    if (k3_arg_int(a, "threads", 1, 0, 1024, &threads)) return K3_EXIT_USAGE;
    if (k3_arg_flag(a, "decode") && k3_arg_flag(a, "special")) {
        fprintf(stderr, "k3 tokenize: --special applies to encoding, not to --decode\n");
        return K3_EXIT_USAGE;
    }
    char *input = NULL;
    size_t len = 0;
    if (text_arg) {
        input = strdup(text_arg);
        len = strlen(text_arg);
    } else {
        FILE *f = !file || !strcmp(file, "-") ? stdin : fopen(file, "rb");
        if (!f) {
            fprintf(stderr, "k3 tokenize: cannot open %s: %s\n", file, strerror(errno));
            return K3_EXIT_USAGE;
        }
        input = slurp(f, &len);
        if (f != stdin) fclose(f);
        if (!input) {
            fprintf(stderr, "k3 tokenize: cannot read %s\n", file ? file : "standard input");
            return K3_EXIT_FAIL;
        }
    }
    struct k3_err err;
    struct k3_tok *tok;
    if (k3_tok_load(&tok, dir, &err)) {
        fprintf(stderr, "k3 tokenize: %s\n", err.msg);
        free(input);
        return K3_EXIT_FAIL;
    }
    int json = k3_arg_flag(a, "json"), rc = K3_EXIT_OK;
    if (k3_arg_flag(a, "decode")) {
        rc = decode(tok, input, json);
    } else {
        struct k3_pool pool;
        int use_pool = threads != 1 && k3_pool_init(&pool, (int)threads) == 0;
        struct k3_tok_ids ids = {0};
        k3_tok_encode(tok, input, len, k3_arg_flag(a, "special") ? K3_TOK_SPECIAL : K3_TOK_PLAIN,
                      use_pool ? &pool : NULL, &ids);
        if (use_pool) k3_pool_free(&pool);
        if (json) printf("{\"n_tokens\": %zu, \"ids\": ", ids.n);
        putchar('[');
        for (size_t i = 0; i < ids.n; i++) printf(i ? ", %d" : "%d", ids.ids[i]);
        fputs(json ? "]}\n" : "]\n", stdout);
        k3_tok_ids_free(&ids);
    }
    k3_tok_free(tok);
    free(input);
    if (fflush(stdout)) return K3_EXIT_FAIL;
    return rc;
}
