/* anthropic_out.c - the Message a K3 generation becomes, whole or as SSE events (see
 * anthropic.h for the choices).
 *
 * Both are written from the output parser's products: the result (non-streamed) and its
 * deltas (streamed). The stream writer is a small state machine over the open block: a
 * delta's reasoning, content and tool pieces, in that order (K3's channel order), close the
 * open block when they belong to another one and open the next index. JSON is written by
 * hand with the Python-exact string writer, as the OpenAI replies are: jansson refuses
 * strings that are not UTF-8, and a reply must never fail. A delta's text can end inside a
 * UTF-8 character (the parser takes bytes in any chunking); each event's JSON must be
 * UTF-8 on its own, so an incomplete trailing character is held for the block's next piece. */
#include "frontend/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "frontend/json_py.h"

static void jstr(struct k3_sbuf *b, const char *s, size_t n) { k3_json_py_string(s, n, b); }
static void jstrs(struct k3_sbuf *b, const char *s) { k3_json_py_string(s, strlen(s), b); }

/* ---- ids, stop reason, tool input ---------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void k3_anth_msg_id(uint64_t seed, char id[K3_ANTH_ID_BYTES])
{
    static const char b62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    uint64_t a = splitmix64(&seed), b = splitmix64(&seed);
    memcpy(id, "msg_", 4);
    for (int i = 0; i < 24; i++) {
        uint64_t *w = i < 12 ? &a : &b;
        id[4 + i] = b62[*w % 62];
        *w /= 62;
    }
    id[28] = 0;
}

void k3_anth_tool_id(const char *call_id, char id[K3_ANTH_ID_BYTES])
{
    const char *tail = strncmp(call_id, "call_", 5) ? call_id : call_id + 5;
    snprintf(id, K3_ANTH_ID_BYTES, "toolu_%s", tail);
}

const char *k3_anth_stop_reason(const struct k3_outp_result *res, const char *stop_sequence)
{
    const char *f = res->finish_reason ? res->finish_reason : "stop";
    if (!strcmp(f, "length")) return "max_tokens";
    if (res->n_calls) return "tool_use";  /* the client has calls to answer */
    return stop_sequence ? "stop_sequence" : "end_turn";
}

/* The longest prefix of s that closes into JSON: after an opening bracket or a complete
 * value inside a container, cut, then close what is open. The open containers at the cut
 * are the bottom of the final stack: a container that closed after the cut was a complete
 * value, which moves the cut. */
