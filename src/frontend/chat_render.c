/* chat_render.c - K3 XTML prompt rendering (see chat_render.h).
 *
 * The order follows encoding_k3.py's build_chat_segments, so the two can be read side by
 * side: tool results re-sorted by tool_call_id, call arguments normalised, then
 * declaration -> effort note -> conversation -> tool_choice note -> response_format note ->
 * generation stub. Each step's rule is cited from research/frontend-k3-corrections.md
 * ("corr. A4" = section A item 4) where it departs from research/frontend.md §2.3.
 *
 * Rejected: rendering to one string and tokenizing it whole. K3 tokenizes segment by
 * segment and the counts differ (frontend.md §1.3 item 4). */
#include "frontend/chat_render.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "frontend/json_py.h"

#define OPEN_TOKEN "<|open|>"
#define CLOSE_TOKEN "<|close|>"
#define SEP_TOKEN "<|sep|>"
#define END_OF_MSG_TOKEN "<|end_of_msg|>"

/* ---- Python helpers ---------------------------------------------------------------- */

int k3_py_isspace(unsigned cp)
{
    /* str.isspace: bidi class WS, B or S, or category Zs (CPython _PyUnicode_IsWhitespace). */
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 ||
           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

int k3_py_has_nonspace(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        unsigned cp = u[i];
        size_t n = 1;
        if (cp >= 0xf0 && i + 3 < len) {
            cp = ((cp & 7u) << 18) | ((u[i + 1] & 63u) << 12) | ((u[i + 2] & 63u) << 6) |
                 (u[i + 3] & 63u);
            n = 4;
        } else if (cp >= 0xe0 && i + 2 < len) {
            cp = ((cp & 15u) << 12) | ((u[i + 1] & 63u) << 6) | (u[i + 2] & 63u);
            n = 3;
        } else if (cp >= 0xc0 && i + 1 < len) {
            cp = ((cp & 31u) << 6) | (u[i + 1] & 63u);
            n = 2;
        }
        if (!k3_py_isspace(cp)) return 1;
        i += n;
    }
    return 0;
}

/* Python truthiness of a JSON value (None, False, 0, "", [], {} are false). */
static int py_truthy(const json_t *v)
{
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_NULL: case JSON_FALSE: return 0;
    case JSON_TRUE: return 1;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0.0;
    case JSON_STRING: return json_string_length(v) != 0;
    case JSON_ARRAY: return json_array_size(v) != 0;
    case JSON_OBJECT: return json_object_size(v) != 0;
    }
    return 0;
}

static int str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && json_string_length(v) == strlen(s) &&
           !memcmp(json_string_value(v), s, json_string_length(v));
}

/* dict.get(key, ...) as a present-or-not distinction: NULL when the key is absent. */
static json_t *get(const json_t *obj, const char *key)
{
    return json_is_object(obj) ? json_object_get(obj, key) : NULL;
}

/* ---- segments --------------------------------------------------------------------- */

static void seg_add(struct k3_chat_prompt *p, const char *s, size_t len, int special)
{
    if (!len) return;  /* encoding_k3._segment drops empty text */
    if (p->n_segs == p->cap_segs) {
        size_t cap = p->cap_segs ? 2 * p->cap_segs : 64;
        struct k3_seg *v = realloc(p->segs, cap * sizeof *v);
        if (!v) K3_FATAL("out of memory: %zu prompt segments", cap);
        p->segs = v;
        p->cap_segs = cap;
    }
    p->segs[p->n_segs++] = (struct k3_seg){p->text.n, len, special};
    k3_sbuf_add(&p->text, s, len);
}

static void text(struct k3_chat_prompt *p, const char *s, size_t len) { seg_add(p, s, len, 0); }
static void texts(struct k3_chat_prompt *p, const char *s) { seg_add(p, s, strlen(s), 0); }
static void control(struct k3_chat_prompt *p, const char *s) { seg_add(p, s, strlen(s), 1); }

/* An attribute ` key="value"`: four plain segments, the value escaped & first, then ". */
static void attr(struct k3_chat_prompt *p, const char *key, const char *val, size_t len)
{
    struct k3_sbuf b = {0};
    k3_sbuf_addc(&b, ' ');
    k3_sbuf_adds(&b, key);
    text(p, b.p, b.n);
    texts(p, "=\"");
    k3_sbuf_clear(&b);
    for (size_t i = 0; i < len; i++) {
        if (val[i] == '&') k3_sbuf_adds(&b, "&amp;");
        else if (val[i] == '"') k3_sbuf_adds(&b, "&quot;");
        else k3_sbuf_addc(&b, val[i]);
    }
    text(p, b.p, b.n);
    texts(p, "\"");
    k3_sbuf_free(&b);
}

