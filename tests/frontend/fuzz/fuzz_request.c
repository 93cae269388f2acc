/* fuzz_request.c - libFuzzer target for request validation and rendering: any byte string
 * as a chat-completions body must give either a 400 with a well-formed error object or a
 * rendered, tokenized prompt; never a crash, leak or hang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/request.h"

static struct k3_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct k3_err err;
    if (k3_tok_load_files(&tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "fuzz_request: %s\n", err.msg);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct k3_chat_req req;
    struct k3_api_err e;
    if (k3_chat_req_parse((const char *)data, size, &req, &e)) {
        if (e.status != 400) __builtin_trap();
        free(k3_api_err_json(&e));
        return 0;
    }
    struct k3_chat_prompt p;
    if (k3_chat_req_render(&req, &p, &e) == 0) {
        /* tokenizing is most of the time and is fuzzed on its own (tests/tokenizer): one
         * input in eight goes through it here */
        if (size % 8 == 0) {
            struct k3_tok_ids ids = {0};
            size_t n_prompt = k3_chat_prompt_encode(tok, &p, &ids);
            if (n_prompt + 3 != ids.n) __builtin_trap();  /* the stub is 3 ids */
            k3_tok_ids_free(&ids);
        }
        k3_chat_prompt_free(&p);
    } else {
        if (e.status != 400) __builtin_trap();
        free(k3_api_err_json(&e));
    }
    k3_chat_req_free(&req);
    return 0;
}
