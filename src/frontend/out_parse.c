/* out_parse.c - the K3 output parser (see out_parse.h).
 *
 * Two layers. The lexer turns text into TEXT runs and the four markers, holding back a
 * suffix that is a proper prefix of a marker (so "<|clo" + "se|>" is one marker, and the
 * result cannot depend on the chunking). The parser is a flat state machine over those
 * events: a tag is the text between <|open|> or <|close|> and the next <|sep|>; what a
 * tag does depends only on its name and the current state. Rejected: re-parsing the whole
 * accumulated text with regexes on every delta (vLLM's approach), which is quadratic in the
 * output length and made "already sent" bookkeeping the source of most streaming bugs. */
#include "frontend/out_parse.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "frontend/json_py.h"

#define TAG_MAX_BYTES 4096  /* longer "tags" are not tags: the model lost the format */

enum state {
    S_THINK,        /* reasoning text */
    S_AFTER_THINK,  /* think closed, response not opened: whitespace is held back (dropped
                       if the response channel opens), other text opens the response */
    S_RESP,         /* content text */
    S_AFTER_RESP,   /* between channels: text dropped */
    S_TOOLS,        /* inside the tools channel, between calls */
    S_CALL,         /* inside a call, between arguments */
    S_ARG,          /* an argument value */
    S_JSON,         /* a raw json argument block */
    S_DONE,         /* after the message: everything dropped */
};

enum marker { M_OPEN, M_CLOSE, M_SEP, M_EOM, M_COUNT };
static const char *const marker_text[M_COUNT] = {"<|open|>", "<|close|>", "<|sep|>",
                                                 "<|end_of_msg|>"};

struct k3_outp {
    struct k3_outp_cfg cfg;
    struct k3_outp_result res;
    struct k3_sbuf pend;      /* held-back text that may start a marker */
    enum state state;
    int in_tag;               /* between <|open|>/<|close|> and <|sep|> */
    int tag_close;            /* the tag started with <|close|> */
    int tag_overflow;
    struct k3_sbuf tag;
    int tools_seen;           /* a tools channel or call appeared: no more content */
    int call_open;            /* a call is being parsed (possibly a dropped one) */
    long call;                /* index into res.calls, or -1 for a dropped call */
    int call_nargs, call_json;
    int arg_stream;           /* a string argument whose value streams as it arrives */
    struct k3_sbuf key, type, val;
    struct k3_sbuf ws_hold;   /* whitespace after </think>, before anything else */
    int finished;
    uint64_t rng;
    int32_t marker_id[M_COUNT];  /* the markers' special ids (k3_outp_feed_ids) */
    int marker_ids_set;
};

/* ---- small helpers ------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void mint_id(struct k3_outp *p, char id[K3_OUTP_ID_BYTES])
{
    static const char b62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    memcpy(id, "call_", 5);
    uint64_t a = splitmix64(&p->rng), b = splitmix64(&p->rng);
    for (int i = 0; i < 24; i++) {
        uint64_t *w = i < 12 ? &a : &b;
        id[5 + i] = b62[*w % 62];
        *w /= 62;
    }
    id[29] = 0;
}

static struct k3_outp_tool_delta *tool_delta(struct k3_outp_delta *d, int index)
{
    if (d->n_tools && d->tools[d->n_tools - 1].index == index) return &d->tools[d->n_tools - 1];
    if (d->n_tools == d->cap_tools) {
        size_t cap = d->cap_tools ? 2 * d->cap_tools : 4;
        struct k3_outp_tool_delta *v = realloc(d->tools, cap * sizeof *v);
        if (!v) K3_FATAL("out of memory: tool deltas");
        d->tools = v;
        d->cap_tools = cap;
    }
    struct k3_outp_tool_delta *t = &d->tools[d->n_tools++];
    memset(t, 0, sizeof *t);
    t->index = index;
    return t;
}

/* Appends an argument fragment to the open call and to the delta. */
static void call_args(struct k3_outp *p, const char *s, size_t n, struct k3_outp_delta *d)
{
    if (p->call < 0) return;
    k3_sbuf_add(&p->res.calls[p->call].args, s, n);
    k3_sbuf_add(&tool_delta(d, (int)p->call)->args, s, n);
}