static void attrs(struct k3_chat_prompt *p, const char *key, const char *val)
{
    attr(p, key, val, strlen(val));
}

static void open_begin(struct k3_chat_prompt *p, const char *tag)
{
    control(p, OPEN_TOKEN);
    texts(p, tag);
}

static void open_end(struct k3_chat_prompt *p) { control(p, SEP_TOKEN); }

static void open_tag(struct k3_chat_prompt *p, const char *tag)
{
    open_begin(p, tag);
    open_end(p);
}

static void close_tag(struct k3_chat_prompt *p, const char *tag)
{
    control(p, CLOSE_TOKEN);
    texts(p, tag);
    control(p, SEP_TOKEN);
}

static void end_msg(struct k3_chat_prompt *p)
{
    close_tag(p, "message");
    control(p, END_OF_MSG_TOKEN);
}

/* A system message with a type attribute and a fixed body (_internal_system_message). */
static void internal_note(struct k3_chat_prompt *p, const char *type, const char *body,
                          size_t len)
{
    open_begin(p, "message");
    attrs(p, "role", "system");
    attrs(p, "type", type);
    open_end(p);
    text(p, body, len);  /* bodies are built without surrounding whitespace: strip() is a no-op */
    end_msg(p);
}

/* ---- content ------------------------------------------------------------------------ */

/* _render_content_segments: a string, null, or a list of typed parts (corr. B "Content
 * lists"). Images are refused until the vision tower exists. */
static int content(struct k3_chat_prompt *p, const json_t *c, const char *where,
                   struct k3_err *err)
{
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) {
        text(p, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c))
        return k3_err_set(err, "%s.content must be a string, null or an array of content parts",
                          where);
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *part = json_array_get(c, i);
        const json_t *type = get(part, "type");
        if (!type)
            return k3_err_set(err, "%s.content[%zu] must be an object with a \"type\"", where, i);
        if (str_eq(type, "image") || str_eq(type, "image_url"))
            return k3_err_set(err, "%s.content[%zu]: image content is not supported yet (this "
                              "server has no vision tower); send text parts only", where, i);
        const json_t *t = get(part, "text");
        if (!json_is_string(t))
            return k3_err_set(err, "%s.content[%zu].text must be a string", where, i);
        text(p, json_string_value(t), json_string_length(t));
    }
    return 0;
}

/* ---- tools ---------------------------------------------------------------------------- */

static void tool_declare(struct k3_chat_prompt *p, const json_t *tools, int dynamic)
{
    struct k3_sbuf b = {0};
    k3_sbuf_adds(&b, dynamic ? "## New Tools Available\n"
                               "The system dynamically extends the toolset via lazy-loading.\n"
                               "You have access to all existing and extended tools.\n"
                               "Here are the specs for the extended tools.\n\n"
                             : "# Tools\n"
                               "Here are the available tools, described in JSONSchema.\n\n");
    k3_sbuf_adds(&b, "```json\n");
    k3_json_py_dump(tools, K3_JSON_PY_COMPACT | K3_JSON_PY_SORT_KEYS, &b);
    k3_sbuf_adds(&b, "\n```");
    open_begin(p, "message");
    attrs(p, "role", "system");
    attrs(p, "type", "tool-declare");
    open_end(p);
    text(p, b.p, b.n);  /* the whole body with its fence is one segment */
    end_msg(p);
    k3_sbuf_free(&b);
}

static const char *xtml_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_TRUE: case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    case JSON_INTEGER: case JSON_REAL: return "number";
    case JSON_STRING: return "string";
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    }
    return "array";
}

/* normalize_tool_arguments (corr. B "Tool-call arguments"): *args is an object (owned
 * reference) or NULL with *raw set to the unparsable string (a json block). */