static json_t *prefix_object(const char *s, size_t n)
{
    struct k3_sbuf stack = {0};  /* '{' or '[' per open container */
    size_t cut = 0, cut_depth = 0;
    int in_str = 0, esc = 0, scalar = 0, key = 0;  /* key: the string being read is a key */
    int expect_key = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') {
                in_str = 0;
                if (!key && stack.n) cut = i + 1, cut_depth = stack.n;
            }
            continue;
        }
        int delim = c == ',' || c == '}' || c == ']' || c == ':' || c == ' ' || c == '\n' ||
                    c == '\t' || c == '\r' || c == '"' || c == '{' || c == '[';
        if (scalar && delim) {  /* a number or literal ended: a complete value */
            scalar = 0;
            if (stack.n) cut = i, cut_depth = stack.n;
        }
        if (c == '{' || c == '[') {
            k3_sbuf_addc(&stack, c);
            expect_key = c == '{';
            cut = i + 1, cut_depth = stack.n;
        } else if (c == '}' || c == ']') {
            if (!stack.n) break;
            stack.n--;
            expect_key = 0;
            if (!stack.n) {  /* the top-level value is complete */
                cut = i + 1, cut_depth = 0;
                break;
            }
            cut = i + 1, cut_depth = stack.n;
        } else if (c == ',') {
            expect_key = stack.n && stack.p[stack.n - 1] == '{';
        } else if (c == ':') {
            expect_key = 0;
        } else if (c == '"') {
            in_str = 1;
            key = expect_key;
            expect_key = 0;
        } else if (!delim) {
            scalar = 1;
        }
    }
    json_t *v = NULL;
    if (cut && stack.n >= cut_depth && stack.p && stack.p[0] == '{') {
        struct k3_sbuf t = {0};
        k3_sbuf_add(&t, s, cut);
        for (size_t d = cut_depth; d > 0; d--) k3_sbuf_addc(&t, stack.p[d - 1] == '{' ? '}' : ']');
        v = json_loadb(t.p, t.n, JSON_ALLOW_NUL, NULL);
        k3_sbuf_free(&t);
    }
    k3_sbuf_free(&stack);
    if (!json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

json_t *k3_anth_tool_input(const char *args, size_t len)
{
    json_t *v = json_loadb(args ? args : "", len, JSON_ALLOW_NUL, NULL);
    if (json_is_object(v)) return v;
    json_decref(v);
    v = prefix_object(args ? args : "", len);
    return v ? v : json_object();
}

/* ---- the whole message -------------------------------------------------------------- */

static void usage_json(struct k3_sbuf *b, const struct k3_anth_usage *u, long long output_tokens)
{
    k3_sbuf_addf(b, "{\"input_tokens\":%lld,\"cache_creation_input_tokens\":0,"
                    "\"cache_read_input_tokens\":%lld,\"output_tokens\":%lld}",
                 u->input_tokens, u->cache_read_input_tokens, output_tokens);
}

static void tool_block(struct k3_sbuf *b, const char *call_id, const char *name, const json_t *input)
{
    char id[K3_ANTH_ID_BYTES];
    k3_anth_tool_id(call_id, id);
    k3_sbuf_adds(b, "{\"type\":\"tool_use\",\"id\":");
    jstrs(b, id);
    k3_sbuf_adds(b, ",\"name\":");
    jstrs(b, name);
    k3_sbuf_adds(b, ",\"input\":");
    if (input) k3_json_py_dump(input, K3_JSON_PY_COMPACT, b);
    else k3_sbuf_adds(b, "{}");
    k3_sbuf_addc(b, '}');
}

/* {"id":…,"type":"message","role":"assistant","model":…,"content":[ — shared by both forms */
static void message_head(struct k3_sbuf *b, const char *msg_id, const char *model)
{
    k3_sbuf_adds(b, "{\"id\":");
    jstrs(b, msg_id);
    k3_sbuf_adds(b, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    jstrs(b, model);
    k3_sbuf_adds(b, ",\"content\":[");
}

static void stop_fields(struct k3_sbuf *b, const char *reason, const char *stop_sequence)
{
    k3_sbuf_adds(b, "\"stop_reason\":");
    if (reason) jstrs(b, reason);
    else k3_sbuf_adds(b, "null");
    k3_sbuf_adds(b, ",\"stop_sequence\":");
    if (reason && !strcmp(reason, "stop_sequence") && stop_sequence) jstrs(b, stop_sequence);
    else k3_sbuf_adds(b, "null");
}

char *k3_anth_message_json(const char *msg_id, const char *model,
                           const struct k3_outp_result *res, const char *stop_sequence,
                           const struct k3_anth_usage *usage)
{
    struct k3_sbuf b = {0};
    int n = 0;
    message_head(&b, msg_id, model);
    if (res->reasoning.n) {
        k3_sbuf_adds(&b, "{\"type\":\"thinking\",\"thinking\":");
        jstr(&b, res->reasoning.p, res->reasoning.n);
        k3_sbuf_adds(&b, ",\"signature\":\"\"}");
        n++;
    }
    if (res->content.n) {
        k3_sbuf_adds(&b, n++ ? ",{\"type\":\"text\",\"text\":" : "{\"type\":\"text\",\"text\":");
        jstr(&b, res->content.p, res->content.n);
        k3_sbuf_addc(&b, '}');
    }
    for (size_t i = 0; i < res->n_calls; i++) {
        const struct k3_outp_call *c = &res->calls[i];
        json_t *input = k3_anth_tool_input(c->args.p, c->args.n);
        if (n++) k3_sbuf_addc(&b, ',');
        tool_block(&b, c->id, c->name, input);
        json_decref(input);
    }
    k3_sbuf_adds(&b, "],");
    stop_fields(&b, k3_anth_stop_reason(res, stop_sequence), stop_sequence);
    k3_sbuf_adds(&b, ",\"usage\":");
    usage_json(&b, usage, usage->output_tokens);
    k3_sbuf_addc(&b, '}');
    return k3_sbuf_take(&b);
}

/* ---- the event stream ----------------------------------------------------------------- */

enum block { B_NONE, B_THINK, B_TEXT, B_TOOL };

struct k3_anth_stream {
    char msg_id[K3_ANTH_ID_BYTES];
    char *model;
    int next_index;     /* the index the next block gets */
    enum block open;    /* the block being written (index next_index - 1) */
    int open_call;      /* the parser's call index of an open tool_use block */
    int think_seen, text_seen, reopened;
    int ended;
    struct k3_sbuf hold;  /* the open block's incomplete trailing UTF-8 character */
};

static void event_begin(struct k3_sbuf *out, const char *type)
{
    k3_sbuf_adds(out, "event: ");
    k3_sbuf_adds(out, type);
    k3_sbuf_adds(out, "\ndata: {\"type\":\"");
    k3_sbuf_adds(out, type);
    k3_sbuf_addc(out, '"');
}

static void event_end(struct k3_sbuf *out) { k3_sbuf_adds(out, "}\n\n"); }

struct k3_anth_stream *k3_anth_stream_new(const char *msg_id, const char *model)
{
    struct k3_anth_stream *s = calloc(1, sizeof *s);
    if (!s) K3_FATAL("out of memory: Anthropic stream");
    snprintf(s->msg_id, sizeof s->msg_id, "%s", msg_id);
    s->model = strdup(model);
    if (!s->model) K3_FATAL("out of memory: Anthropic stream");
    s->open_call = -1;
    return s;
}

void k3_anth_stream_free(struct k3_anth_stream *s)
{
    if (!s) return;
    k3_sbuf_free(&s->hold);
    free(s->model);
    free(s);
}

void k3_anth_stream_begin(struct k3_anth_stream *s, const struct k3_anth_usage *usage,
                          struct k3_sbuf *out)
{
    event_begin(out, "message_start");
    k3_sbuf_adds(out, ",\"message\":");
    message_head(out, s->msg_id, s->model);
    k3_sbuf_adds(out, "],");
    stop_fields(out, NULL, NULL);
    k3_sbuf_adds(out, ",\"usage\":");
    usage_json(out, usage, 0);
    k3_sbuf_addc(out, '}');
    event_end(out);
}

static void delta_event(struct k3_anth_stream *s, const char *p, size_t n, struct k3_sbuf *out);

static void block_stop(struct k3_anth_stream *s, struct k3_sbuf *out)
{
    if (s->open == B_NONE) return;
    if (s->hold.n) delta_event(s, s->hold.p, s->hold.n, out);  /* a character never completed */
    k3_sbuf_clear(&s->hold);
    event_begin(out, "content_block_stop");
    k3_sbuf_addf(out, ",\"index\":%d", s->next_index - 1);
    event_end(out);
    s->open = B_NONE;
    s->open_call = -1;
}

/* Closes the open block and starts one of kind b; the caller writes its content_block. */
static void block_start(struct k3_anth_stream *s, enum block b, struct k3_sbuf *out)
{
    block_stop(s, out);
    event_begin(out, "content_block_start");
    k3_sbuf_addf(out, ",\"index\":%d,\"content_block\":", s->next_index++);
    s->open = b;
}

static const char *delta_field(enum block b)
{
    return b == B_THINK ? "thinking" : b == B_TEXT ? "text" : "partial_json";
}

static void delta_event(struct k3_anth_stream *s, const char *p, size_t n, struct k3_sbuf *out)
{
    static const char *const type[] = {"", "thinking_delta", "text_delta", "input_json_delta"};
    event_begin(out, "content_block_delta");
    k3_sbuf_addf(out, ",\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":", s->next_index - 1,
                 type[s->open], delta_field(s->open));
    jstr(out, p, n);
    k3_sbuf_addc(out, '}');
    event_end(out);
}

/* Bytes of s[0..n) up to its last complete UTF-8 character (an invalid tail is not held:
 * it could never complete). */
static size_t utf8_complete(const char *s, size_t n)
{
    size_t i = n, k = 0;
    while (i > 0 && k < 3 && ((unsigned char)s[i - 1] & 0xc0) == 0x80) i--, k++;
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = lead >= 0xf8 ? 0 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 0;
    return want && n - (i - 1) < want ? i - 1 : n;
}

/* A piece of the open block, sent up to its last complete character. */
static void delta(struct k3_anth_stream *s, const char *p, size_t n, struct k3_sbuf *out)
{
    k3_sbuf_add(&s->hold, p, n);
    size_t m = utf8_complete(s->hold.p, s->hold.n);
    if (!m) return;
    delta_event(s, s->hold.p, m, out);
    memmove(s->hold.p, s->hold.p + m, s->hold.n - m);
    s->hold.n -= m;
}

void k3_anth_stream_feed(struct k3_anth_stream *s, const struct k3_outp_delta *d,
                         struct k3_sbuf *out)
{
    if (s->ended) return;
    if (d->reasoning.n) {
        if (s->open != B_THINK) {
            if (s->think_seen || s->text_seen) s->reopened++;
            block_start(s, B_THINK, out);
            k3_sbuf_adds(out, "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}");
            event_end(out);
            s->think_seen = 1;
        }
        delta(s, d->reasoning.p, d->reasoning.n, out);
    }
    if (d->content.n) {
        if (s->open != B_TEXT) {
            if (s->text_seen) s->reopened++;
            block_start(s, B_TEXT, out);
            k3_sbuf_adds(out, "{\"type\":\"text\",\"text\":\"\"}");
            event_end(out);
            s->text_seen = 1;
        }
        delta(s, d->content.p, d->content.n, out);
    }
    for (size_t i = 0; i < d->n_tools; i++) {
        const struct k3_outp_tool_delta *t = &d->tools[i];
        if (t->first) {
            block_start(s, B_TOOL, out);
            tool_block(out, t->id, t->name ? t->name : "", NULL);
            event_end(out);
            s->open_call = t->index;
        }
        /* the parser finishes a call before it starts the next, so pieces of another call
         * than the open one do not occur; they would be dropped rather than misfiled */
        if (t->args.n && s->open == B_TOOL && s->open_call == t->index)
            delta(s, t->args.p, t->args.n, out);
    }
}

void k3_anth_stream_end(struct k3_anth_stream *s, const struct k3_outp_result *res,
                        const char *stop_sequence, const struct k3_anth_usage *usage,
                        struct k3_sbuf *out)
{
    if (s->ended) return;
    block_stop(s, out);
    event_begin(out, "message_delta");
    k3_sbuf_adds(out, ",\"delta\":{");
    stop_fields(out, k3_anth_stop_reason(res, stop_sequence), stop_sequence);
    k3_sbuf_adds(out, "},\"usage\":");
    usage_json(out, usage, usage->output_tokens);
    event_end(out);
    event_begin(out, "message_stop");
    event_end(out);
    s->ended = 1;
}

int k3_anth_stream_reopened(const struct k3_anth_stream *s) { return s->reopened; }

void k3_anth_sse_ping(struct k3_sbuf *out)
{
    event_begin(out, "ping");
    event_end(out);
}

void k3_anth_sse_error(int status, const char *message, struct k3_sbuf *out)
{
    char *j = k3_anth_err_json_msg(status, message);
    k3_sbuf_adds(out, "event: error\ndata: ");
    k3_sbuf_adds(out, j);
    k3_sbuf_adds(out, "\n\n");
    free(j);
}
