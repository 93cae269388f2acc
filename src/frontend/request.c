/* request.c - OpenAI chat request validation and mapping (see request.h).
 *
 * Validation walks the body once: messages and request tools, every message (collecting
 * the declared tool names), then thinking, sampling, response_format and tool_choice; the
 * first problem found is reported (one error per response, as OpenAI does). The rules are KVV's
 * (research/frontend.md §4.2): dynamic tools only on system messages and with empty
 * content; tool items {type:"function", function:{name}} with names of 1-256 characters
 * [A-Za-z0-9_.-] not starting with a digit; no duplicate names anywhere; response_format
 * text / json_object / json_schema{name, schema object, strict bool}; tool_choice auto / none
 * / required (required needs a tool) or a named function (accepted and ignored, as Kimi's
 * API does); thinking {type enabled|disabled, keep "all", effort low|high|max}. Mapping:
 * thinking is off for thinking.type "disabled", reasoning_effort "none" or
 * chat_template_kwargs.thinking false; effort = thinking.effort, else reasoning_effort,
 * else max (research/frontend.md §2.3 API mapping; KVV k3_features). */
#include "frontend/request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "frontend/json_py.h"
#include "frontend/unicode.h"

static int fail(struct k3_api_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Cuts a trailing incomplete UTF-8 sequence (snprintf truncation can split one). */
static void utf8_trim(char *s)
{
    size_t n = strlen(s), i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80 && n - i < 3) i--;
    if (i == 0 || (unsigned char)s[i - 1] < 0xc0) return;  /* ends in ASCII or continuation */
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (n - (i - 1) < want) s[i - 1] = 0;
}

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

static int one_of(const json_t *v, const char *const *set)
{
    for (; *set; set++)
        if (str_is(v, *set)) return 1;
    return 0;
}

/* ---- tools -------------------------------------------------------------------------- */

static int name_ok(const char *s, size_t len)
{
    if (len < 1 || len > 256) return 0;
    if (s[0] >= '0' && s[0] <= '9') return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

static int add_name(struct k3_chat_req *r, const char *name, const char *param,
                    struct k3_api_err *e)
{
    for (size_t i = 0; i < r->n_tool_names; i++)
        if (!strcmp(r->tool_names[i], name))
            return fail(e, param, "tool name '%s' is declared more than once (request tools "
                        "and dynamic tools share one namespace); give each tool a unique name",
                        name);
    const char **v = realloc(r->tool_names, (r->n_tool_names + 1) * sizeof *v);
    if (!v) K3_FATAL("out of memory: tool names");
    r->tool_names = v;
    r->tool_names[r->n_tool_names++] = name;
    return 0;
}

/* A tools array (request-level or a system message's): where = "tools" or "messages[i].tools". */
static int check_tools(struct k3_chat_req *r, const json_t *tools, const char *where,
                       struct k3_api_err *e)
{
    char p[128];
    if (!json_is_array(tools))
        return fail(e, where, "'%s' must be an array of {\"type\": \"function\", \"function\": "
                    "{...}} objects", where);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        snprintf(p, sizeof p, "%s[%zu]", where, i);
        if (!json_is_object(t)) return fail(e, p, "'%s' must be an object", p);
        const json_t *type = json_object_get(t, "type");
        snprintf(p, sizeof p, "%s[%zu].type", where, i);
        if (!type) return fail(e, p, "'%s' is missing: set it to \"function\"", p);
        if (!str_is(type, "function"))
            return fail(e, p, "'%s' must be \"function\" (the only supported tool type)", p);
        const json_t *fn = json_object_get(t, "function");
        snprintf(p, sizeof p, "%s[%zu].function", where, i);
        if (!json_is_object(fn))
            return fail(e, p, "'%s' is %s: it must be an object with a name", p,
                        fn ? "not an object" : "missing");
        const json_t *name = json_object_get(fn, "name");
        snprintf(p, sizeof p, "%s[%zu].function.name", where, i);
        if (!json_is_string(name)) return fail(e, p, "'%s' must be a string", p);
        if (!name_ok(json_string_value(name), json_string_length(name)))
            return fail(e, p, "'%s' is not a valid tool name: use 1-256 characters from "
                        "a-z, A-Z, 0-9, '_', '-', '.', not starting with a digit", p);
        const json_t *d = json_object_get(fn, "description");
        if (d && !json_is_string(d) && !json_is_null(d)) {
            snprintf(p, sizeof p, "%s[%zu].function.description", where, i);
            return fail(e, p, "'%s' must be a string", p);
        }
        const json_t *params = json_object_get(fn, "parameters");
        if (params && !json_is_object(params) && !json_is_null(params)) {
            snprintf(p, sizeof p, "%s[%zu].function.parameters", where, i);
            return fail(e, p, "'%s' must be a JSON Schema object", p);
        }
        const json_t *strict = json_object_get(fn, "strict");
        if (strict && !json_is_boolean(strict) && !json_is_null(strict)) {
            snprintf(p, sizeof p, "%s[%zu].function.strict", where, i);
            return fail(e, p, "'%s' must be a boolean", p);
        }
        snprintf(p, sizeof p, "%s[%zu].function.name", where, i);
        if (add_name(r, json_string_value(name), p, e)) return -1;
    }
    return 0;
}

