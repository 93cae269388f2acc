/* anthropic.c - the Messages request: validation, translation into the OpenAI chat shape
 * and Anthropic error objects (see anthropic.h for the mapping choices).
 *
 * The Anthropic-only structure (blocks, roles, tools, tool_choice, thinking, the required
 * fields) is checked here, with Anthropic paths in the messages; everything the two APIs
 * share (tool names, Kimi's sampling policy, the encoder's rules) is left to
 * k3_chat_req_from_json, whose rare complaints are re-phrased with the Anthropic path of the
 * translated message (a label kept per translated message). Rejected: a second renderer
 * for Anthropic conversations; two renderers drift, and the issue asks for one path. */
#include "frontend/anthropic.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "frontend/json_py.h"

/* Cuts a trailing incomplete UTF-8 sequence (snprintf truncation can split one), so that
 * an error message is always valid UTF-8. */
static void utf8_trim(char *s)
{
    size_t n = strlen(s), i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80 && n - i < 3) i--;
    if (i == 0 || (unsigned char)s[i - 1] < 0xc0) return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (n - (i - 1) < want) s[i - 1] = 0;
}

static int fail(struct k3_api_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct k3_api_err *e, const char *param, const char *fmt, ...)
{
    e->status = 400;
    snprintf(e->type, sizeof e->type, "invalid_request_error");
    snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    utf8_trim(e->param);
    utf8_trim(e->message);
    return -1;
}

static int str_is(const json_t *v, const char *s)
{
    return json_is_string(v) && json_string_length(v) == strlen(s) &&
           !strcmp(json_string_value(v), s);
}

static int absent(const json_t *v) { return !v || json_is_null(v); }

/* A short, printable rendering of a client's string for a message (at most 40 bytes). */
static const char *shown(const json_t *v, char buf[48])
{
    if (!json_is_string(v)) return "(not a string)";
    snprintf(buf, 48, "%.40s", json_string_value(v));
    utf8_trim(buf);
    return buf;
}

/* ---- translation state -------------------------------------------------------------- */

struct tr {
    json_t *msgs;   /* the translated messages */
    json_t *where;  /* the Anthropic path of each */
    struct k3_api_err *e;
};

static void emit(struct tr *t, json_t *m, const char *where)
{
    json_array_append_new(t->msgs, m);
    json_array_append_new(t->where, json_string(where));
}

static json_t *text_part(const json_t *text)
{
    return json_pack("{s:s, s:O}", "type", "text", "text", text);
}

/* A text block {type:"text", text} (cache_control and citations are accepted, unused). */
static int check_text_block(const json_t *b, const char *p, struct k3_api_err *e)
{
    if (!json_is_string(json_object_get(b, "text")))
        return fail(e, p, "%s.text must be a string", p);
    return 0;
}

static const char *const unsupported_media[] = {"image", "document", "search_result",
                                                "container_upload", NULL};

static int is_media(const json_t *type)
{
    for (const char *const *m = unsupported_media; *m; m++)
        if (str_is(type, *m)) return 1;
    return 0;
}

static int block_type(const json_t *b, const char *p, const json_t **type, struct k3_api_err *e)
{
    if (!json_is_object(b)) return fail(e, p, "%s must be an object with a \"type\"", p);
    *type = json_object_get(b, "type");
    if (!json_is_string(*type)) return fail(e, p, "%s.type must be a string", p);
    if (is_media(*type))
        return fail(e, p, "%s: \"%s\" blocks are not supported by this server yet (no vision "
                    "tower); send text", p, json_string_value(*type));
    return 0;
}

/* system: a string or text blocks -> one system message (omitted when empty). */
static int tr_system(struct tr *t, const json_t *sys)
{
    char p[64];
    if (absent(sys)) return 0;
    if (json_is_string(sys)) {
        if (json_string_length(sys))
            emit(t, json_pack("{s:s, s:O}", "role", "system", "content", sys), "system");
        return 0;
    }
    if (!json_is_array(sys))
        return fail(t->e, "system", "system must be a string or an array of text blocks");
    json_t *parts = json_array();
    for (size_t i = 0; i < json_array_size(sys); i++) {
        const json_t *b = json_array_get(sys, i), *type;
        snprintf(p, sizeof p, "system[%zu]", i);
        if (block_type(b, p, &type, t->e) || (!str_is(type, "text") &&
            fail(t->e, p, "%s.type must be \"text\"", p)) || check_text_block(b, p, t->e)) {
            json_decref(parts);
            return -1;
        }
        json_array_append_new(parts, text_part(json_object_get(b, "text")));
    }
    if (json_array_size(parts))
        emit(t, json_pack("{s:s, s:o}", "role", "system", "content", parts), "system");
    else
        json_decref(parts);
    return 0;
}

