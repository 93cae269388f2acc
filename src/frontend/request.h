/* request.h - the OpenAI chat-completions request: validation with the Kimi Vendor Verifier's
 * rules (research/frontend.md §4.2, §5.1) and its mapping onto the K3 encoder's options.
 *
 *   struct k3_chat_req req;
 *   struct k3_api_err e;
 *   if (k3_chat_req_parse(body, len, &req, &e)) { send 400 with k3_api_err_json(&e); }
 *   struct k3_chat_prompt p; ...k3_chat_req_render(&req, &p, &e)...
 *   k3_chat_req_free(&req);
 *
 * Every malformed request yields status 400 and an OpenAI error object naming the parameter;
 * `stream` plays no part in validation, so a streamed request fails the same way (the server
 * answers before any SSE header). Kimi's fixed sampling policy is enforced: temperature in
 * [0, 1], top_p 0.95, presence and frequency penalty 0, n 1. */
#ifndef K3_FRONTEND_REQUEST_H
#define K3_FRONTEND_REQUEST_H

#include <jansson.h>
#include <stddef.h>

#include "frontend/chat_render.h"
#include "frontend/out_parse.h"

struct k3_api_err {
    int status;          /* HTTP status: 400 for every validation failure */
    char type[32];       /* "invalid_request_error" */
    char param[128];     /* the offending parameter, e.g. "messages[2].tools[0].function.name" */
    char message[768];
};

enum k3_rf_type { K3_RF_NONE, K3_RF_TEXT, K3_RF_JSON_OBJECT, K3_RF_JSON_SCHEMA };

struct k3_chat_req {
    json_t *root;                   /* the parsed body (owned) */
    json_t *messages;               /* owned: the messages with developer -> system */
    const json_t *tools;            /* request tools, or NULL */
    int thinking;                   /* thinking mode (default on) */
    const char *effort;             /* "low" | "high" | "max" (default max) */
    const char *tool_choice;        /* "auto" | "none" | "required", or NULL: absent or named */
    const char *tool_choice_name;   /* named-function tool_choice (accepted, not rendered) */
    const json_t *response_format;  /* NULL when absent */
    enum k3_rf_type rf_type;
    const json_t *response_schema;  /* json_schema.schema, or NULL */
    int partial;                    /* the last message is a partial assistant turn */
    int stream, include_usage;
    long long max_tokens;           /* max_completion_tokens or max_tokens; -1 if absent */
    double temperature, top_p;      /* the defaults when absent: 1.0 (thinking) / 0.6, 0.95 */
    int has_seed;
    long long seed;
    const json_t *stop;             /* NULL, a string or an array of strings */
    const char **tool_names;        /* every declared name: request tools + dynamic tools */
    size_t n_tool_names;
};

int k3_chat_req_parse(const char *body, size_t len, struct k3_chat_req *req,
                      struct k3_api_err *e);
/* The same for an already-parsed body (a new reference is taken). */
int k3_chat_req_from_json(json_t *root, struct k3_chat_req *req, struct k3_api_err *e);
void k3_chat_req_free(struct k3_chat_req *req);

/* The encoder options of a valid request (add_generation_prompt on). */
struct k3_chat_opts k3_chat_req_opts(const struct k3_chat_req *req);
/* Renders a valid request; what the encoder refuses becomes a 400 on "messages". */
int k3_chat_req_render(const struct k3_chat_req *req, struct k3_chat_prompt *p,
                       struct k3_api_err *e);

/* The output parser's configuration for a valid request and its rendered prompt: the
 * think channel is open when the prompt ends inside it (the stub <|open|>think<|sep|>, or a
 * partial turn's reasoning), tool_choice "none" drops calls,
 * only declared tools (request + dynamic) are accepted. The names point into req, which
 * must outlive the parser. id_seed: a fresh random value per request. */
struct k3_outp_cfg k3_chat_req_outp_cfg(const struct k3_chat_req *req,
                                        const struct k3_chat_prompt *prompt, uint64_t id_seed);

/* {"error":{"message":…,"type":…,"param":…,"code":null}}; malloc'ed. */
char *k3_api_err_json(const struct k3_api_err *e);

#endif