/* ---- messages ----------------------------------------------------------------------- */

static int content_empty(const json_t *c)
{
    return !c || json_is_null(c) || (json_is_string(c) && !json_string_length(c)) ||
           (json_is_array(c) && !json_array_size(c));
}

static int check_content(const json_t *c, const char *where, int required,
                         struct k3_api_err *e)
{
    char p[160];
    snprintf(p, sizeof p, "%s.content", where);
    if (!c || json_is_null(c)) {
        if (required) return fail(e, p, "'%s' is required", p);
        return 0;
    }
    if (json_is_string(c)) return 0;
    if (!json_is_array(c))
        return fail(e, p, "'%s' must be a string or an array of content parts", p);
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *part = json_array_get(c, i);
        snprintf(p, sizeof p, "%s.content[%zu]", where, i);
        if (!json_is_object(part)) return fail(e, p, "'%s' must be an object", p);
        const json_t *type = json_object_get(part, "type");
        snprintf(p, sizeof p, "%s.content[%zu].type", where, i);
        if (!json_is_string(type)) return fail(e, p, "'%s' must be a string", p);
        static const char *const media[] = {"image_url", "image", "input_audio", "file",
                                            "video_url", NULL};
        if (one_of(type, media))
            return fail(e, p, "'%s' is \"%s\": image, audio and file content is not supported "
                        "by this server yet (no vision tower); send text parts only", p,
                        json_string_value(type));
        if (!str_is(type, "text"))
            return fail(e, p, "'%s' must be \"text\"", p);
        snprintf(p, sizeof p, "%s.content[%zu].text", where, i);
        if (!json_is_string(json_object_get(part, "text")))
            return fail(e, p, "'%s' must be a string", p);
    }
    return 0;
}