/* tool_result content: a string or text blocks (the OpenAI tool message's content). */
static json_t *tool_result_content(const json_t *c, const char *p, struct k3_api_err *e)
{
    char q[160];
    if (absent(c)) return json_string("");
    if (json_is_string(c)) return json_incref((json_t *)c);
    if (!json_is_array(c)) {
        fail(e, p, "%s.content must be a string or an array of text blocks", p);
        return NULL;
    }
    json_t *parts = json_array();
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *b = json_array_get(c, i), *type;
        snprintf(q, sizeof q, "%s.content[%zu]", p, i);
        if (block_type(b, q, &type, e) ||
            (!str_is(type, "text") && fail(e, q, "%s.type must be \"text\"", q)) ||
            check_text_block(b, q, e)) {
            json_decref(parts);
            return NULL;
        }
        json_array_append_new(parts, text_part(json_object_get(b, "text")));
    }
    return parts;
}

static void flush_user(struct tr *t, json_t **parts, const char *where)
{
    if (!*parts) return;
    emit(t, json_pack("{s:s, s:o}", "role", "user", "content", *parts), where);
    *parts = NULL;
}

static int tr_user(struct tr *t, const json_t *c, size_t k)
{
    char w[48], p[96];
    snprintf(w, sizeof w, "messages[%zu]", k);
    if (json_is_string(c)) {
        emit(t, json_pack("{s:s, s:O}", "role", "user", "content", c), w);
        return 0;
    }
    json_t *parts = NULL;
    if (!json_array_size(c)) parts = json_array();  /* an empty turn stays a turn */
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *b = json_array_get(c, i), *type;
        snprintf(p, sizeof p, "%s.content[%zu]", w, i);
        if (block_type(b, p, &type, t->e)) goto fail;
        if (str_is(type, "text")) {
            if (check_text_block(b, p, t->e)) goto fail;
            if (!parts) parts = json_array();
            json_array_append_new(parts, text_part(json_object_get(b, "text")));
        } else if (str_is(type, "tool_result")) {
            const json_t *id = json_object_get(b, "tool_use_id");
            if (!json_is_string(id) || !json_string_length(id)) {
                fail(t->e, p, "%s.tool_use_id must be the id of a tool_use block of the "
                     "previous assistant message", p);
                goto fail;
            }
            const json_t *err = json_object_get(b, "is_error");
            if (!absent(err) && !json_is_boolean(err)) {
                fail(t->e, p, "%s.is_error must be a boolean", p);
                goto fail;
            }
            json_t *content = tool_result_content(json_object_get(b, "content"), p, t->e);
            if (!content) goto fail;
            flush_user(t, &parts, w);
            emit(t, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id,
                              "content", content), p);
        } else if (str_is(type, "tool_use") || str_is(type, "thinking") ||
                   str_is(type, "redacted_thinking")) {
            fail(t->e, p, "%s: \"%s\" blocks belong in assistant messages", p,
                 json_string_value(type));
            goto fail;
        } else {
            char b48[48];
            fail(t->e, p, "%s.type \"%s\" is not a supported block type: use text or "
                 "tool_result", p, shown(type, b48));
            goto fail;
        }
    }
    flush_user(t, &parts, w);
    return 0;
fail:
    json_decref(parts);
    return -1;
}

