/* anthropic.h - the Anthropic Messages API (POST /v1/messages) on top of the OpenAI chat
 * frontend: a Messages body is validated, translated into the OpenAI chat shape and run
 * through k3_chat_req_from_json, so both APIs share ONE rendering path (the same
 * conversation gives the same prompt ids, and the same seeded output); the output parser's
 * result and deltas are written back as a Message and its SSE events.
 * research/frontend.md §6.
 *
 *   struct k3_anth_req r;  struct k3_api_err e;
 *   if (k3_anth_req_parse(body, len, &r, &e)) send e.status + k3_anth_err_json(&e)
 *   k3_anth_req_render(&r, &prompt, &e)         (errors name Anthropic paths)
 *   sample with r.chat (temperature, top_p, seed, max_tokens, stop) and r.top_k;
 *   parse with k3_chat_req_outp_cfg(&r.chat, &prompt, seed);
 *   non-streamed: k3_anth_message_json(msg_id, model, result, stop_sequence, &usage)
 *   streamed:     s = k3_anth_stream_new(msg_id, model); k3_anth_stream_begin(s, &usage, out);
 *                 per delta k3_anth_stream_feed(s, &d, out);
 *                 k3_anth_stream_end(s, result, stop_sequence, &usage, out); free
 *
 * Mapping choices (each tested in tests/frontend/test_anthropic.c):
 *   - system (string or text blocks) -> one system message first; an empty one is omitted.
 *   - user blocks: text -> text parts; each tool_result -> a `tool` message (tool_call_id =
 *     tool_use_id; content string or text blocks), in block order. is_error is accepted and
 *     not rendered: K3's tool messages have no error attribute, and inventing words would
 *     make the prompt differ from the same conversation sent as OpenAI. image / document and
 *     other block types are a 400 (no vision tower).
 *   - assistant blocks: text -> content; thinking -> reasoning_content (several joined with
 *     "\n"); tool_use -> tool_calls (arguments = input object); redacted_thinking is opaque
 *     and dropped. A final assistant message is a prefill: Moonshot's "partial": true.
 *   - consecutive turns of one role are kept as separate K3 messages (K3 has explicit
 *     message boundaries, so nothing needs merging).
 *   - tools {name, description, input_schema} -> {type:function, function:{name,
 *     description, parameters}}; server tools (a `type` other than "custom") are a 400.
 *   - tool_choice auto -> auto, none -> none, any -> "required" (the note K3 was trained
 *     with), tool{name} -> "required" too: K3 has no prompt form that names one tool, the
 *     "must call tools" note is the nearest, and the named tool is not forced (that needs
 *     constrained decoding). disable_parallel_tool_use is accepted and not enforced.
 *   - thinking {type:"enabled", budget_tokens >= 1024 and < max_tokens}, "adaptive" or
 *     "between_tools" -> thinking on; budget_tokens is validated but does not cap the
 *     reasoning (only max_tokens does); "disabled" or absent -> off (Anthropic's default
 *     is no extended thinking; the OpenAI path's default is on). output_config.effort ->
 *     the thinking effort (default max; K3 knows low / high / max, so medium -> high and
 *     xhigh -> max); output_config.format {type:"json_schema", schema} -> response_format
 *     json_schema (strict), i.e. K3's response-format note.
 *   - sampling: Kimi's fixed policy applies exactly as on the OpenAI path (temperature in
 *     [0, 1], top_p only 0.95; absent temperature -> 1.0 thinking / 0.6 instant, Kimi's
 *     recommendation rather than Anthropic's 1.0); top_k >= 0 passes through (0 = off);
 *     stop_sequences -> stop (at most 16 non-empty strings); "seed" (an extension) passes
 *     through for reproducible runs; metadata is validated and ignored; unknown top-level
 *     fields are ignored (SDKs add fields faster than servers learn them).
 *
 * Output choices:
 *   - content blocks in the order thinking, text, tool_use... (K3's channel order); empty
 *     reasoning or content gives no block.
 *   - thinking.signature is "" (K3's reasoning is not signed; the field is there because the
 *     SDK's ThinkingBlock has it): no signature_delta is sent. Signatures sent back are
 *     ignored; the thinking text is rendered as that turn's reasoning.
 *   - tool_use ids are "toolu_" + the 24 characters of the parser's minted id, so a seeded
 *     run gives the same ids through both APIs.
 *   - tool_use.input is the arguments parsed as a JSON object. The beginning of an object
 *     (a call cut by max_tokens) gives what partial-JSON readers such as the SDK's (jiter,
 *     partial mode) make of it: the members complete so far, a trailing number included,
 *     an unfinished string, literal or key left out. Anything else (a raw json block that
 *     is not an object) gives {}. The stream sends the arguments as the parser writes them
 *     (input_json_delta), except such a non-object, for which it sends "{}".
 *   - stop_reason: tool_use when calls were made, max_tokens on "length", stop_sequence
 *     (with stop_sequence set) when the server matched one, else end_turn.
 *   - the event stream equals the non-streamed message for any chunking as long as the
 *     model keeps its channel order (think, response, tools); a think channel reopened
 *     after the response (out of format) streams as a second thinking block, while the
 *     non-streamed message holds all reasoning in one block. */