static int call_arguments(const json_t *a, json_t **args, const char **raw, size_t *raw_len,
                          const char *where, struct k3_err *err)
{
    *args = NULL;
    *raw = NULL;
    if (!a || json_is_null(a)) return 0;
    if (json_is_object(a)) {
        *args = json_incref((json_t *)a);
        return 0;
    }
    if (!json_is_string(a))
        return k3_err_set(err, "%s.arguments must be a JSON object or a string holding one",
                          where);
    const char *s = json_string_value(a);
    size_t n = json_string_length(a);
    if (!k3_py_has_nonspace(s, n)) return 0;
    json_error_t jerr;
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!v) {  /* not JSON: the raw text goes into a json block, unchanged */
        *raw = s;
        *raw_len = n;
        return 0;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        return k3_err_set(err, "%s.arguments must encode a JSON object, not another JSON value",
                          where);
    }
    *args = v;
    return 0;
}

static int assistant(struct k3_chat_prompt *p, const json_t *m, int thinking, const char *where,
                     struct k3_err *err)
{
    char sub[96];
    if (thinking) {  /* the think channel is structural (corr. A4 for what fills it) */
        const json_t *r = get(m, "reasoning_content");
        if (!py_truthy(r)) r = get(m, "reasoning");
        open_tag(p, "think");
        if (r && !json_is_null(r)) {
            if (!json_is_string(r))
                return k3_err_set(err, "%s.reasoning_content must be a string", where);
            if (k3_py_has_nonspace(json_string_value(r), json_string_length(r)))
                text(p, json_string_value(r), json_string_length(r));
        }
        close_tag(p, "think");
    }
    open_tag(p, "response");
    if (content(p, get(m, "content"), where, err)) return -1;
    close_tag(p, "response");

    const json_t *calls = get(m, "tool_calls");
    if (!py_truthy(calls)) return 0;
    if (!json_is_array(calls)) return k3_err_set(err, "%s.tool_calls must be an array", where);
    open_tag(p, "tools");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i);
        snprintf(sub, sizeof sub, "%s.tool_calls[%zu]", where, i);
        if (!json_is_object(tc)) return k3_err_set(err, "%s must be an object", sub);
        const json_t *fn = get(tc, "function");
        if (!fn) fn = tc;
        const json_t *name = get(fn, "name");
        if (!json_is_string(name))
            return k3_err_set(err, "%s.function.name must be a string", sub);
        json_t *args;
        const char *raw;
        size_t raw_len = 0;
        if (call_arguments(get(fn, "arguments"), &args, &raw, &raw_len, sub, err)) return -1;
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i + 1);
        open_begin(p, "call");
        attr(p, "tool", json_string_value(name), json_string_length(name));
        attrs(p, "index", idx);
        open_end(p);
        if (raw) {
            open_begin(p, "json");
            attrs(p, "type", "object");
            open_end(p);
            text(p, raw, raw_len);
            close_tag(p, "json");
        } else if (args) {  /* keys in the client's order; values re-serialised by Python */
            const char *key;
            json_t *val;
            struct k3_sbuf b = {0};
            void *it = json_object_iter(args);
            for (; it; it = json_object_iter_next(args, it)) {
                key = json_object_iter_key(it);
                val = json_object_iter_value(it);
                open_begin(p, "argument");
                attr(p, "key", key, json_object_iter_key_len(it));
                attrs(p, "type", xtml_type(val));
                open_end(p);
                if (json_is_string(val)) {
                    text(p, json_string_value(val), json_string_length(val));
                } else {
                    k3_sbuf_clear(&b);
                    k3_json_py_dump(val, 0, &b);
                    text(p, b.p, b.n);
                }
                close_tag(p, "argument");
            }
            k3_sbuf_free(&b);
            json_decref(args);
        }
        close_tag(p, "call");
    }
    close_tag(p, "tools");
    return 0;
}

/* ---- tool-result order (normalize_xtml_tool_result_messages, corr. B) --------------- */

/* Position (1-based) and name of the first call in calls whose id equals id, or 0. */
static size_t match_call(const json_t *calls, const json_t *id, const json_t **name)
{
    if (!json_is_array(calls) || !json_is_string(id)) return 0;
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i);
        const json_t *cid = get(tc, "id");
        if (!cid || !json_is_string(cid)) continue;
        if (json_string_length(cid) != json_string_length(id) ||
            memcmp(json_string_value(cid), json_string_value(id), json_string_length(id)))
            continue;
        const json_t *fn = get(tc, "function");
        *name = json_is_object(fn) ? get(fn, "name") : get(tc, "name");
        return i + 1;
    }
    return 0;
}

struct run_item {
    size_t pos, offset, msg;
    const json_t *name;
};