static int tr_assistant(struct tr *t, const json_t *c, size_t k, int last)
{
    char w[48], p[96];
    snprintf(w, sizeof w, "messages[%zu]", k);
    json_t *m = json_pack("{s:s}", "role", "assistant");
    if (json_is_string(c)) {
        json_object_set(m, "content", (json_t *)c);
        if (last) json_object_set_new(m, "partial", json_true());
        emit(t, m, w);
        return 0;
    }
    json_t *parts = json_array(), *calls = json_array();
    struct k3_sbuf reasoning = {0};
    int n_think = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *b = json_array_get(c, i), *type;
        snprintf(p, sizeof p, "%s.content[%zu]", w, i);
        if (block_type(b, p, &type, t->e)) goto fail;
        if (str_is(type, "text")) {
            if (check_text_block(b, p, t->e)) goto fail;
            json_array_append_new(parts, text_part(json_object_get(b, "text")));
        } else if (str_is(type, "thinking")) {
            const json_t *th = json_object_get(b, "thinking"), *sig = json_object_get(b, "signature");
            if (!json_is_string(th)) {
                fail(t->e, p, "%s.thinking must be a string", p);
                goto fail;
            }
            if (!absent(sig) && !json_is_string(sig)) {
                fail(t->e, p, "%s.signature must be a string", p);
                goto fail;
            }
            if (n_think++) k3_sbuf_addc(&reasoning, '\n');
            k3_sbuf_add(&reasoning, json_string_value(th), json_string_length(th));
        } else if (str_is(type, "redacted_thinking")) {
            if (!json_is_string(json_object_get(b, "data"))) {
                fail(t->e, p, "%s.data must be a string", p);
                goto fail;
            }
        } else if (str_is(type, "tool_use")) {
            const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"),
                         *input = json_object_get(b, "input");
            if (!json_is_string(id) || !json_string_length(id)) {
                fail(t->e, p, "%s.id must be a non-empty string", p);
                goto fail;
            }
            if (!json_is_string(name)) {
                fail(t->e, p, "%s.name must be a string", p);
                goto fail;
            }
            if (!json_is_object(input)) {
                fail(t->e, p, "%s.input must be an object", p);
                goto fail;
            }
            if (last) {
                fail(t->e, p, "%s: the last message is an assistant prefill, which cannot "
                     "hold tool_use; answer the call with a tool_result in a user message", p);
                goto fail;
            }
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", input));
        } else if (str_is(type, "tool_result")) {
            fail(t->e, p, "%s: tool_result blocks belong in user messages", p);
            goto fail;
        } else {
            char b48[48];
            fail(t->e, p, "%s.type \"%s\" is not a supported block type: use text, thinking, "
                 "redacted_thinking or tool_use", p, shown(type, b48));
            goto fail;
        }
    }
    if (json_array_size(parts)) json_object_set(m, "content", parts);
    if (n_think)
        json_object_set_new(m, "reasoning_content",
                            json_stringn(reasoning.p, reasoning.n));
    if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
    if (last) json_object_set_new(m, "partial", json_true());
    emit(t, m, w);
    json_decref(parts);
    json_decref(calls);
    k3_sbuf_free(&reasoning);
    return 0;
fail:
    json_decref(m);
    json_decref(parts);
    json_decref(calls);
    k3_sbuf_free(&reasoning);
    return -1;
}

static int tr_messages(struct tr *t, const json_t *msgs)
{
    char p[48];
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return fail(t->e, "messages", "messages must be a non-empty array of {\"role\", "
                    "\"content\"} objects");
    size_t n = json_array_size(msgs);
    for (size_t k = 0; k < n; k++) {
        const json_t *m = json_array_get(msgs, k);
        snprintf(p, sizeof p, "messages[%zu]", k);
        if (!json_is_object(m)) return fail(t->e, p, "%s must be an object", p);
        const json_t *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
        int user = str_is(role, "user");
        if (!user && !str_is(role, "assistant"))
            return fail(t->e, p, "%s.role must be \"user\" or \"assistant\" (the system prompt "
                        "is the top-level system field)", p);
        if (!json_is_string(c) && !json_is_array(c))
            return fail(t->e, p, "%s.content must be a string or an array of content blocks", p);
        if (user ? tr_user(t, c, k) : tr_assistant(t, c, k, k + 1 == n)) return -1;
    }
    return 0;
}

/* ---- tools, tool_choice, thinking, sampling ------------------------------------------ */

static int tr_tools(const json_t *tools, json_t *out, struct k3_api_err *e)
{
    char p[48];
    if (!json_is_array(tools))
        return fail(e, "tools", "tools must be an array of {\"name\", \"description\", "
                    "\"input_schema\"} objects");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *tl = json_array_get(tools, i);
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(tl)) return fail(e, p, "%s must be an object", p);
        const json_t *type = json_object_get(tl, "type");
        if (!absent(type) && !str_is(type, "custom")) {
            char b48[48];
            return fail(e, p, "%s.type \"%s\": server tools are not supported; declare client "
                        "tools with name, description and input_schema", p, shown(type, b48));
        }
        const json_t *name = json_object_get(tl, "name"), *desc = json_object_get(tl, "description"),
                     *schema = json_object_get(tl, "input_schema");
        if (!json_is_string(name)) return fail(e, p, "%s.name must be a string", p);
        if (!absent(desc) && !json_is_string(desc))
            return fail(e, p, "%s.description must be a string", p);
        if (!json_is_object(schema))
            return fail(e, p, "%s.input_schema is required: a JSON Schema object such as "
                        "{\"type\": \"object\", \"properties\": {...}}", p);
        json_t *fn = json_pack("{s:O}", "name", name);
        if (json_is_string(desc)) json_object_set(fn, "description", (json_t *)desc);
        json_object_set(fn, "parameters", (json_t *)schema);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return 0;
}