static int check_tool_calls(const json_t *calls, const char *where, struct k3_api_err *e)
{
    char p[160];
    snprintf(p, sizeof p, "%s.tool_calls", where);
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls)) return fail(e, p, "'%s' must be an array", p);
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i);
        snprintf(p, sizeof p, "%s.tool_calls[%zu]", where, i);
        if (!json_is_object(tc)) return fail(e, p, "'%s' must be an object", p);
        const json_t *id = json_object_get(tc, "id");
        snprintf(p, sizeof p, "%s.tool_calls[%zu].id", where, i);
        if (id && !json_is_string(id) && !json_is_null(id))
            return fail(e, p, "'%s' must be a string", p);
        const json_t *type = json_object_get(tc, "type");
        snprintf(p, sizeof p, "%s.tool_calls[%zu].type", where, i);
        if (type && !str_is(type, "function") && !json_is_null(type))
            return fail(e, p, "'%s' must be \"function\"", p);
        const json_t *fn = json_object_get(tc, "function");
        snprintf(p, sizeof p, "%s.tool_calls[%zu].function", where, i);
        if (!json_is_object(fn)) return fail(e, p, "'%s' must be an object", p);
        snprintf(p, sizeof p, "%s.tool_calls[%zu].function.name", where, i);
        if (!json_is_string(json_object_get(fn, "name")))
            return fail(e, p, "'%s' must be a string", p);
        const json_t *a = json_object_get(fn, "arguments");
        snprintf(p, sizeof p, "%s.tool_calls[%zu].function.arguments", where, i);
        if (a && !json_is_null(a) && !json_is_string(a) && !json_is_object(a))
            return fail(e, p, "'%s' must be a string holding a JSON object", p);
        if (json_is_string(a) &&
            k3_py_has_nonspace(json_string_value(a), json_string_length(a))) {
            json_t *v = json_loadb(json_string_value(a), json_string_length(a),
                                   JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            int bad = v && !json_is_object(v);
            json_decref(v);
            if (bad) return fail(e, p, "'%s' must encode a JSON object", p);
        }
    }
    return 0;
}

static int check_message(struct k3_chat_req *r, const json_t *m, size_t i, json_t *out,
                         struct k3_api_err *e)
{
    char w[48], p[160];
    snprintf(w, sizeof w, "messages[%zu]", i);
    if (!json_is_object(m)) return fail(e, w, "'%s' must be an object", w);
    const json_t *role = json_object_get(m, "role");
    snprintf(p, sizeof p, "%s.role", w);
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", NULL};
    if (!json_is_string(role))
        return fail(e, p, "'%s' must be one of system, developer, user, assistant, tool", p);
    if (!one_of(role, roles))
        return fail(e, p, "'%s' is \"%s\": use system, developer, user, assistant or tool", p,
                    json_string_value(role));
    const char *ro = json_string_value(role);
    int system = !strcmp(ro, "system") || !strcmp(ro, "developer");
    const json_t *name = json_object_get(m, "name");
    snprintf(p, sizeof p, "%s.name", w);
    if (name && !json_is_string(name) && !json_is_null(name))
        return fail(e, p, "'%s' must be a string", p);

    const json_t *tools = json_object_get(m, "tools");
    snprintf(p, sizeof p, "%s.tools", w);
    int dynamic = 0;
    if (tools && !json_is_null(tools)) {
        if (!system)
            return fail(e, p, "'%s': only system messages may carry tools (dynamic tools)", p);
        if (check_tools(r, tools, p, e)) return -1;
        dynamic = json_array_size(tools) > 0;
        if (dynamic && !content_empty(json_object_get(m, "content")))
            return fail(e, p, "'%s': a system message that declares tools must have empty "
                        "content; put instructions in a separate system message", p);
    }
    if (!dynamic &&
        check_content(json_object_get(m, "content"), w, strcmp(ro, "assistant") != 0, e))
        return -1;

