/* cmd_render.c - `k3 render`: a chat-completions request (JSON) -> the K3 prompt, its token
 * ids and usage.prompt_tokens, or the 400 error the server would answer with.
 *
 *   k3 render --tokenizer DIR --request req.json          prompt, then ids and prompt_tokens
 *   k3 render --model CKPT --input - --json < req.json    {"prompt":…, "ids":[…], "prompt_tokens":N}
 *
 * The request goes through the same validation, mapping and rendering as the server
 * (frontend/request.h), so this is the tool for "why does my prompt look like that".
 * An invalid request prints the OpenAI error object on stdout and exits 1. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "frontend/request.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    struct k3_sbuf b = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) k3_sbuf_add(&b, chunk, got);
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        k3_sbuf_free(&b);
        return NULL;
    }
    *len = b.n;
    return k3_sbuf_take(&b);
}

int k3_cmd_render(struct k3_cli *cli)
{
    const struct k3_args *a = &cli->args;
    const char *dir = k3_arg(a, "tokenizer") ? k3_arg(a, "tokenizer") : k3_arg(a, "model");
    const char *path = k3_arg(a, "request") ? k3_arg(a, "request") : k3_arg(a, "input");
    int as_json = k3_arg_flag(a, "json");
    if (!dir || !path) {
        fprintf(stderr, "k3 render: give --tokenizer DIR (or --model CHECKPOINT_DIR) and "
                        "--request FILE ('-' = standard input)\n");
        return K3_EXIT_USAGE;
    }
    size_t len = 0;
    char *body = slurp(path, &len);
    if (!body) {
        fprintf(stderr, "k3 render: cannot read the request from '%s'\n", path);
        return K3_EXIT_FAIL;
    }
    struct k3_err err;
    struct k3_tok *tok = NULL;
    if (k3_tok_load(&tok, dir, &err)) {
        fprintf(stderr, "k3 render: %s\n", err.msg);
        free(body);
        return K3_EXIT_FAIL;
    }
    int rc = K3_EXIT_FAIL;
    struct k3_chat_req req;
    struct k3_api_err e;
    struct k3_chat_prompt p = {0};
    struct k3_tok_ids ids = {0};
    if (k3_chat_req_parse(body, len, &req, &e) == 0) {
        if (k3_chat_req_render(&req, &p, &e) == 0) rc = K3_EXIT_OK;
        k3_chat_req_free(&req);
    }
    if (rc != K3_EXIT_OK) {
        char *ej = k3_api_err_json(&e);
        printf("%s\n", ej);
        fprintf(stderr, "k3 render: the server would answer %d: %s%s%s\n", e.status,
                e.param[0] ? e.param : "", e.param[0] ? ": " : "", e.message);
        free(ej);
        goto out;
    }
    size_t n_prompt = k3_chat_prompt_encode(tok, &p, &ids);
    if (as_json) {
        json_t *o = json_object();
        json_object_set_new(o, "prompt", json_stringn(p.text.p, p.text.n));
        json_t *arr = json_array();
        for (size_t i = 0; i < ids.n; i++) json_array_append_new(arr, json_integer(ids.ids[i]));
        json_object_set_new(o, "ids", arr);
        json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)n_prompt));
        char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        printf("%s\n", s ? s : "null");
        free(s);
        json_decref(o);
    } else {
        fwrite(p.text.p, 1, p.text.n, stdout);
        printf("\n\nids (%zu):", ids.n);
        for (size_t i = 0; i < ids.n; i++) printf("%s%d", i ? ", " : " [", ids.ids[i]);
        printf("]\nprompt_tokens: %zu (ids minus the %zu-id generation stub)\n", n_prompt,
               ids.n - n_prompt);
    }
out:
    k3_tok_ids_free(&ids);
    k3_chat_prompt_free(&p);
    k3_tok_free(tok);
    free(body);
    return rc;
}