#ifndef K3_FRONTEND_ANTHROPIC_H
#define K3_FRONTEND_ANTHROPIC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/out_parse.h"
#include "frontend/request.h"

struct k3_anth_req {
    struct k3_chat_req chat;  /* the request in the OpenAI shape, validated (render, sample,
                                 parse with this) */
    json_t *openai;           /* the translated body (owned) */
    json_t *where;            /* per translated message: its Anthropic path, for errors */
    const char *model;        /* points into chat.root */
    long long top_k;          /* 0: off */
    int tool_choice_named;    /* tool_choice {type:"tool"} (rendered as required) */
};

/* Validates and translates. On failure: -1, e->status 400 (413 is the server's, for a
 * body over its limit) and a message naming the Anthropic field. */
int k3_anth_req_parse(const char *body, size_t len, struct k3_anth_req *r,
                      struct k3_api_err *e);
int k3_anth_req_from_json(json_t *root, struct k3_anth_req *r, struct k3_api_err *e);
void k3_anth_req_free(struct k3_anth_req *r);

/* k3_chat_req_render with the encoder's complaints phrased in Anthropic paths. */
int k3_anth_req_render(const struct k3_anth_req *r, struct k3_chat_prompt *p,
                       struct k3_api_err *e);

/* The Anthropic error type for an HTTP status: 400 invalid_request_error, 401
 * authentication_error, 403 permission_error, 404 not_found_error, 413
 * request_too_large, 429 rate_limit_error, 529 (and 503) overloaded_error, else api_error. */
const char *k3_anth_err_type(int status);
/* The status to send: an overloaded server (503 on the OpenAI path) is 529 here. */
int k3_anth_status(int status);
/* {"type":"error","error":{"type":…,"message":…}}; malloc'ed. */
char *k3_anth_err_json(const struct k3_api_err *e);
char *k3_anth_err_json_msg(int status, const char *message);

struct k3_anth_usage {
    long long input_tokens;             /* prompt tokens (K3's count, stub excluded) */
    long long output_tokens;            /* generated tokens */
    long long cache_read_input_tokens;  /* prompt tokens served from the prefix cache */
};

#define K3_ANTH_ID_BYTES 32

/* "msg_" + 24 base-62 characters from seed (the server passes a random value). */
void k3_anth_msg_id(uint64_t seed, char id[K3_ANTH_ID_BYTES]);
/* "toolu_" + the 24 characters after the parser's "call_". */
void k3_anth_tool_id(const char *call_id, char id[K3_ANTH_ID_BYTES]);
const char *k3_anth_stop_reason(const struct k3_outp_result *res, const char *stop_sequence);
/* The tool_use input for an arguments string (see "Output choices"); a new reference. */
json_t *k3_anth_tool_input(const char *args, size_t len);

/* The non-streamed Message; malloc'ed JSON. stop_sequence: the matched stop string or NULL. */
char *k3_anth_message_json(const char *msg_id, const char *model,
                           const struct k3_outp_result *res, const char *stop_sequence,
                           const struct k3_anth_usage *usage);

/* The SSE writer: appends "event: T\ndata: {...}\n\n" records to out. */
struct k3_anth_stream;
struct k3_anth_stream *k3_anth_stream_new(const char *msg_id, const char *model);
void k3_anth_stream_free(struct k3_anth_stream *s);
/* message_start (usage.output_tokens is 0 there). */
void k3_anth_stream_begin(struct k3_anth_stream *s, const struct k3_anth_usage *usage,
                          struct k3_sbuf *out);
/* Blocks for one parser delta: starts, deltas and stops, indices contiguous from 0. */
void k3_anth_stream_feed(struct k3_anth_stream *s, const struct k3_outp_delta *d,
                         struct k3_sbuf *out);
/* Closes the open block, then message_delta (stop_reason, stop_sequence, usage) and
 * message_stop. Feed the parser's finishing delta first. */
void k3_anth_stream_end(struct k3_anth_stream *s, const struct k3_outp_result *res,
                        const char *stop_sequence, const struct k3_anth_usage *usage,
                        struct k3_sbuf *out);
/* Blocks started so far that reopened a channel (see "Output choices"; 0 in format). */
int k3_anth_stream_reopened(const struct k3_anth_stream *s);
/* `event: ping`. */
void k3_anth_sse_ping(struct k3_sbuf *out);
/* `event: error` with an Anthropic error object: how a failure after the headers is told. */
void k3_anth_sse_error(int status, const char *message, struct k3_sbuf *out);

#endif
