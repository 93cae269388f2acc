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

/* A scan of tool arguments as the beginning of a JSON object, as partial-JSON readers
 * (the SDK's jiter in partial mode) read it: ok says whether s[0..n) is a well-formed
 * object so far; cut/depth is where it can be closed (after an opening bracket, or after a
 * complete value: a closed string, a delimited scalar, a closed container, or a number or
 * whole literal that ends the text); an incomplete string, literal or key is left out. The containers
 * open at the cut are the bottom of the final stack: one that closed after the cut was a
 * complete value, which moved the cut. */
struct scan {
    int ok;
    size_t cut, depth;
    struct k3_sbuf stack;  /* '{' or '[' per open container */
};

enum expect { E_VALUE, E_KEY_OR_END, E_KEY, E_COLON, E_AFTER, E_VALUE_OR_END, E_NOTHING };

static int scalar_ok(const char *t, size_t n, int complete)
{
    static const char *const lit[] = {"true", "false", "null"};
    if (t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
        for (size_t i = 0; i < n; i++)
            if (!t[i] || !strchr("0123456789.eE+-", t[i])) return 0;
        return 1;  /* jansson judges the digits when the cut text is read */
    }
    for (int k = 0; k < 3; k++)
        if (n <= strlen(lit[k]) && !memcmp(t, lit[k], n) && (!complete || n == strlen(lit[k])))
            return 1;
    return 0;
}

static void json_scan(const char *s, size_t n, struct scan *sc)
{
    enum expect ex = E_VALUE;
    int in_str = 0, esc = 0, key = 0;
    size_t tok = 0, tok_n = 0;  /* the scalar being read: s[tok..tok+tok_n) */
    memset(sc, 0, sizeof *sc);
    sc->ok = 1;
    for (size_t i = 0; i < n && sc->ok; i++) {
        char c = s[i];
        if (in_str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') {
                in_str = 0;
                ex = key ? E_COLON : E_AFTER;
                if (!key) sc->cut = i + 1, sc->depth = sc->stack.n;
            }
            continue;
        }
        if (tok_n) {
            if (c && !strchr(",}] \t\r\n", c)) { tok_n++; continue; }
            if (!scalar_ok(s + tok, tok_n, 1)) { sc->ok = 0; break; }
            tok_n = 0;
            ex = E_AFTER;
            sc->cut = i, sc->depth = sc->stack.n;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
        int top_obj = sc->stack.n && sc->stack.p[sc->stack.n - 1] == '{';
        switch (ex) {
        case E_NOTHING:
            sc->ok = 0;
            break;
        case E_COLON:
            sc->ok = c == ':';
            ex = E_VALUE;
            break;
        case E_KEY_OR_END: case E_KEY:
            if (c == '}' && ex == E_KEY_OR_END) goto close;
            sc->ok = c == '"';
            in_str = key = 1;
            break;
        case E_AFTER:
            if (c == ',') { ex = top_obj ? E_KEY : E_VALUE; break; }
            if (c == '}' || c == ']') goto close;
            sc->ok = 0;
            break;
        case E_VALUE: case E_VALUE_OR_END:
            if (c == ']' && ex == E_VALUE_OR_END) goto close;
            if (!sc->stack.n && c != '{') { sc->ok = 0; break; }  /* the top must be an object */
            if (c == '{' || c == '[') {
                k3_sbuf_addc(&sc->stack, c);
                ex = c == '{' ? E_KEY_OR_END : E_VALUE_OR_END;
                sc->cut = i + 1, sc->depth = sc->stack.n;
            } else if (c == '"') {
                in_str = 1, key = 0;
            } else if (c && strchr("-0123456789tfn", c)) {
                tok = i, tok_n = 1;
            } else {
                sc->ok = 0;
            }
            break;
        }
        continue;
    close:
        if (!sc->stack.n || (c == '}') != (sc->stack.p[sc->stack.n - 1] == '{')) {
            sc->ok = 0;
            continue;
        }
        sc->stack.n--;
        sc->cut = i + 1, sc->depth = sc->stack.n;
        ex = sc->stack.n ? E_AFTER : E_NOTHING;
    }
    if (sc->ok && tok_n) {  /* a number or literal that ends the text counts when whole */
        sc->ok = scalar_ok(s + tok, tok_n, 0);
        char last = s[tok + tok_n - 1];
        int number = s[tok] == '-' || (s[tok] >= '0' && s[tok] <= '9');
        if (sc->ok && (number ? last >= '0' && last <= '9' : scalar_ok(s + tok, tok_n, 1)))
            sc->cut = tok + tok_n, sc->depth = sc->stack.n;
    }
}

/* The object the scan closes into, or NULL. */
static json_t *scan_close(const char *s, const struct scan *sc)
{
    if (!sc->ok || !sc->cut) return NULL;
    struct k3_sbuf t = {0};
    k3_sbuf_add(&t, s, sc->cut);
    for (size_t d = sc->depth; d > 0; d--) k3_sbuf_addc(&t, sc->stack.p[d - 1] == '{' ? '}' : ']');
    json_t *v = json_loadb(t.p, t.n, JSON_ALLOW_NUL, NULL);
    k3_sbuf_free(&t);
    if (json_is_object(v)) return v;
    json_decref(v);
    return NULL;
}

json_t *k3_anth_tool_input(const char *args, size_t len)
{
    const char *s = args ? args : "";
    json_t *v = json_loadb(s, len, JSON_ALLOW_NUL, NULL);
    if (json_is_object(v)) return v;
    json_decref(v);
    struct scan sc;
    json_scan(s, len, &sc);
    v = scan_close(s, &sc);
    k3_sbuf_free(&sc.stack);
    return v ? v : json_object();
}

/* Whether arguments text could still become a JSON object (see json_scan). */
static int args_well_formed(const char *s, size_t n)
{
    struct scan sc;
    json_scan(s, n, &sc);
    k3_sbuf_free(&sc.stack);
    return sc.ok;
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
    int args_seen, args_junk;  /* the open tool_use block's arguments: begun; not JSON */
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
            s->args_seen = s->args_junk = 0;
        }
        /* the parser finishes a call before it starts the next, so pieces of another call
         * than the open one do not occur; they would be dropped rather than misfiled */
        if (!t->args.n || s->open != B_TOOL || s->open_call != t->index) continue;
        if (!s->args_seen++ && !args_well_formed(t->args.p, t->args.n)) {
            /* a raw json block that is not an object comes whole, as the call's only
             * arguments: send the input it stands for, which a partial-JSON reader can read */
            s->args_junk = 1;
            json_t *in = k3_anth_tool_input(t->args.p, t->args.n);
            struct k3_sbuf b = {0};
            k3_json_py_dump(in, 0, &b);
            delta(s, b.p, b.n, out);
            k3_sbuf_free(&b);
            json_decref(in);
        }
        if (!s->args_junk) delta(s, t->args.p, t->args.n, out);
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