static int attr_get(const char *tag, size_t len, const char *key, struct k3_sbuf *out)
{
    /* finds ` key="` and unescapes up to the next '"' (&quot; and &amp;, one pass) */
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 3 <= len; i++) {
        if (tag[i] != ' ' || memcmp(tag + i + 1, key, kl) || tag[i + 1 + kl] != '=' ||
            tag[i + 2 + kl] != '"')
            continue;
        k3_sbuf_clear(out);
        for (size_t j = i + kl + 3; j < len; j++) {
            if (tag[j] == '"') return 1;
            if (tag[j] == '&' && j + 6 <= len && !memcmp(tag + j, "&quot;", 6)) {
                k3_sbuf_addc(out, '"');
                j += 5;
            } else if (tag[j] == '&' && j + 5 <= len && !memcmp(tag + j, "&amp;", 5)) {
                k3_sbuf_addc(out, '&');
                j += 4;
            } else {
                k3_sbuf_addc(out, tag[j]);
            }
        }
        return 1;  /* an unterminated value runs to the end of the tag */
    }
    return 0;
}

static int name_declared(const struct k3_outp *p, const char *name)
{
    if (!p->cfg.tool_names) return 1;
    for (size_t i = 0; i < p->cfg.n_tool_names; i++)
        if (!strcmp(p->cfg.tool_names[i], name)) return 1;
    return 0;
}

/* ---- calls and arguments --------------------------------------------------------------- */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The JSON text of an argument value of XTML type `type` (research §2.3: strings raw,
 * everything else JSON). A value that does not decode as its type stays a string. */