static int declared(const json_t *tools, const char *name)
{
    for (size_t i = 0; i < json_array_size(tools); i++)
        if (str_is(json_object_get(json_array_get(tools, i), "name"), name)) return 1;
    return 0;
}

static int tr_tool_choice(struct k3_anth_req *r, const json_t *tc, const json_t *tools,
                          json_t *out, struct k3_api_err *e)
{
    if (absent(tc)) return 0;
    const json_t *type = json_is_object(tc) ? json_object_get(tc, "type") : NULL;
    if (!str_is(type, "auto") && !str_is(type, "any") && !str_is(type, "tool") &&
        !str_is(type, "none"))
        return fail(e, "tool_choice", "tool_choice must be {\"type\": \"auto\"}, {\"type\": "
                    "\"any\"}, {\"type\": \"tool\", \"name\": ...} or {\"type\": \"none\"}");
    const json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (!absent(dp) && !json_is_boolean(dp))
        return fail(e, "tool_choice", "tool_choice.disable_parallel_tool_use must be a boolean");
    int n_tools = json_is_array(tools) ? (int)json_array_size(tools) : 0;
    if ((str_is(type, "any") || str_is(type, "tool")) && !n_tools)
        return fail(e, "tool_choice", "tool_choice \"%s\" needs tools: declare them, or use "
                    "auto or none", json_string_value(type));
    if (str_is(type, "tool")) {
        const json_t *name = json_object_get(tc, "name");
        char b48[48];
        if (!json_is_string(name))
            return fail(e, "tool_choice", "tool_choice.name must name one of the tools");
        if (!declared(tools, json_string_value(name)))
            return fail(e, "tool_choice", "tool_choice.name '%s' is not one of the declared "
                        "tools", shown(name, b48));
        r->tool_choice_named = 1;
    }
    const char *mode = str_is(type, "auto") ? "auto" : str_is(type, "none") ? "none" : "required";
    json_object_set_new(out, "tool_choice", json_string(mode));
    return 0;
}

/* thinking -> the OpenAI thinking object; output_config.effort -> thinking.effort (K3 has
 * low / high / max: medium rounds up to high, xhigh to max); output_config.format ->
 * response_format json_schema (strict, as Kimi's default). */
static int tr_thinking(const json_t *root, long long max_tokens, json_t *out,
                       struct k3_api_err *e)
{
    const json_t *th = json_object_get(root, "thinking");
    const char *mode = "disabled";
    if (!absent(th)) {
        const json_t *type = json_is_object(th) ? json_object_get(th, "type") : NULL;
        if (str_is(type, "enabled")) {
            const json_t *b = json_object_get(th, "budget_tokens");
            if (!json_is_integer(b) || json_integer_value(b) < 1024)
                return fail(e, "thinking", "thinking.budget_tokens must be an integer of at "
                            "least 1024");
            if (json_integer_value(b) >= max_tokens)
                return fail(e, "thinking", "thinking.budget_tokens (%lld) must be less than "
                            "max_tokens (%lld)", (long long)json_integer_value(b), max_tokens);
            mode = "enabled";
        } else if (str_is(type, "adaptive") || str_is(type, "between_tools")) {
            mode = "enabled";
        } else if (!str_is(type, "disabled")) {
            return fail(e, "thinking", "thinking must be {\"type\": \"enabled\", "
                        "\"budget_tokens\": N}, {\"type\": \"adaptive\"}, {\"type\": "
                        "\"between_tools\"} or {\"type\": \"disabled\"}");
        }
    }
    json_t *oth = json_pack("{s:s}", "type", mode);
    json_object_set_new(out, "thinking", oth);
    const json_t *oc = json_object_get(root, "output_config");
    if (absent(oc)) return 0;
    if (!json_is_object(oc)) return fail(e, "output_config", "output_config must be an object");
    const json_t *eff = json_object_get(oc, "effort");
    if (!absent(eff)) {
        static const char *const from[] = {"low", "medium", "high", "xhigh", "max"};
        static const char *const to[] = {"low", "high", "high", "max", "max"};
        size_t k = 0;
        while (k < 5 && !str_is(eff, from[k])) k++;
        if (k == 5)
            return fail(e, "output_config", "output_config.effort must be low, medium, high, "
                        "xhigh or max");
        json_object_set_new(oth, "effort", json_string(to[k]));
    }
    const json_t *fmt = json_object_get(oc, "format");
    if (!absent(fmt)) {
        const json_t *schema = json_is_object(fmt) ? json_object_get(fmt, "schema") : NULL;
        if (!str_is(json_object_get(fmt, "type"), "json_schema") || !json_is_object(schema))
            return fail(e, "output_config", "output_config.format must be {\"type\": "
                        "\"json_schema\", \"schema\": {...}}");
        json_object_set_new(out, "response_format",
                            json_pack("{s:s, s:{s:s, s:O, s:b}}", "type", "json_schema",
                                      "json_schema", "name", "output", "schema", schema,
                                      "strict", 1));
    }
    return 0;
}

