/* tok_reps.c - encodes a file REPS times on one thread, each call on new text (the kept memos
 * and chunks emptied first), and prints each call's id count and a hash of its ids: a fixed
 * amount of work for instruction counts, where timing is not what is measured (callgrind;
 * aarch64_count.sh under qemu, whose REPS 0 run counts the loading alone).
 *
 *   tok_reps MODEL CONFIG FILE REPS */
#include <stdint.h>

#include "tok_tool.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: tok_reps MODEL CONFIG FILE REPS\n");
        return 2;
    }
    struct k3_tok *tok;
    size_t len;
    char *text = tok_tool_open("tok_reps", argv, &tok, &len);
    if (!text) return 1;
    for (int r = 0; r < atoi(argv[4]); r++) {
        struct k3_tok_ids ids = {0};
        k3_tok_forget(tok);
        k3_tok_encode(tok, text, len, K3_TOK_PLAIN, NULL, &ids);
        uint64_t h = 0;
        for (size_t i = 0; i < ids.n; i++) h = h * 1000003u + (uint32_t)ids.ids[i];
        printf("%zu %016llx\n", ids.n, (unsigned long long)h);
        k3_tok_ids_free(&ids);
    }
    free(text);
    k3_tok_free(tok);
    return 0;
}
