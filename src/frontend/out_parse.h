/* out_parse.h - K3 output parsing: the generated text after the generation stub, split into
 * reasoning (think channel), content (response channel) and tool calls (tools channel),
 * incrementally for streaming and identically at the end.
 *
 *   struct k3_outp *p = k3_outp_new(&cfg);
 *   struct k3_outp_delta d = {0};
 *   for each detokenized piece: k3_outp_feed(p, text, len, &d); send d; k3_outp_delta_clear(&d);
 *   k3_outp_finish(p, K3_OUTP_STOP or K3_OUTP_LENGTH, &d); send d;
 *   const struct k3_outp_result *r = k3_outp_result(p);   (the non-streamed answer)
 *   k3_outp_free(p);
 *
 * The concatenation of every delta equals the result, whatever the chunking (one byte, one
 * token, markers split mid-marker, many markers per piece): the parser is a state machine
 * over the text that holds back only a suffix that could still become a marker.
 *
 * Output format (research/frontend.md §2.3, §3.1): after <|open|>think<|sep|> comes
 *   REASONING<|close|>think<|sep|><|open|>response<|sep|>CONTENT<|close|>response<|sep|>
 *   [<|open|>tools<|sep|><|open|>call tool="NAME" index="i"<|sep|>
 *      <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>...
 *    <|close|>call<|sep|>...<|close|>tools<|sep|>]<|close|>message<|sep|><|end_of_msg|>
 * Failure modes (research §3.5-§3.6) and what happens:
 *   - a missing closer is implied by the next structure (<|open|>response closes think,
 *     <|open|>call closes the previous call, <|close|>tools / message / <|end_of_msg|> /
 *     the end of a stopped stream close what is open);
 *   - calls inside an unclosed think block end the reasoning there and are parsed;
 *   - truncation by max_tokens: finish_reason "length"; a call cut short keeps what was
 *     streamed (its arguments are then incomplete JSON, which "length" tells the client);
 *   - a typed value that does not decode as its type is kept as a JSON string (counted in
 *     n_bad_values) rather than losing the call;
 *   - a call to a tool that was not declared, or with no name, is dropped with its markup
 *     (counted in n_dropped_calls); with drop_calls (tool_choice "none") every call is;
 *   - markup never reaches content or reasoning; stray text between channels is dropped.
 * Tool calls stream: the first delta of a call carries its id and name as soon as its
 * open tag is complete; a string argument's value streams as it arrives; other values
 * follow when their closer arrives (their JSON form needs the whole value).
 * Tool call ids are minted here ("call_" + 24 base-62 characters from id_seed), never taken
 * from the model: K3 prompts carry no ids, and positional ids collided in agent loops. */
#ifndef K3_FRONTEND_OUT_PARSE_H
#define K3_FRONTEND_OUT_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "frontend/fe_buf.h"
#include "frontend/tokenizer.h"

enum k3_outp_end {
    K3_OUTP_STOP = 0,    /* end of message, a stop id or a stop string */
    K3_OUTP_LENGTH = 1,  /* max_tokens or the context ran out */
};

struct k3_outp_cfg {
    int thinking;                   /* the prompt ended inside the think channel */
    int drop_calls;                 /* tool_choice "none": no calls, no markup */
    const char *const *tool_names;  /* declared tools; NULL accepts any name */
    size_t n_tool_names;
    uint64_t id_seed;               /* the server passes a random seed per request */
};

#define K3_OUTP_ID_BYTES 32

/* One streamed piece of one tool call. The first piece of a call carries its id and name;
 * args is a fragment of the `arguments` string (possibly empty). */
struct k3_outp_tool_delta {
    int index;  /* 0-based, contiguous over the response's calls */
    int first;
    char id[K3_OUTP_ID_BYTES];
    char *name;
    struct k3_sbuf args;
};

struct k3_outp_delta {
    struct k3_sbuf reasoning, content;
    struct k3_outp_tool_delta *tools;
    size_t n_tools, cap_tools;
};

struct k3_outp_call {
    char id[K3_OUTP_ID_BYTES];
    char *name;
    struct k3_sbuf args;  /* the OpenAI `arguments` string: JSON with Python's separators */
    int complete;         /* its close marker (or an implied one) arrived */
};

struct k3_outp_result {
    struct k3_sbuf reasoning, content;
    struct k3_outp_call *calls;
    size_t n_calls, cap_calls;
    const char *finish_reason;  /* NULL until k3_outp_finish: "stop", "length", "tool_calls" */
    size_t n_dropped_calls, n_bad_values;
};

struct k3_outp;

struct k3_outp *k3_outp_new(const struct k3_outp_cfg *cfg);
void k3_outp_free(struct k3_outp *p);

/* Feeds generated text (UTF-8, any chunking); appends what it completes to d. */
void k3_outp_feed(struct k3_outp *p, const char *text, size_t len, struct k3_outp_delta *d);
/* Feeds generated ids through a streaming detokenizer. The server's path: a marker is
 * recognised by its special id only, so marker-like text spelled with ordinary tokens stays
 * text (the text path cannot tell them apart). Returns -1 for an id out of range (the ids
 * before it are fed), else 0. At the end, feed what k3_detok_flush returns (k3_outp_feed)
 * before k3_outp_finish. Mixing with k3_outp_feed flushes held-back text as text. */
int k3_outp_feed_ids(struct k3_outp *p, struct k3_detok *dt, const int32_t *ids, size_t n,
                     struct k3_outp_delta *d);
/* Ends the stream; appends the last pieces to d and fixes finish_reason. Feeding after
 * this is ignored. */
void k3_outp_finish(struct k3_outp *p, enum k3_outp_end why, struct k3_outp_delta *d);
const struct k3_outp_result *k3_outp_result(const struct k3_outp *p);

void k3_outp_delta_clear(struct k3_outp_delta *d);
void k3_outp_delta_free(struct k3_outp_delta *d);

#endif