static int tr_sampling(struct k3_anth_req *r, const json_t *root, json_t *out,
                       struct k3_api_err *e)
{
    static const char *const same[] = {"temperature", "top_p", "stream", "seed"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {  /* request.c checks these */
        const json_t *v = json_object_get(root, same[i]);
        if (v) json_object_set(out, same[i], (json_t *)v);
    }
    const json_t *tk = json_object_get(root, "top_k");
    if (!absent(tk)) {
        if (!json_is_integer(tk) || json_integer_value(tk) < 0)
            return fail(e, "top_k", "top_k must be an integer >= 0 (0: off)");
        r->top_k = json_integer_value(tk);
        json_object_set(out, "top_k", (json_t *)tk);
    }
    const json_t *ss = json_object_get(root, "stop_sequences");
    if (!absent(ss)) {
        int ok = json_is_array(ss) && json_array_size(ss) <= 16;
        for (size_t i = 0; ok && i < json_array_size(ss); i++)
            ok = json_is_string(json_array_get(ss, i)) &&
                 json_string_length(json_array_get(ss, i)) > 0;
        if (!ok)
            return fail(e, "stop_sequences", "stop_sequences must be an array of at most 16 "
                        "non-empty strings");
        if (json_array_size(ss)) json_object_set(out, "stop", (json_t *)ss);
    }
    const json_t *md = json_object_get(root, "metadata");
    if (!absent(md)) {
        if (!json_is_object(md)) return fail(e, "metadata", "metadata must be an object");
        const json_t *uid = json_object_get(md, "user_id");
        if (!absent(uid) && !json_is_string(uid))
            return fail(e, "metadata", "metadata.user_id must be a string");
    }
    return 0;
}

/* ---- errors from the shared path, in Anthropic terms ---------------------------------- */

/* Rewrites "messages[N]" (a translated index) as its Anthropic path and the OpenAI tool
 * fields as Anthropic's, in place. */
static void anth_paths(const json_t *where, char *s, size_t cap)
{
    struct k3_sbuf b = {0};
    static const struct { const char *from, *to; } fields[] = {
        {".function.parameters", ".input_schema"}, {".function.", "."}, {".partial", ""}};
    for (const char *c = s; *c;) {
        if (!strncmp(c, "messages[", 9)) {
            char *end;
            unsigned long long i = strtoull(c + 9, &end, 10);
            if (end != c + 9 && *end == ']' && i < json_array_size(where)) {
                k3_sbuf_adds(&b, json_string_value(json_array_get(where, i)));
                c = end + 1;
                continue;
            }
        }
        size_t f = 0;
        while (f < sizeof fields / sizeof *fields && strncmp(c, fields[f].from, strlen(fields[f].from)))
            f++;
        if (f < sizeof fields / sizeof *fields) {
            k3_sbuf_adds(&b, fields[f].to);
            c += strlen(fields[f].from);
            continue;
        }
        k3_sbuf_addc(&b, *c++);
    }
    snprintf(s, cap, "%s", b.p ? b.p : "");
    utf8_trim(s);
    k3_sbuf_free(&b);
}

static void anth_err(const json_t *where, struct k3_api_err *e)
{
    if (!strcmp(e->param, "stop")) snprintf(e->param, sizeof e->param, "stop_sequences");
    anth_paths(where, e->param, sizeof e->param);
    anth_paths(where, e->message, sizeof e->message);
}

/* ---- API ------------------------------------------------------------------------------ */

int k3_anth_req_from_json(json_t *root, struct k3_anth_req *r, struct k3_api_err *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    if (!json_is_object(root)) return fail(e, "", "the request body must be a JSON object");
    const json_t *model = json_object_get(root, "model");
    if (!json_is_string(model) || !json_string_length(model))
        return fail(e, "model", "model is required (a non-empty string)");
    const json_t *mt = json_object_get(root, "max_tokens");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1)
        return fail(e, "max_tokens", "max_tokens is required: an integer of at least 1");
    struct tr t = {json_array(), json_array(), e};
    json_t *out = json_pack("{s:O, s:O}", "model", model, "max_tokens", mt);
    r->where = t.where;
    if (tr_system(&t, json_object_get(root, "system")) ||
        tr_messages(&t, json_object_get(root, "messages")))
        goto fail;
    json_object_set(out, "messages", t.msgs);
    const json_t *tools = json_object_get(root, "tools");
    if (!absent(tools)) {
        json_t *ot = json_array();
        json_object_set_new(out, "tools", ot);
        if (tr_tools(tools, ot, e)) goto fail;
    }
    if (tr_tool_choice(r, json_object_get(root, "tool_choice"), tools, out, e) ||
        tr_thinking(root, json_integer_value(mt), out, e) ||
        tr_sampling(r, root, out, e))
        goto fail;
    if (k3_chat_req_from_json(out, &r->chat, e)) {
        anth_err(t.where, e);
        goto fail;
    }
    json_decref(t.msgs);
    r->openai = out;
    r->model = json_string_value(json_object_get(r->chat.root, "model"));
    return 0;
fail:
    json_decref(t.msgs);
    json_decref(out);
    json_decref(t.where);
    memset(r, 0, sizeof *r);
    return -1;
}