static int run_cmp(const void *a, const void *b)
{
    const struct run_item *x = a, *y = b;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int is_role(const json_t *m, const char *role) { return str_eq(get(m, "role"), role); }

/* order[k] = the message rendered k-th; name[k] = the matched call's name or NULL. */
static void tool_result_order(const json_t *msgs, size_t *order, const json_t **name)
{
    size_t n = json_array_size(msgs), k = 0, i = 0;
    const json_t *calls = NULL;
    struct run_item *run = malloc((n ? n : 1) * sizeof *run);
    if (!run) K3_FATAL("out of memory: %zu messages", n);
    while (i < n) {
        const json_t *m = json_array_get(msgs, i);
        if (is_role(m, "assistant")) {
            const json_t *tc = get(m, "tool_calls");
            calls = py_truthy(tc) ? tc : NULL;
        }
        if (!is_role(m, "tool")) {
            order[k] = i, name[k++] = NULL;
            i++;
            continue;
        }
        size_t n_run = 0;
        int unresolved = 0;
        for (; i < n && is_role(json_array_get(msgs, i), "tool"); i++, n_run++) {
            const json_t *tm = json_array_get(msgs, i);
            const json_t *id = json_object_get(tm, "tool_call_id");
            if (!id) id = get(tm, "id");
            const json_t *nm = NULL;
            size_t pos = match_call(calls, id, &nm);
            if (nm && json_is_null(nm)) nm = NULL;  /* a null name: the message keeps its own */
            if (!pos) unresolved = 1;
            run[n_run] = (struct run_item){pos, n_run, i, nm};
        }
        if (!unresolved) qsort(run, n_run, sizeof *run, run_cmp);
        for (size_t r = 0; r < n_run; r++) {
            order[k] = run[r].msg;
            name[k++] = unresolved ? NULL : run[r].name;
        }
    }
    free(run);
}

/* ---- the prompt ------------------------------------------------------------------------ */

static int is_effort(const char *e)
{
    return e && (!strcmp(e, "low") || !strcmp(e, "high") || !strcmp(e, "max"));
}

static int notes(struct k3_chat_prompt *p, const struct k3_chat_opts *o)
{
    if (o->tool_choice && !strcmp(o->tool_choice, "required")) {
        static const char b[] = "The system is invoked with `tool_choice=required`.\n"
                                "You MUST call tools in the next message.";
        internal_note(p, "tool-choice", b, sizeof b - 1);
    } else if (o->tool_choice && !strcmp(o->tool_choice, "none")) {
        static const char b[] = "The system is invoked with `tool_choice=none`.\n"
                                "You MUST NOT call any tools in the next message.";
        internal_note(p, "tool-choice", b, sizeof b - 1);
    }
    const json_t *rf = o->response_format;
    const json_t *rf_type = json_is_object(rf) ? json_object_get(rf, "type") : rf;
    if (str_eq(rf_type, "json_object")) {
        static const char b[] = "The system is invoked with `response_format=json_object`.\n"
                                "Your response must be raw JSON data without markdown code "
                                "blocks (```json) or any additional formatting.";
        internal_note(p, "response-format", b, sizeof b - 1);
    } else if (str_eq(rf_type, "json_schema")) {
        /* extract_response_schema: json_schema.schema, else .json_schema, else the object */
        const json_t *js = get(rf, "json_schema"), *schema = NULL;
        if (js && !json_is_null(js)) {
            schema = get(js, "schema");
            if (!schema) schema = get(js, "json_schema");
            if (!schema) schema = js;
        }
        json_t *null = json_null();
        struct k3_sbuf b = {0};
        k3_sbuf_adds(&b, "The system is invoked with `response_format=json_schema`.\n"
                         "Your response must be raw JSON data without markdown code "
                         "blocks (```json) or any additional formatting.\n"
                         "The JSON data must match the following schema:\n```json\n");
        k3_json_py_dump(schema ? schema : null, K3_JSON_PY_COMPACT | K3_JSON_PY_SORT_KEYS, &b);
        k3_sbuf_adds(&b, "\n```");
        internal_note(p, "response-format", b.p, b.n);
        k3_sbuf_free(&b);
        json_decref(null);
    }
    return 0;
}

/* A partial assistant turn, left open for the model to continue (see chat_render.h). */
static int partial_turn(struct k3_chat_prompt *p, const json_t *m, int thinking,
                        struct k3_err *err)
{
    const char *where = "the partial assistant message";
    const json_t *name = get(m, "name");
    const json_t *r = get(m, "reasoning_content");
    if (!py_truthy(r)) r = get(m, "reasoning");
    if (r && !json_is_null(r) && !json_is_string(r))
        return k3_err_set(err, "%s: reasoning_content must be a string", where);
    if (py_truthy(get(m, "tool_calls")))
        return k3_err_set(err, "%s cannot carry tool_calls", where);
    int has_r = thinking && json_is_string(r) &&
                k3_py_has_nonspace(json_string_value(r), json_string_length(r));
    struct k3_chat_prompt body = {0};  /* the content, rendered to learn if it is empty */
    if (content(&body, get(m, "content"), where, err)) {
        k3_chat_prompt_free(&body);
        return -1;
    }
    open_begin(p, "message");
    attrs(p, "role", "assistant");
    if (py_truthy(name) && json_is_string(name))
        attr(p, "name", json_string_value(name), json_string_length(name));
    open_end(p);
    p->ends_in_think = 0;
    if (has_r) {
        open_tag(p, "think");
        text(p, json_string_value(r), json_string_length(r));
        if (!body.text.n) {  /* no content yet: the model goes on reasoning */
            p->ends_in_think = 1;
            k3_chat_prompt_free(&body);
            return 0;
        }
        close_tag(p, "think");
    }
    open_tag(p, "response");
    for (size_t i = 0; i < body.n_segs; i++)  /* each text part stays its own segment */
        text(p, body.text.p + body.segs[i].off, body.segs[i].len);
    k3_chat_prompt_free(&body);
    return 0;
}

static int message(struct k3_chat_prompt *p, const json_t *m, const json_t *tool_override,
                   const json_t *calls, size_t tool_index, int thinking, const char *where,
                   struct k3_err *err)
{
    const json_t *role = get(m, "role");
    if (!json_is_string(role)) return k3_err_set(err, "%s.role must be a string", where);
    const char *r = json_string_value(role);
    const json_t *name = get(m, "name");
    int named = py_truthy(name);
    if (named && !json_is_string(name) && strcmp(r, "tool"))
        return k3_err_set(err, "%s.name must be a string", where);

    if (!strcmp(r, "system") && py_truthy(get(m, "tools"))) {  /* dynamic tools (corr. A3) */
        if (!json_is_array(get(m, "tools")))
            return k3_err_set(err, "%s.tools must be an array", where);
        tool_declare(p, get(m, "tools"), 1);
        return 0;
    }
    if (!strcmp(r, "user") || !strcmp(r, "system") || !strcmp(r, "assistant")) {
        open_begin(p, "message");
        attrs(p, "role", r);
        if (named) attr(p, "name", json_string_value(name), json_string_length(name));
        open_end(p);
        if (!strcmp(r, "assistant")) {
            if (assistant(p, m, thinking, where, err)) return -1;
        } else if (content(p, get(m, "content"), where, err)) {
            return -1;
        }
        end_msg(p);
        return 0;
    }
    if (!strcmp(r, "tool")) {  /* corr. A5: index = tool messages since the last assistant */
        const json_t *tn = tool_override;
        if (!tn) tn = json_object_get(m, "tool");
        if (!tn) tn = json_object_get(m, "name");
        if ((!tn || json_is_null(tn)) && json_is_array(calls) &&
            tool_index <= json_array_size(calls)) {
            const json_t *tc = json_array_get(calls, tool_index - 1);
            const json_t *fn = get(tc, "function");
            tn = get(fn ? fn : tc, "name");
            if (!tn) return k3_err_set(err, "%s: the matching tool call has no name", where);
        }
        if (!tn || json_is_null(tn))
            return k3_err_set(err, "%s: tool message needs a resolvable tool name: a "
                              "tool_call_id that matches a call of the preceding assistant "
                              "message, or a `name`", where);
        if (!json_is_string(tn)) return k3_err_set(err, "%s: tool name must be a string", where);
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", tool_index);
        open_begin(p, "message");
        attrs(p, "role", "tool");
        attr(p, "tool", json_string_value(tn), json_string_length(tn));
        attrs(p, "index", idx);
        open_end(p);
        if (content(p, get(m, "content"), where, err)) return -1;
        end_msg(p);
        return 0;
    }
    return 0;  /* any other role is skipped, as the encoder does (corr. B "Roles") */
}

int k3_chat_render(const json_t *messages, const json_t *tools, const struct k3_chat_opts *o,
                   struct k3_chat_prompt *out, struct k3_err *err)
{
    memset(out, 0, sizeof *out);
    if (!json_is_array(messages)) return k3_err_set(err, "messages must be an array");
    size_t n = json_array_size(messages);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    const json_t **override = malloc((n ? n : 1) * sizeof *override);
    if (!order || !override) K3_FATAL("out of memory: %zu messages", n);
    tool_result_order(messages, order, override);

    if (py_truthy(tools)) {
        if (!json_is_array(tools)) {
            k3_err_set(err, "tools must be an array");
            goto fail;
        }
        tool_declare(out, tools, 0);
    }
    if (o->thinking && o->thinking_effort) {
        if (!is_effort(o->thinking_effort)) {
            k3_err_set(err, "thinking effort '%s' is not supported: use low, high or max",
                       o->thinking_effort);
            goto fail;
        }
        struct k3_sbuf b = {0};
        k3_sbuf_addf(&b, "`thinking_effort` guides on how much to think in your thinking "
                         "channel (not including the response channel), supported values "
                         "include `low`, `medium`, `high`, and `max`.\n"
                         "Now the system is invoked with `thinking_effort=%s`.",
                     o->thinking_effort);
        internal_note(out, "thinking-effort", b.p, b.n);
        k3_sbuf_free(&b);
    }

    const json_t *partial = NULL;
    if (o->continue_final) {  /* the reorder only moves tool messages: the last stays last */
        partial = n ? json_array_get(messages, n - 1) : NULL;
        if (!is_role(partial, "assistant")) {
            k3_err_set(err, "a partial (prefilled) turn must be the last message and an "
                            "assistant message");
            goto fail;
        }
        n--;
    }
    const json_t *calls = NULL;
    size_t tool_index = 0;
    for (size_t k = 0; k < n; k++) {
        const json_t *m = json_array_get(messages, order[k]);
        char where[48];
        snprintf(where, sizeof where, "messages[%zu]", order[k]);
        if (!json_is_object(m)) continue;  /* the encoder skips non-dict entries */
        if (is_role(m, "assistant")) {
            calls = get(m, "tool_calls");
            tool_index = 0;
        } else if (is_role(m, "tool")) {
            tool_index++;
        }
        if (message(out, m, override[k], calls, tool_index, o->thinking, where, err)) goto fail;
    }
    notes(out, o);
    out->stub_seg = out->n_segs;
    out->ends_in_think = o->thinking;
    if (partial) {
        if (partial_turn(out, partial, o->thinking, err)) goto fail;
        out->stub_seg = out->n_segs;
    } else if (o->add_generation_prompt) {
        open_begin(out, "message");
        attrs(out, "role", "assistant");
        open_end(out);
        out->stub_seg = out->n_segs;
        open_tag(out, o->thinking ? "think" : "response");
    }
    free(order);
    free(override);
    return 0;
fail:
    free(order);
    free(override);
    k3_chat_prompt_free(out);
    return -1;
}

void k3_chat_prompt_free(struct k3_chat_prompt *p)
{
    k3_sbuf_free(&p->text);
    free(p->segs);
    memset(p, 0, sizeof *p);
}

size_t k3_chat_prompt_encode(const struct k3_tok *tok, const struct k3_chat_prompt *p,
                             struct k3_tok_ids *ids)
{
    return k3_chat_prompt_encode_pool(tok, p, NULL, ids);
}

size_t k3_chat_prompt_encode_pool(const struct k3_tok *tok, const struct k3_chat_prompt *p,
                                  struct k3_pool *pool, struct k3_tok_ids *ids)
{
    size_t start = ids->n, n_prompt = ids->n;
    for (size_t i = 0; i < p->n_segs; i++) {
        const struct k3_seg *s = &p->segs[i];
        if (i == p->stub_seg) n_prompt = ids->n;
        /* short segments (tags, attributes) are not worth a pool dispatch */
        k3_tok_encode(tok, p->text.p + s->off, s->len, s->special ? K3_TOK_SPECIAL : K3_TOK_PLAIN,
                      s->len >= 65536 ? pool : NULL, ids);
    }
    if (p->stub_seg >= p->n_segs) n_prompt = ids->n;
    return n_prompt - start;
}
