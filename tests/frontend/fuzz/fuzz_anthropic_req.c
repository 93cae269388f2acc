/* fuzz_anthropic_req.c - libFuzzer target for the Anthropic Messages request path: parse,
 * validate and translate the body, then render and tokenize what is accepted (the server's
 * path up to the scheduler). Besides "no crash, no leak, no hang": every refusal is a 400
 * whose Anthropic error object is valid JSON (so the message is valid UTF-8, even when cut
 * from a client's long string), and an accepted request's translation is a request the
 * OpenAI path accepts on its own. Input: the request body. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/anthropic.h"

static struct k3_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct k3_err err;
    if (k3_tok_load_files(&tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "fuzz_anthropic_req: %s\n", err.msg);
        abort();
    }
    return 0;
}

static void check_error(const struct k3_api_err *e)
{
    if (e->status != 400 || !e->message[0]) __builtin_trap();
    char *j = k3_anth_err_json(e);
    json_t *v = json_loads(j, 0, NULL);
    if (!json_is_object(v) || !json_is_string(json_object_get(json_object_get(v, "error"), "message")))
        __builtin_trap();
    json_decref(v);
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct k3_anth_req r;
    struct k3_api_err e;
    if (k3_anth_req_parse((const char *)data, size, &r, &e)) {
        check_error(&e);
        return 0;
    }
    struct k3_chat_req again;  /* the translation stands on its own */
    if (k3_chat_req_from_json(r.openai, &again, &e)) __builtin_trap();
    k3_chat_req_free(&again);
    struct k3_chat_prompt p;
    if (k3_anth_req_render(&r, &p, &e)) {
        check_error(&e);
    } else {
        struct k3_tok_ids ids = {0};
        size_t n = k3_chat_prompt_encode(tok, &p, &ids);
        if (n > ids.n) __builtin_trap();
        struct k3_outp_cfg cfg = k3_chat_req_outp_cfg(&r.chat, &p, 1);
        if (cfg.n_tool_names != r.chat.n_tool_names) __builtin_trap();
        k3_tok_ids_free(&ids);
        k3_chat_prompt_free(&p);
    }
    k3_anth_req_free(&r);
    return 0;
}