int k3_anth_req_parse(const char *body, size_t len, struct k3_anth_req *r, struct k3_api_err *e)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
    if (!root) {
        memset(r, 0, sizeof *r);
        memset(e, 0, sizeof *e);
        return fail(e, "", "the request body is not valid JSON: %s (line %d, column %d)",
                    jerr.text, jerr.line, jerr.column);
    }
    int rc = k3_anth_req_from_json(root, r, e);
    json_decref(root);
    return rc;
}

void k3_anth_req_free(struct k3_anth_req *r)
{
    k3_chat_req_free(&r->chat);
    json_decref(r->openai);
    json_decref(r->where);
    memset(r, 0, sizeof *r);
}

int k3_anth_req_render(const struct k3_anth_req *r, struct k3_chat_prompt *p,
                       struct k3_api_err *e)
{
    memset(e, 0, sizeof *e);
    if (!k3_chat_req_render(&r->chat, p, e)) return 0;
    anth_err(r->where, e);
    return -1;
}

const char *k3_anth_err_type(int status)
{
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return "api_error";
    }
}

int k3_anth_status(int status) { return status == 503 ? 529 : status; }

/* Length of the valid UTF-8 sequence at s[0..n), or 0 (overlongs and surrogates are
 * invalid, as in RFC 3629). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t k = 1; k < len; k++)
        if ((s[k] & 0xc0) != 0x80) return 0;
    if (len == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))) return 0;
    if (len == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))) return 0;
    return len;
}

char *k3_anth_err_json_msg(int status, const char *message)
{
    /* by hand, as k3_api_err_json: an error reply must never fail on odd bytes. A message
     * can quote the client's bytes (jansson's parse errors do), so invalid UTF-8 becomes
     * '?': the reply must be JSON a client can read. */
    struct k3_sbuf b = {0}, m = {0};
    const unsigned char *u = (const unsigned char *)message;
    for (size_t i = 0, n = strlen(message); i < n;) {
        size_t len = utf8_seq(u + i, n - i);
        if (len) k3_sbuf_add(&m, message + i, len);
        else k3_sbuf_addc(&m, '?');
        i += len ? len : 1;
    }
    const char *type = k3_anth_err_type(status);
    k3_sbuf_adds(&b, "{\"type\":\"error\",\"error\":{\"type\":");
    k3_json_py_string(type, strlen(type), &b);
    k3_sbuf_adds(&b, ",\"message\":");
    k3_json_py_string(m.p ? m.p : "", m.n, &b);
    k3_sbuf_adds(&b, "}}");
    k3_sbuf_free(&m);
    return k3_sbuf_take(&b);
}

char *k3_anth_err_json(const struct k3_api_err *e)
{
    return k3_anth_err_json_msg(e->status ? e->status : 400, e->message);
}