static void arg_value_json(struct k3_outp *p, struct k3_sbuf *out)
{
    const char *v = p->val.p ? p->val.p : "";
    size_t n = p->val.n;
    const char *t = p->type.p ? p->type.p : "";
    if (strcmp(t, "string") != 0) {
        size_t a = 0, b = n;
        while (a < b && is_ws(v[a])) a++;
        while (b > a && is_ws(v[b - 1])) b--;
        json_t *j = b > a ? json_loadb(v + a, b - a, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
        int ok = j != NULL;
        if (ok && !strcmp(t, "number")) ok = json_is_number(j);
        else if (ok && !strcmp(t, "boolean")) ok = json_is_boolean(j);
        else if (ok && !strcmp(t, "null")) ok = json_is_null(j);
        else if (ok && !strcmp(t, "object")) ok = json_is_object(j);
        else if (ok && !strcmp(t, "array")) ok = json_is_array(j);
        if (ok) {
            k3_json_py_dump(j, 0, out);
            json_decref(j);
            return;
        }
        json_decref(j);
        p->res.n_bad_values++;
    }
    k3_json_py_string(v, n, out);
}

/* `{"key": ` or `, "key": ` before an argument's value. */
static void arg_prefix(struct k3_outp *p, struct k3_sbuf *frag)
{
    k3_sbuf_adds(frag, p->call_nargs ? ", " : "{");
    k3_json_py_string(p->key.p ? p->key.p : "", p->key.n, frag);
    k3_sbuf_adds(frag, ": ");
}

/* At <|open|>argument: a string value of a live call streams (research §3.4: vLLM's K3
 * parser sends each call whole, minutes late for long arguments); others wait for the
 * closer because their JSON form needs the whole value. */
static void arg_begin(struct k3_outp *p, struct k3_outp_delta *d)
{
    p->state = S_ARG;
    k3_sbuf_clear(&p->val);
    p->arg_stream = p->call >= 0 && !p->call_json && p->type.p && !strcmp(p->type.p, "string");
    if (!p->arg_stream) return;
    struct k3_sbuf frag = {0};
    arg_prefix(p, &frag);
    k3_sbuf_addc(&frag, '"');
    call_args(p, frag.p, frag.n, d);
    k3_sbuf_free(&frag);
}

static void arg_finish(struct k3_outp *p, struct k3_outp_delta *d)
{
    if (p->state != S_ARG) return;
    p->state = S_CALL;
    if (p->arg_stream) {
        p->arg_stream = 0;
        call_args(p, "\"", 1, d);
        p->call_nargs++;
        return;
    }
    if (p->call < 0 || p->call_json) return;  /* a json block already gave the arguments */
    struct k3_sbuf frag = {0};
    arg_prefix(p, &frag);
    arg_value_json(p, &frag);
    call_args(p, frag.p, frag.n, d);
    p->call_nargs++;
    k3_sbuf_free(&frag);
}

static void json_finish(struct k3_outp *p, struct k3_outp_delta *d)
{
    if (p->state != S_JSON) return;
    p->state = S_CALL;
    if (p->call < 0 || p->call_nargs || p->call_json) return;
    p->call_json = 1;
    json_t *j = json_loadb(p->val.p ? p->val.p : "", p->val.n, JSON_ALLOW_NUL, NULL);
    if (json_is_object(j)) {
        struct k3_sbuf b = {0};
        k3_json_py_dump(j, 0, &b);
        call_args(p, b.p, b.n, d);
        k3_sbuf_free(&b);
    } else {  /* not a JSON object: passed on as written, the client's parser will say so */
        p->res.n_bad_values++;
        call_args(p, p->val.p ? p->val.p : "", p->val.n, d);
    }
    json_decref(j);
}

/* Closes the open call (its closer arrived or is implied). */
static void call_finish(struct k3_outp *p, struct k3_outp_delta *d)
{
    arg_finish(p, d);
    json_finish(p, d);
    if (!p->call_open) return;
    p->call_open = 0;
    if (p->call >= 0) {
        if (!p->call_json) call_args(p, p->call_nargs ? "}" : "{}", p->call_nargs ? 1 : 2, d);
        p->res.calls[p->call].complete = 1;
    }
    p->call = -1;
}

static void call_start(struct k3_outp *p, const char *tag, size_t len, struct k3_outp_delta *d)
{
    call_finish(p, d);
    p->call_open = 1;
    p->call = -1;
    p->call_nargs = p->call_json = 0;
    struct k3_sbuf name = {0};
    int has = attr_get(tag, len, "tool", &name);
    if (!has || !name.n || memchr(name.p, 0, name.n) || p->cfg.drop_calls ||
        !name_declared(p, name.p)) {
        p->res.n_dropped_calls++;
        k3_sbuf_free(&name);
        return;
    }
    struct k3_outp_result *r = &p->res;
    if (r->n_calls == r->cap_calls) {
        size_t cap = r->cap_calls ? 2 * r->cap_calls : 4;
        struct k3_outp_call *v = realloc(r->calls, cap * sizeof *v);
        if (!v) K3_FATAL("out of memory: tool calls");
        r->calls = v;
        r->cap_calls = cap;
    }
    struct k3_outp_call *c = &r->calls[r->n_calls];
    memset(c, 0, sizeof *c);
    mint_id(p, c->id);
    c->name = k3_sbuf_take(&name);
    p->call = (long)r->n_calls++;
    struct k3_outp_tool_delta *t = tool_delta(d, (int)p->call);
    t->first = 1;
    memcpy(t->id, c->id, sizeof t->id);
    t->name = strdup(c->name);
    if (!t->name) K3_FATAL("out of memory");
}

/* ---- the parser ------------------------------------------------------------------------ */

static void on_text(struct k3_outp *p, const char *s, size_t n, struct k3_outp_delta *d)
{
    if (!n) return;
    if (p->in_tag) {
        if (p->tag.n + n > TAG_MAX_BYTES) p->tag_overflow = 1;
        else k3_sbuf_add(&p->tag, s, n);
        return;
    }
    switch (p->state) {
    case S_THINK:
        k3_sbuf_add(&p->res.reasoning, s, n);
        k3_sbuf_add(&d->reasoning, s, n);
        break;
    case S_AFTER_THINK: {
        size_t i = 0;
        while (i < n && is_ws(s[i])) i++;
        k3_sbuf_add(&p->ws_hold, s, i);
        if (i == n) break;
        /* text without <|open|>response<|sep|>: the model skipped the opener */
        k3_sbuf_add(&p->res.content, p->ws_hold.p, p->ws_hold.n);
        k3_sbuf_add(&d->content, p->ws_hold.p, p->ws_hold.n);
        k3_sbuf_clear(&p->ws_hold);
        p->state = S_RESP;
        s += i;
        n -= i;
    }
    /* fall through */
    case S_RESP:
        k3_sbuf_add(&p->res.content, s, n);
        k3_sbuf_add(&d->content, s, n);
        break;
    case S_ARG:
        if (p->arg_stream) {  /* JSON string escaping works byte by byte: chunks are fine */
            struct k3_sbuf frag = {0};
            k3_json_py_string(s, n, &frag);
            call_args(p, frag.p + 1, frag.n - 2, d);  /* without the quotes */
            k3_sbuf_free(&frag);
            break;
        }
        k3_sbuf_add(&p->val, s, n);
        break;
    case S_JSON:
        k3_sbuf_add(&p->val, s, n);
        break;
    default:
        break;
    }
}

static int tag_is(const char *tag, size_t len, const char *name)
{
    size_t n = strlen(name);
    return len >= n && !memcmp(tag, name, n) && (len == n || tag[n] == ' ');
}

static void on_tag(struct k3_outp *p, struct k3_outp_delta *d)
{
    const char *t = p->tag.p ? p->tag.p : "";
    size_t n = p->tag.n;
    while (n && is_ws(*t)) t++, n--;  /* tolerate stray whitespace inside markers */
    while (n && is_ws(t[n - 1])) n--;
    if (p->tag_overflow) return;
    if (!p->tag_close) {
        if (tag_is(t, n, "think") && !p->tools_seen) {
            p->state = S_THINK;
        } else if (tag_is(t, n, "response") && !p->tools_seen) {
            k3_sbuf_clear(&p->ws_hold);
            p->state = S_RESP;
        } else if (tag_is(t, n, "tools")) {
            call_finish(p, d);
            p->tools_seen = 1;
            p->state = S_TOOLS;
        } else if (tag_is(t, n, "call")) {
            p->tools_seen = 1;
            call_start(p, t, n, d);
            p->state = S_CALL;
        } else if (tag_is(t, n, "argument") && p->call_open) {
            arg_finish(p, d);
            json_finish(p, d);
            if (!attr_get(t, n, "key", &p->key)) k3_sbuf_clear(&p->key);
            if (!attr_get(t, n, "type", &p->type)) k3_sbuf_clear(&p->type);
            arg_begin(p, d);
        } else if (tag_is(t, n, "json") && p->call_open) {
            arg_finish(p, d);
            json_finish(p, d);
            k3_sbuf_clear(&p->val);
            p->state = S_JSON;
        }
        return;  /* any other open tag (message, unknown) is dropped */
    }
    if (tag_is(t, n, "think")) {
        if (p->state == S_THINK) p->state = S_AFTER_THINK;
    } else if (tag_is(t, n, "response")) {
        if (p->state == S_RESP || p->state == S_AFTER_THINK) p->state = S_AFTER_RESP;
    } else if (tag_is(t, n, "argument")) {
        arg_finish(p, d);
    } else if (tag_is(t, n, "json")) {
        json_finish(p, d);
    } else if (tag_is(t, n, "call")) {
        call_finish(p, d);
        if (p->tools_seen) p->state = S_TOOLS;
    } else if (tag_is(t, n, "tools")) {
        call_finish(p, d);
        p->state = S_AFTER_RESP;
    } else if (tag_is(t, n, "message")) {
        call_finish(p, d);
        p->state = S_DONE;
    }
}

static void on_marker(struct k3_outp *p, enum marker m, struct k3_outp_delta *d)
{
    if (p->state == S_DONE) return;
    switch (m) {
    case M_OPEN:
    case M_CLOSE:  /* a tag left without <|sep|> is abandoned */
        p->in_tag = 1;
        p->tag_close = m == M_CLOSE;
        p->tag_overflow = 0;
        k3_sbuf_clear(&p->tag);
        break;
    case M_SEP:
        if (p->in_tag) {
            p->in_tag = 0;
            on_tag(p, d);
        }
        break;
    case M_EOM:
        p->in_tag = 0;
        call_finish(p, d);
        p->state = S_DONE;
        break;
    default:
        break;
    }
}

/* Lexes p->pend; at the end of the stream (final) nothing is held back. */
static void lex(struct k3_outp *p, int final, struct k3_outp_delta *d)
{
    const char *s = p->pend.p;
    size_t n = p->pend.n, start = 0, i = 0;
    while (i < n) {
        const char *lt = memchr(s + i, '<', n - i);
        if (!lt) {
            i = n;
            break;
        }
        i = (size_t)(lt - s);
        int hold = 0, hit = -1;
        for (int m = 0; m < M_COUNT && hit < 0; m++) {
            size_t ml = strlen(marker_text[m]);
            if (n - i >= ml) {
                if (!memcmp(s + i, marker_text[m], ml)) hit = m;
            } else if (!memcmp(s + i, marker_text[m], n - i)) {
                hold = 1;
            }
        }
        if (hit >= 0) {
            on_text(p, s + start, i - start, d);
            on_marker(p, (enum marker)hit, d);
            i += strlen(marker_text[hit]);
            start = i;
            continue;
        }
        if (hold && !final) break;
        i++;
    }
    if (final) i = n;
    on_text(p, s + start, i - start, d);
    /* keep s[i..n) */
    memmove(p->pend.p, s + i, n - i);
    p->pend.n = n - i;
    p->pend.p[p->pend.n] = 0;
}

/* ---- API ------------------------------------------------------------------------------- */

struct k3_outp *k3_outp_new(const struct k3_outp_cfg *cfg)
{
    struct k3_outp *p = calloc(1, sizeof *p);
    if (!p) K3_FATAL("out of memory: output parser");
    p->cfg = *cfg;
    p->state = cfg->thinking ? S_THINK : S_RESP;
    p->call = -1;
    p->rng = cfg->id_seed;
    k3_sbuf_reserve(&p->pend, 64);
    return p;
}

void k3_outp_free(struct k3_outp *p)
{
    if (!p) return;
    k3_sbuf_free(&p->res.reasoning);
    k3_sbuf_free(&p->res.content);
    for (size_t i = 0; i < p->res.n_calls; i++) {
        free(p->res.calls[i].name);
        k3_sbuf_free(&p->res.calls[i].args);
    }
    free(p->res.calls);
    k3_sbuf_free(&p->pend);
    k3_sbuf_free(&p->tag);
    k3_sbuf_free(&p->key);
    k3_sbuf_free(&p->type);
    k3_sbuf_free(&p->val);
    k3_sbuf_free(&p->ws_hold);
    free(p);
}

void k3_outp_feed(struct k3_outp *p, const char *text, size_t len, struct k3_outp_delta *d)
{
    if (p->finished || !len) return;
    k3_sbuf_add(&p->pend, text, len);
    lex(p, 0, d);
}

/* Ids know what text cannot: a marker is its special id, and marker-like text made of
 * ordinary tokens (a model writing about "<|close|>" in code, as users' text is rendered)
 * is text. So ids bypass the marker scan: special marker ids are events, everything else
 * is literal text. Text fed before with k3_outp_feed is flushed first. */
int k3_outp_feed_ids(struct k3_outp *p, struct k3_detok *dt, const int32_t *ids, size_t n,
                     struct k3_outp_delta *d)
{
    char buf[K3_DETOK_MAX_OUT];
    if (p->finished) return 0;
    if (!p->marker_ids_set) {
        for (int m = 0; m < M_COUNT; m++) p->marker_id[m] = k3_tok_special_id(dt->tok, marker_text[m]);
        p->marker_ids_set = 1;
    }
    lex(p, 1, d);  /* held-back text from k3_outp_feed is text now */
    for (size_t i = 0; i < n; i++) {
        int m = 0;
        while (m < M_COUNT && p->marker_id[m] != ids[i]) m++;
        if (m < M_COUNT) {
            int len = k3_detok_flush(dt, buf);  /* bytes held for UTF-8 come out first */
            on_text(p, buf, (size_t)len, d);
            on_marker(p, (enum marker)m, d);
            continue;
        }
        int len = k3_detok_push(dt, ids[i], buf);
        if (len < 0) return -1;
        on_text(p, buf, (size_t)len, d);
    }
    return 0;
}

void k3_outp_finish(struct k3_outp *p, enum k3_outp_end why, struct k3_outp_delta *d)
{
    if (p->finished) return;
    if (why == K3_OUTP_LENGTH) {
        /* a cut can end inside a marker: a held-back marker prefix is dropped, not shown */
        p->pend.n = 0;
    }
    lex(p, 1, d);
    if (why == K3_OUTP_STOP) {
        p->in_tag = 0;
        call_finish(p, d);  /* a stop ends the message: what is open is closed */
    }
    p->finished = 1;
    p->res.finish_reason = why == K3_OUTP_LENGTH ? "length"
                           : p->res.n_calls ? "tool_calls" : "stop";
}

const struct k3_outp_result *k3_outp_result(const struct k3_outp *p) { return &p->res; }

void k3_outp_delta_clear(struct k3_outp_delta *d)
{
    k3_sbuf_clear(&d->reasoning);
    k3_sbuf_clear(&d->content);
    for (size_t i = 0; i < d->n_tools; i++) {
        free(d->tools[i].name);
        k3_sbuf_free(&d->tools[i].args);
    }
    d->n_tools = 0;
}

void k3_outp_delta_free(struct k3_outp_delta *d)
{
    k3_outp_delta_clear(d);
    k3_sbuf_free(&d->reasoning);
    k3_sbuf_free(&d->content);
    free(d->tools);
    memset(d, 0, sizeof *d);
}