    if (!strcmp(ro, "assistant")) {
        static const char *const rk[] = {"reasoning_content", "reasoning"};
        for (int k = 0; k < 2; k++) {
            const json_t *v = json_object_get(m, rk[k]);
            snprintf(p, sizeof p, "%s.%s", w, rk[k]);
            if (v && !json_is_string(v) && !json_is_null(v))
                return fail(e, p, "'%s' must be a string", p);
        }
        if (check_tool_calls(json_object_get(m, "tool_calls"), w, e)) return -1;
        const json_t *partial = json_object_get(m, "partial");
        snprintf(p, sizeof p, "%s.partial", w);
        if (partial && !json_is_boolean(partial) && !json_is_null(partial))
            return fail(e, p, "'%s' must be a boolean", p);
        if (json_is_true(partial)) {
            if (i + 1 != json_array_size(json_object_get(r->root, "messages")))
                return fail(e, p, "'%s': only the last message may be partial (a prefix the "
                            "model continues)", p);
            const json_t *tc = json_object_get(m, "tool_calls");
            if (json_is_array(tc) && json_array_size(tc))
                return fail(e, p, "'%s': a partial message cannot carry tool_calls", p);
            r->partial = 1;
        }
    } else if (json_object_get(m, "tool_calls") && !json_is_null(json_object_get(m, "tool_calls"))) {
        snprintf(p, sizeof p, "%s.tool_calls", w);
        return fail(e, p, "'%s': only assistant messages may carry tool_calls", p);
    }
    if (!strcmp(ro, "tool")) {
        snprintf(p, sizeof p, "%s.tool_call_id", w);
        if (!json_is_string(json_object_get(m, "tool_call_id")))
            return fail(e, p, "'%s' is required: the id of the assistant tool call this "
                        "message answers", p);
    }
    if (!strcmp(ro, "developer")) {  /* the encoder knows only system (corr. B "Roles") */
        json_t *c = json_copy((json_t *)m);
        json_object_set_new(c, "role", json_string("system"));
        json_array_append_new(out, c);
    } else {
        json_array_append(out, (json_t *)m);
    }
    return 0;
}

/* ---- top level ------------------------------------------------------------------------ */

static int get_number(const json_t *root, const char *key, double *out, int *present,
                      struct k3_api_err *e)
{
    const json_t *v = json_object_get(root, key);
    *present = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return fail(e, key, "'%s' must be a number", key);
    *out = json_number_value(v);
    *present = 1;
    return 0;
}

static int get_int(const json_t *root, const char *key, long long *out, int *present,
                   struct k3_api_err *e)
{
    const json_t *v = json_object_get(root, key);
    *present = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return fail(e, key, "'%s' must be an integer", key);
    *out = json_integer_value(v);
    *present = 1;
    return 0;
}

