/* tok_conv.c - a conversation re-sent each turn, as a chat server tokenizes it: turn k's prompt
 * is messages 1..k, each framed as the K3 chat format frames a message (`<|open|>message
 * role="user"<|sep|>`, the text, `<|close|>message<|sep|><|end_of_msg|>`; user and assistant in
 * turn), encoded with specials recognised. The messages are
 * consecutive stretches of FILE of MSG_BYTES each (cut on a character boundary). Two tokenizers
 * of the same files take every turn in turn, on one thread: one keeps no chunks
 * (k3_tok_chunk_budget 0), the other the default budget, and their ids are compared.
 *
 *   tok_conv MODEL CONFIG FILE TURNS MSG_BYTES
 *
 * Prints a JSON line per turn (both times) and one with the totals and their ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "frontend/tokenizer.h"
#include "tok_tool.h"

/* Appends s[0..n) to the prompt *p (length *len, room *cap). */
static int append(char **p, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *q = realloc(*p, c);
        if (!q) return -1;
        *p = q;
        *cap = c;
    }
    memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = 0;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6 || atoi(argv[4]) < 1 || atol(argv[5]) < 1) {
        fprintf(stderr, "usage: tok_conv MODEL CONFIG FILE TURNS MSG_BYTES\n");
        return 2;
    }
    int turns = atoi(argv[4]);
    size_t msg = (size_t)atol(argv[5]), len;
    struct k3_tok *plain = tok_tool_load("tok_conv", argv[1], argv[2]);
    struct k3_tok *kept = tok_tool_load("tok_conv", argv[1], argv[2]);
    char *text = tok_tool_read("tok_conv", argv[3], &len);
    if (!plain || !kept || !text) return 1;
    k3_tok_chunk_budget(plain, 0);
    char *prompt = NULL;
    size_t n = 0, cap = 0, at = 0;
    double total[2] = {0, 0};
    for (int k = 0; k < turns; k++) {
        size_t end = at + msg < len ? at + msg : len;
        while (end < len && ((unsigned char)text[end] & 0xC0) == 0x80) end++; /* a character boundary */
        if (end <= at) {
            fprintf(stderr, "tok_conv: %s has text for %d turns of %zu bytes only\n", argv[3], k, msg);
            return 1;
        }
        const char *open = k % 2 ? "<|open|>message role=\"assistant\"<|sep|>" : "<|open|>message role=\"user\"<|sep|>";
        const char *close = "<|close|>message<|sep|><|end_of_msg|>";
        if (append(&prompt, &n, &cap, open, strlen(open)) || append(&prompt, &n, &cap, text + at, end - at) ||
            append(&prompt, &n, &cap, close, strlen(close))) {
            fprintf(stderr, "tok_conv: out of memory\n");
            return 1;
        }
        at = end;
        struct k3_tok_ids ids[2];
        double dt[2];
        for (int j = 0; j < 2; j++) {
            memset(&ids[j], 0, sizeof ids[j]);
            double t0 = k3_now_s();
            k3_tok_encode(j ? kept : plain, prompt, n, K3_TOK_SPECIAL, NULL, &ids[j]);
            dt[j] = k3_now_s() - t0;
            total[j] += dt[j];
        }
        if (ids[0].n != ids[1].n || memcmp(ids[0].ids, ids[1].ids, ids[0].n * sizeof(int32_t))) {
            fprintf(stderr, "tok_conv: turn %d: the ids with kept chunks differ\n", k + 1);
            return 1;
        }
        printf("{\"turn\": %d, \"prompt_bytes\": %zu, \"ids\": %zu, \"none_kept_ms\": %.3f, \"kept_ms\": %.3f}\n",
               k + 1, n, ids[0].n, dt[0] * 1e3, dt[1] * 1e3);
        k3_tok_ids_free(&ids[0]);
        k3_tok_ids_free(&ids[1]);
    }
    printf("{\"file\": \"%s\", \"turns\": %d, \"msg_bytes\": %zu, \"none_kept_ms\": %.3f, \"kept_ms\": %.3f, "
           "\"ratio\": %.4f}\n",
           argv[3], turns, msg, total[0] * 1e3, total[1] * 1e3, total[1] / total[0]);
    free(prompt);
    free(text);
    k3_tok_free(plain);
    k3_tok_free(kept);
    return 0;
}