static int get_bool(const json_t *root, const char *key, int *out, struct k3_api_err *e)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return fail(e, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int check_sampling(struct k3_chat_req *r, struct k3_api_err *e)
{
    double v = 0;
    int has = 0;
    long long iv = 0;
    if (get_number(r->root, "temperature", &v, &has, e)) return -1;
    if (has && !(v >= 0.0 && v <= 1.0))
        return fail(e, "temperature", "'temperature' must be between 0 and 1 for this model");
    r->temperature = has ? v : (r->thinking ? 1.0 : 0.6);
    if (get_number(r->root, "top_p", &v, &has, e)) return -1;
    if (has && fabs(v - 0.95) > 1e-9)
        return fail(e, "top_p", "'top_p' is fixed at 0.95 for this model; omit it or send 0.95");
    r->top_p = 0.95;
    static const char *const pen[] = {"presence_penalty", "frequency_penalty"};
    for (int k = 0; k < 2; k++) {
        if (get_number(r->root, pen[k], &v, &has, e)) return -1;
        if (has && v != 0.0)
            return fail(e, pen[k], "'%s' is fixed at 0 for this model; omit it or send 0", pen[k]);
    }
    if (get_int(r->root, "n", &iv, &has, e)) return -1;
    if (has && iv != 1) return fail(e, "n", "'n' must be 1: this server returns one choice");
    static const char *const mt[] = {"max_completion_tokens", "max_tokens"};
    r->max_tokens = -1;
    for (int k = 0; k < 2; k++) {
        if (get_int(r->root, mt[k], &iv, &has, e)) return -1;
        if (has && iv < 1) return fail(e, mt[k], "'%s' must be at least 1", mt[k]);
        if (has && r->max_tokens < 0) r->max_tokens = iv;
    }
    if (get_int(r->root, "seed", &r->seed, &r->has_seed, e)) return -1;
    if (get_bool(r->root, "stream", &r->stream, e)) return -1;
    const json_t *so = json_object_get(r->root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return fail(e, "stream_options", "'stream_options' must be an object");
        const json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_boolean(iu) && !json_is_null(iu))
            return fail(e, "stream_options.include_usage",
                        "'stream_options.include_usage' must be a boolean");
        r->include_usage = json_is_true(iu);
    }
    const json_t *stop = json_object_get(r->root, "stop");
    if (stop && !json_is_null(stop)) {
        int ok = json_is_string(stop);
        if (json_is_array(stop) && json_array_size(stop) <= 16) {
            ok = 1;
            for (size_t i = 0; i < json_array_size(stop); i++)
                ok = ok && json_is_string(json_array_get(stop, i)) &&
                     json_string_length(json_array_get(stop, i)) > 0;
        }
        if (!ok)
            return fail(e, "stop", "'stop' must be a string or an array of at most 16 "
                        "non-empty strings");
        r->stop = stop;
    }
    int logprobs = 0;
    if (get_bool(r->root, "logprobs", &logprobs, e)) return -1;
    if (get_int(r->root, "top_logprobs", &iv, &has, e)) return -1;
    if (has && (iv < 0 || iv > 20))
        return fail(e, "top_logprobs", "'top_logprobs' must be between 0 and 20");
    if (has && !logprobs)
        return fail(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return 0;
}

static int check_thinking(struct k3_chat_req *r, struct k3_api_err *e)
{
    static const char *const efforts[] = {"low", "high", "max", NULL};
    r->thinking = 1;
    r->effort = NULL;
    const json_t *ctk = json_object_get(r->root, "chat_template_kwargs");
    if (ctk && !json_is_null(ctk)) {
        if (!json_is_object(ctk))
            return fail(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        const json_t *t = json_object_get(ctk, "thinking");
        if (t && !json_is_null(t)) {
            if (!json_is_boolean(t))
                return fail(e, "chat_template_kwargs.thinking",
                            "'chat_template_kwargs.thinking' must be a boolean");
            if (json_is_false(t)) r->thinking = 0;
        }
    }
    const json_t *re = json_object_get(r->root, "reasoning_effort");
    if (re && !json_is_null(re)) {
        if (str_is(re, "none")) {
            r->thinking = 0;
        } else if (one_of(re, efforts)) {
            r->effort = json_string_value(re);
        } else {
            return fail(e, "reasoning_effort", "'reasoning_effort' must be none, low, high or max");
        }
    }
    const json_t *th = json_object_get(r->root, "thinking");
    if (th && !json_is_null(th)) {
        if (!json_is_object(th))
            return fail(e, "thinking", "'thinking' must be an object such as {\"type\": "
                        "\"enabled\"}");
        const json_t *type = json_object_get(th, "type");
        if (type && !json_is_null(type)) {
            if (str_is(type, "disabled")) r->thinking = 0;
            else if (str_is(type, "enabled")) r->thinking = 1;
            else return fail(e, "thinking.type", "'thinking.type' must be enabled or disabled");
        }
        const json_t *keep = json_object_get(th, "keep");  /* ignored when disabled (KVV) */
        if (r->thinking && keep && !json_is_null(keep) && !str_is(keep, "all"))
            return fail(e, "thinking.keep", "'thinking.keep' supports only \"all\"");
        const json_t *eff = json_object_get(th, "effort");
        if (eff && !json_is_null(eff)) {
            if (!one_of(eff, efforts))
                return fail(e, "thinking.effort", "'thinking.effort' must be low, high or max");
            r->effort = json_string_value(eff);  /* wins over reasoning_effort */
        }
    }
    if (!r->effort) r->effort = "max";
    return 0;
}

static int check_response_format(struct k3_chat_req *r, struct k3_api_err *e)
{
    const json_t *rf = json_object_get(r->root, "response_format");
    r->rf_type = K3_RF_NONE;
    if (!rf || json_is_null(rf)) return 0;
    if (!json_is_object(rf))
        return fail(e, "response_format", "'response_format' must be an object with a type");
    r->response_format = rf;
    const json_t *type = json_object_get(rf, "type");
    if (str_is(type, "text")) { r->rf_type = K3_RF_TEXT; return 0; }
    if (str_is(type, "json_object")) { r->rf_type = K3_RF_JSON_OBJECT; return 0; }
    if (!str_is(type, "json_schema"))
        return fail(e, "response_format.type", "'response_format.type' must be text, "
                    "json_object or json_schema");
    r->rf_type = K3_RF_JSON_SCHEMA;
    const json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return fail(e, "response_format.json_schema", "'response_format.json_schema' is %s: "
                    "it must be an object with name and schema", js ? "not an object" : "missing");
    const json_t *name = json_object_get(js, "name");
    if (!json_is_string(name) || json_string_length(name) == 0)
        return fail(e, "response_format.json_schema.name",
                    "'response_format.json_schema.name' is required (a non-empty string)");
    const json_t *schema = json_object_get(js, "schema");
    if (!schema)
        return fail(e, "response_format.json_schema.schema",
                    "'response_format.json_schema.schema' is required");
    if (!json_is_object(schema))
        return fail(e, "response_format.json_schema.schema",
                    "'response_format.json_schema.schema' must be a JSON Schema object");
    const json_t *strict = json_object_get(js, "strict");
    if (strict && !json_is_boolean(strict))
        return fail(e, "response_format.json_schema.strict",
                    "'response_format.json_schema.strict' must be a boolean");
    r->response_schema = schema;
    return 0;
}

static int check_tool_choice(struct k3_chat_req *r, struct k3_api_err *e)
{
    const json_t *tc = json_object_get(r->root, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    static const char *const modes[] = {"auto", "none", "required", NULL};
    if (json_is_string(tc)) {
        if (!one_of(tc, modes))
            return fail(e, "tool_choice", "'tool_choice' must be auto, none, required or "
                        "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        r->tool_choice = json_string_value(tc);
        if (!strcmp(r->tool_choice, "required") && r->n_tool_names == 0)
            return fail(e, "tool_choice", "'tool_choice' is required but no tools are "
                        "declared: send tools, or use auto or none");
        return 0;
    }
    const json_t *fn = json_object_get(tc, "function");
    if (!json_is_object(tc) || !str_is(json_object_get(tc, "type"), "function") ||
        !json_is_string(json_object_get(fn, "name")))
        return fail(e, "tool_choice", "'tool_choice' must be auto, none, required or "
                    "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    const char *name = json_string_value(json_object_get(fn, "name"));
    for (size_t i = 0; i < r->n_tool_names; i++)
        if (!strcmp(r->tool_names[i], name)) {
            r->tool_choice_name = name;
            return 0;
        }
    return fail(e, "tool_choice.function.name", "'tool_choice.function.name' names '%s', "
                "which is not a declared tool", name);
}

int k3_chat_req_from_json(json_t *root, struct k3_chat_req *r, struct k3_api_err *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    if (!json_is_object(root))
        return fail(e, "", "the request body must be a JSON object");
    r->root = json_incref(root);
    r->messages = json_array();
    const json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        fail(e, "messages", "'messages' must be a non-empty array");
        goto fail;
    }
    const json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (check_tools(r, tools, "tools", e)) goto fail;
        r->tools = tools;
    }
    for (size_t i = 0; i < json_array_size(msgs); i++)
        if (check_message(r, json_array_get(msgs, i), i, r->messages, e)) goto fail;
    if (check_thinking(r, e) || check_sampling(r, e) || check_response_format(r, e) ||
        check_tool_choice(r, e))
        goto fail;
    return 0;
fail:
    k3_chat_req_free(r);
    return -1;
}

int k3_chat_req_parse(const char *body, size_t len, struct k3_chat_req *r, struct k3_api_err *e)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
    if (!root) {
        memset(r, 0, sizeof *r);
        memset(e, 0, sizeof *e);
        return fail(e, "", "the request body is not valid JSON: %s (line %d, column %d)",
                    jerr.text, jerr.line, jerr.column);
    }
    int rc = k3_chat_req_from_json(root, r, e);
    json_decref(root);
    return rc;
}

void k3_chat_req_free(struct k3_chat_req *r)
{
    json_decref(r->messages);
    json_decref(r->root);
    free(r->tool_names);
    memset(r, 0, sizeof *r);
}

struct k3_chat_opts k3_chat_req_opts(const struct k3_chat_req *r)
{
    return (struct k3_chat_opts){
        .thinking = r->thinking,
        .thinking_effort = r->effort,
        .tool_choice = r->tool_choice,
        .response_format = r->response_format,
        .add_generation_prompt = 1,
        .continue_final = r->partial,
    };
}

struct k3_outp_cfg k3_chat_req_outp_cfg(const struct k3_chat_req *r,
                                        const struct k3_chat_prompt *prompt, uint64_t id_seed)
{
    return (struct k3_outp_cfg){
        .thinking = prompt->ends_in_think,
        .drop_calls = r->tool_choice && !strcmp(r->tool_choice, "none"),
        .tool_names = r->tool_names,
        .n_tool_names = r->n_tool_names,
        .id_seed = id_seed,
    };
}

int k3_chat_req_render(const struct k3_chat_req *r, struct k3_chat_prompt *p,
                       struct k3_api_err *e)
{
    struct k3_chat_opts o = k3_chat_req_opts(r);
    struct k3_err err;
    if (k3_chat_render(r->messages, r->tools, &o, p, &err)) return fail(e, "messages", "%s", err.msg);
    return 0;
}

/* s as a JSON string, each invalid UTF-8 subpart replaced by U+FFFD (Python's
 * errors="replace"): jansson quotes a malformed body's bytes in its parse errors, and an
 * error reply must be JSON that any client can read. */
static void err_string(const char *s, struct k3_sbuf *b)
{
    size_t n = strlen(s);
    const uint8_t *u = (const uint8_t *)s;
    if (k3_utf8_valid_prefix(u, n) == n) {
        k3_json_py_string(s, n, b);
        return;
    }
    struct k3_sbuf t = {0};
    for (size_t i = 0; i < n;) {
        int len = k3_utf8_check(u + i, n - i);
        if (len > 0) {
            k3_sbuf_add(&t, s + i, (size_t)len);
            i += (size_t)len;
        } else { /* an invalid subpart, or an incomplete tail (0) */
            k3_sbuf_add(&t, "\xEF\xBF\xBD", 3);
            i += len < 0 ? (size_t)-len : n - i;
        }
    }
    k3_json_py_string(t.p, t.n, b);
    k3_sbuf_free(&t);
}

char *k3_api_err_json(const struct k3_api_err *e)
{
    /* written by hand: jansson refuses strings that are not UTF-8, and an error reply
     * must never fail */
    struct k3_sbuf b = {0};
    k3_sbuf_adds(&b, "{\"error\":{\"message\":");
    err_string(e->message, &b);
    k3_sbuf_adds(&b, ",\"type\":");
    const char *type = e->type[0] ? e->type : "invalid_request_error";
    k3_json_py_string(type, strlen(type), &b);
    k3_sbuf_adds(&b, ",\"param\":");
    if (e->param[0]) err_string(e->param, &b);
    else k3_sbuf_adds(&b, "null");
    k3_sbuf_adds(&b, ",\"code\":null}}");
    return k3_sbuf_take(&b);
}
