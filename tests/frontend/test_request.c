/* test_request.c - request validation: every KVV rule (research/frontend.md §4.2 and the
 * verifier's tests/k3_features, tests/params) gives 400 with an OpenAI error object naming
 * the parameter, streamed or not; the requests KVV expects to succeed are accepted; the
 * mapping of thinking and effort. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/request.h"
#include "k3_test.h"

#define USER "{\"role\": \"user\", \"content\": \"hello\"}"
#define TOOL(name) "{\"type\": \"function\", \"function\": {\"name\": \"" name "\", \"description\": " \
                   "\"A tool.\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}"
#define SYS_TOOLS(tools) "{\"role\": \"system\", \"content\": \"\", \"tools\": [" tools "]}"

/* Parses body as given and with "stream": true added; both must agree. Returns 0/-1. */
static int parse2(const char *body, struct k3_api_err *e)
{
    struct k3_chat_req r;
    int rc = k3_chat_req_parse(body, strlen(body), &r, e);
    if (!rc) k3_chat_req_free(&r);
    json_t *j = json_loads(body, 0, NULL);
    if (!j || json_object_get(j, "stream")) {  /* not JSON, or sets stream itself */
        json_decref(j);
        return rc;
    }
    json_object_set_new(j, "stream", json_true());
    char *s = json_dumps(j, 0);
    struct k3_api_err e2;
    int rc2 = k3_chat_req_parse(s, strlen(s), &r, &e2);
    if (!rc2) k3_chat_req_free(&r);
    CHECK_MSG(rc == rc2 && (rc == 0 || !strcmp(e->param, e2.param)), "stream changes: %s", body);
    free(s);
    json_decref(j);
    return rc;
}

static void rejects(const char *name, const char *body, const char *param)
{
    struct k3_api_err e;
    int rc = parse2(body, &e);
    CHECK_MSG(rc == -1 && e.status == 400, "%s: accepted", name);
    if (rc) {
        CHECK_MSG(strstr(e.param, param) != NULL, "%s: param '%s', expected '%s' (%s)", name,
                  e.param, param, e.message);
        char *j = k3_api_err_json(&e);
        json_t *o = json_loads(j, 0, NULL);
        const json_t *err = json_object_get(o, "error");
        CHECK_MSG(json_is_string(json_object_get(err, "message")) &&
                  !strcmp(json_string_value(json_object_get(err, "type")), "invalid_request_error") &&
                  (param[0] ? json_is_string(json_object_get(err, "param"))
                            : json_is_null(json_object_get(err, "param"))) &&
                  json_is_null(json_object_get(err, "code")), "%s: error object %s", name, j);
        json_decref(o);
        free(j);
    }
}

static void accepts(const char *name, const char *body)
{
    struct k3_api_err e;
    int rc = parse2(body, &e);
    CHECK_MSG(rc == 0, "%s: rejected: %s: %s", name, e.param, e.message);
}

static void test_kvv_dynamic_tools(void)
{
    accepts("dynamic first", "{\"messages\": [" SYS_TOOLS(TOOL("get_weather")) ", " USER "]}");
    accepts("dynamic last", "{\"messages\": [" USER ", " SYS_TOOLS(TOOL("get_weather")) "]}");
    accepts("three in one", "{\"messages\": [" SYS_TOOLS(TOOL("a") "," TOOL("b") "," TOOL("c")) ", " USER "]}");
    accepts("two messages", "{\"messages\": [" SYS_TOOLS(TOOL("a")) ", " SYS_TOOLS(TOOL("b")) ", " USER "]}");
    accepts("global + dynamic", "{\"tools\": [" TOOL("g") "], \"messages\": [" SYS_TOOLS(TOOL("d")) ", " USER "]}");
    accepts("required with only dynamic tools", "{\"tool_choice\": \"required\", \"messages\": ["
            SYS_TOOLS(TOOL("get_weather")) ", " USER "]}");
    accepts("content null with tools", "{\"messages\": [{\"role\": \"system\", \"content\": null, "
            "\"tools\": [" TOOL("a") "]}, " USER "]}");
    rejects("tools on user", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"tools\": ["
            TOOL("w") "]}, " USER "]}", "messages[0].tools");
    rejects("tools on assistant", "{\"messages\": [" USER ", {\"role\": \"assistant\", \"content\": "
            "\"hello\", \"tools\": [" TOOL("w") "]}, " USER "]}", "messages[1].tools");
    rejects("content with tools", "{\"messages\": [{\"role\": \"system\", \"content\": \"not empty\", "
            "\"tools\": [" TOOL("w") "]}, " USER "]}", "messages[0].tools");
    rejects("missing type", "{\"messages\": [" SYS_TOOLS("{\"function\": {\"name\": \"g\"}}") ", " USER "]}",
            "messages[0].tools[0].type");
    rejects("missing function", "{\"messages\": [" SYS_TOOLS("{\"type\": \"function\"}") ", " USER "]}",
            "messages[0].tools[0].function");
    rejects("missing name", "{\"messages\": [" SYS_TOOLS("{\"type\": \"function\", \"function\": "
            "{\"description\": \"d\"}}") ", " USER "]}", "messages[0].tools[0].function.name");
    rejects("name starts with digit", "{\"messages\": [" SYS_TOOLS(TOOL("1bad_name")) ", " USER "]}",
            "function.name");
    rejects("name with @", "{\"messages\": [" SYS_TOOLS(TOOL("bad@name")) ", " USER "]}", "function.name");
    rejects("empty name", "{\"messages\": [" SYS_TOOLS(TOOL("")) ", " USER "]}", "function.name");
    char name257[258], body[1024];
    memset(name257, 'a', 257);
    name257[257] = 0;
    snprintf(body, sizeof body, "{\"messages\": [" SYS_TOOLS("{\"type\": \"function\", \"function\": "
             "{\"name\": \"%s\"}}") ", " USER "]}", name257);
    rejects("name 257 chars", body, "function.name");
    name257[256] = 0;
    snprintf(body, sizeof body, "{\"messages\": [" SYS_TOOLS("{\"type\": \"function\", \"function\": "
             "{\"name\": \"%s\"}}") ", " USER "]}", name257);
    accepts("name 256 chars", body);
    rejects("bogus type", "{\"messages\": [" SYS_TOOLS("{\"type\": \"bogus\", \"function\": {\"name\": "
            "\"x\"}}") ", " USER "]}", "messages[0].tools[0].type");
    rejects("valid + bogus", "{\"messages\": [" SYS_TOOLS(TOOL("good_tool") ", {\"type\": \"bogus\", "
            "\"function\": {\"name\": \"x\"}}") ", " USER "]}", "messages[0].tools[1].type");
    rejects("tools not array", "{\"messages\": [{\"role\": \"system\", \"content\": \"\", \"tools\": "
            "{\"type\": \"function\"}}, " USER "]}", "messages[0].tools");
    rejects("tool item not object", "{\"messages\": [" SYS_TOOLS("null") ", " USER "]}",
            "messages[0].tools[0]");
    rejects("duplicate in message", "{\"messages\": [" SYS_TOOLS(TOOL("dup") "," TOOL("dup")) ", " USER "]}",
            "messages[0].tools[1].function.name");
    rejects("duplicate across messages", "{\"messages\": [" SYS_TOOLS(TOOL("dup")) ", "
            SYS_TOOLS(TOOL("dup")) ", " USER "]}", "messages[1].tools[0].function.name");
    rejects("duplicate global and dynamic", "{\"tools\": [" TOOL("dup") "], \"messages\": ["
            SYS_TOOLS(TOOL("dup")) ", " USER "]}", "messages[0].tools[0].function.name");
    rejects("tool role without tool_call_id", "{\"messages\": [{\"role\": \"tool\", \"content\": "
            "\"some tool result\"}, " USER "]}", "messages[0].tool_call_id");
    rejects("request tools not array", "{\"tools\": {}, \"messages\": [" USER "]}", "tools");
    rejects("request tool bad name", "{\"tools\": [" TOOL("a b") "], \"messages\": [" USER "]}",
            "tools[0].function.name");
}

#define SCHEMA "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}"

static void test_kvv_response_format(void)
{
    accepts("text", "{\"messages\": [" USER "], \"response_format\": {\"type\": \"text\"}}");
    accepts("json_object", "{\"messages\": [" USER "], \"response_format\": {\"type\": \"json_object\"}}");
    accepts("json_schema strict", "{\"messages\": [" USER "], \"response_format\": {\"type\": "
            "\"json_schema\", \"json_schema\": {\"name\": \"w\", \"strict\": true, \"schema\": " SCHEMA "}}}");
    accepts("json_schema non-strict", "{\"messages\": [" USER "], \"response_format\": {\"type\": "
            "\"json_schema\", \"json_schema\": {\"name\": \"w\", \"strict\": false, \"schema\": " SCHEMA "}}}");
    rejects("bogus type", "{\"messages\": [" USER "], \"response_format\": {\"type\": \"bogus\"}}",
            "response_format.type");
    rejects("missing name", "{\"messages\": [" USER "], \"response_format\": {\"type\": \"json_schema\", "
            "\"json_schema\": {\"schema\": {\"type\": \"object\"}}}}", "response_format.json_schema.name");
    rejects("missing schema", "{\"messages\": [" USER "], \"response_format\": {\"type\": \"json_schema\", "
            "\"json_schema\": {\"name\": \"x\"}}}", "response_format.json_schema.schema");
    rejects("missing json_schema", "{\"messages\": [" USER "], \"response_format\": {\"type\": "
            "\"json_schema\"}}", "response_format.json_schema");
    rejects("strict not bool", "{\"messages\": [" USER "], \"response_format\": {\"type\": \"json_schema\", "
            "\"json_schema\": {\"name\": \"x\", \"strict\": \"yes\", \"schema\": {\"type\": \"object\"}}}}",
            "response_format.json_schema.strict");
    rejects("schema not object", "{\"messages\": [" USER "], \"response_format\": {\"type\": \"json_schema\", "
            "\"json_schema\": {\"name\": \"x\", \"schema\": \"string\"}}}", "response_format.json_schema.schema");
}

static void test_kvv_tool_choice(void)
{
    accepts("auto", "{\"tools\": [" TOOL("w") "], \"tool_choice\": \"auto\", \"messages\": [" USER "]}");
    accepts("none", "{\"tools\": [" TOOL("w") "], \"tool_choice\": \"none\", \"messages\": [" USER "]}");
    accepts("required", "{\"tools\": [" TOOL("w") "], \"tool_choice\": \"required\", \"messages\": [" USER "]}");
    accepts("none without tools", "{\"tool_choice\": \"none\", \"messages\": [" USER "]}");
    accepts("auto without tools", "{\"tool_choice\": \"auto\", \"messages\": [" USER "]}");
    accepts("named function (ignored)", "{\"tools\": [" TOOL("w") "], \"tool_choice\": {\"type\": "
            "\"function\", \"function\": {\"name\": \"w\"}}, \"messages\": [" USER "]}");
    rejects("required without tools", "{\"tool_choice\": \"required\", \"messages\": [" USER "]}",
            "tool_choice");
    rejects("required with tools []", "{\"tools\": [], \"tool_choice\": \"required\", \"messages\": ["
            USER "]}", "tool_choice");
    rejects("bogus", "{\"tools\": [" TOOL("w") "], \"tool_choice\": \"bogus\", \"messages\": [" USER "]}",
            "tool_choice");
}

static void test_kvv_params(void)
{
    const char *modes[] = {"\"thinking\": {\"type\": \"enabled\"}", "\"thinking\": {\"type\": \"disabled\"}",
                           "\"chat_template_kwargs\": {\"thinking\": true}",
                           "\"chat_template_kwargs\": {\"thinking\": false}"};
    static const struct { const char *kv, *param; int ok; } params[] = {
        {"\"temperature\": 0.0", "", 1}, {"\"temperature\": 0.6", "", 1},
        {"\"temperature\": 1.0", "", 1}, {"\"temperature\": 1.1", "temperature", 0},
        {"\"temperature\": 2.0", "temperature", 0}, {"\"temperature\": -0.1", "temperature", 0},
        {"\"top_p\": 0.95", "", 1}, {"\"top_p\": 0.8", "top_p", 0},
        {"\"presence_penalty\": 0", "", 1}, {"\"presence_penalty\": 0.5", "presence_penalty", 0},
        {"\"frequency_penalty\": 0", "", 1}, {"\"frequency_penalty\": 0.5", "frequency_penalty", 0},
        {"\"n\": 1", "", 1}, {"\"n\": 2", "n", 0},
    };
    char body[512];
    for (int m = 0; m < 4; m++) {
        snprintf(body, sizeof body, "{\"messages\": [" USER "], %s}", modes[m]);
        accepts("no params", body);
        for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
            snprintf(body, sizeof body, "{\"messages\": [" USER "], %s, %s}", modes[m], params[i].kv);
            if (params[i].ok) accepts(params[i].kv, body);
            else rejects(params[i].kv, body, params[i].param);
        }
    }
}

static void test_thinking_mapping(void)
{
    struct { const char *extra; int thinking; const char *effort; } cases[] = {
        {"", 1, "max"},
        {", \"thinking\": {\"keep\": \"all\"}", 1, "max"},
        {", \"thinking\": {\"type\": \"enabled\", \"keep\": \"all\", \"effort\": \"high\"}", 1, "high"},
        {", \"thinking\": {\"effort\": \"low\"}, \"reasoning_effort\": \"max\"", 1, "low"},
        {", \"reasoning_effort\": \"high\"", 1, "high"},
        {", \"reasoning_effort\": \"none\"", 0, NULL},
        {", \"thinking\": {\"type\": \"disabled\", \"keep\": \"bogus\"}", 0, NULL},
        {", \"chat_template_kwargs\": {\"thinking\": false}", 0, NULL},
    };
    char body[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, "{\"messages\": [" USER "]%s}", cases[i].extra);
        struct k3_chat_req r;
        struct k3_api_err e;
        int rc = k3_chat_req_parse(body, strlen(body), &r, &e);
        CHECK_MSG(rc == 0, "%s: %s", body, e.message);
        if (rc) continue;
        CHECK_MSG(r.thinking == cases[i].thinking, "%s: thinking %d", body, r.thinking);
        if (cases[i].effort) CHECK_MSG(!strcmp(r.effort, cases[i].effort), "%s: effort %s", body, r.effort);
        k3_chat_req_free(&r);
    }
    rejects("keep not all", "{\"messages\": [" USER "], \"thinking\": {\"type\": \"enabled\", \"keep\": "
            "\"last\"}}", "thinking.keep");
    rejects("effort medium", "{\"messages\": [" USER "], \"thinking\": {\"effort\": \"medium\"}}",
            "thinking.effort");
    rejects("reasoning_effort bogus", "{\"messages\": [" USER "], \"reasoning_effort\": \"extreme\"}",
            "reasoning_effort");
    rejects("thinking type bogus", "{\"messages\": [" USER "], \"thinking\": {\"type\": \"on\"}}",
            "thinking.type");
}

static void test_messages(void)
{
    rejects("not JSON", "{\"messages\": [", "");
    rejects("not an object", "[1, 2]", "");
    rejects("no messages", "{\"model\": \"k3\"}", "messages");
    rejects("empty messages", "{\"messages\": []}", "messages");
    rejects("message not object", "{\"messages\": [42]}", "messages[0]");
    rejects("bad role", "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "messages[0].role");
    rejects("user without content", "{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content");
    rejects("content number", "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content");
    rejects("image part", "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", "
            "\"image_url\": {\"url\": \"data:image/png;base64,AAAA\"}}]}]}", "messages[0].content[0].type");
    rejects("part without text", "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
            "messages[0].content[0].text");
    rejects("arguments array", "{\"messages\": [" USER ", {\"role\": \"assistant\", \"tool_calls\": "
            "[{\"id\": \"a\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
            "\"[1]\"}}]}]}", "messages[1].tool_calls[0].function.arguments");
    rejects("tool_calls on user", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": []}]}",
            "messages[0].tool_calls");
    accepts("partial prefill", "{\"messages\": [" USER ", {\"role\": \"assistant\", \"content\": \"inc\", "
            "\"partial\": true}]}");
    rejects("partial not last", "{\"messages\": [{\"role\": \"assistant\", \"content\": \"inc\", "
            "\"partial\": true}, " USER "]}", "messages[0].partial");
    rejects("partial with tool_calls", "{\"messages\": [" USER ", {\"role\": \"assistant\", "
            "\"partial\": true, \"tool_calls\": [{\"id\": \"a\", \"type\": \"function\", "
            "\"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}]}", "messages[1].partial");
    rejects("reasoning not string", "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", "
            "\"reasoning_content\": 3}]}", "messages[0].reasoning_content");
    rejects("max_tokens 0", "{\"messages\": [" USER "], \"max_tokens\": 0}", "max_tokens");
    rejects("stream not bool", "{\"messages\": [" USER "], \"stream\": \"yes\"}", "stream");
    rejects("stop not strings", "{\"messages\": [" USER "], \"stop\": [1]}", "stop");
    accepts("developer", "{\"messages\": [{\"role\": \"developer\", \"content\": \"d\"}, " USER "]}");
    accepts("assistant null content", "{\"messages\": [" USER ", {\"role\": \"assistant\", \"content\": null, "
            "\"tool_calls\": [{\"id\": \"a\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
            "\"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"a\", \"content\": \"r\"}]}");
    accepts("stream options", "{\"messages\": [" USER "], \"stream\": true, \"stream_options\": "
            "{\"include_usage\": true}, \"max_tokens\": 5, \"seed\": 3, \"stop\": [\"x\"]}");
    /* a malformed body never crashes: deep nesting, NUL bytes, huge numbers */
    char deep[4096 * 2 + 64];
    size_t k = 0;
    k += (size_t)sprintf(deep, "{\"messages\": ");
    for (int i = 0; i < 3000; i++) deep[k++] = '[';
    for (int i = 0; i < 3000; i++) deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = 0;
    rejects("deep nesting", deep, "");
    rejects("huge integer", "{\"messages\": [" USER "], \"n\": 99999999999999999999999}", "");
    /* an error message cut inside a UTF-8 sequence still gives a valid JSON error object
     * (found by fuzz_request: the error writer refused the half character) */
    struct k3_sbuf big = {0};
    k3_sbuf_adds(&big, "{\"messages\": [{\"role\": \"x");
    for (int i = 0; i < 1000; i++) k3_sbuf_adds(&big, "\xc3\xa9");
    k3_sbuf_adds(&big, "\", \"content\": \"c\"}]}");
    rejects("long non-ASCII role", big.p, "messages[0].role");
    k3_sbuf_free(&big);
    const char nul[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}";
    accepts("NUL inside content", nul);
}

/* The request drives the output parser: thinking, tool_choice none, declared names. */
static void test_outp_cfg(void)
{
    const char *body = "{\"tools\": [" TOOL("g") "], \"tool_choice\": \"none\", \"messages\": ["
                       SYS_TOOLS(TOOL("d")) ", " USER "], \"reasoning_effort\": \"none\"}";
    struct k3_chat_req r;
    struct k3_api_err e;
    CHECK(k3_chat_req_parse(body, strlen(body), &r, &e) == 0);
    struct k3_chat_prompt pr;
    CHECK(k3_chat_req_render(&r, &pr, &e) == 0);
    struct k3_outp_cfg c = k3_chat_req_outp_cfg(&r, &pr, 9);
    k3_chat_prompt_free(&pr);
    CHECK(c.thinking == 0 && c.drop_calls == 1 && c.n_tool_names == 2);
    CHECK(c.n_tool_names == 2 && !strcmp(c.tool_names[0], "g") && !strcmp(c.tool_names[1], "d"));
    k3_chat_req_free(&r);
    body = "{\"messages\": [" SYS_TOOLS(TOOL("d")) ", " USER "]}";
    CHECK(k3_chat_req_parse(body, strlen(body), &r, &e) == 0);
    CHECK(k3_chat_req_render(&r, &pr, &e) == 0);
    c = k3_chat_req_outp_cfg(&r, &pr, 9);
    k3_chat_prompt_free(&pr);
    CHECK(c.thinking == 1 && c.drop_calls == 0 && c.n_tool_names == 1);
    /* a call to the dynamic tool parses, an undeclared one is dropped */
    struct k3_outp *p = k3_outp_new(&c);
    struct k3_outp_delta d = {0};
    const char *out = "x<|open|>call tool=\"d\"<|sep|><|close|>call<|sep|><|open|>call tool=\"g\"<|sep|>"
                      "<|close|>call<|sep|><|end_of_msg|>";
    k3_outp_feed(p, out, strlen(out), &d);
    k3_outp_finish(p, K3_OUTP_STOP, &d);
    CHECK(k3_outp_result(p)->n_calls == 1 && k3_outp_result(p)->n_dropped_calls == 1);
    k3_outp_delta_free(&d);
    k3_outp_free(p);
    k3_chat_req_free(&r);
}

/* An error object is valid UTF-8 JSON whatever bytes the message quotes: jansson quotes a
 * malformed body's bytes in its parse errors. */
static void test_error_utf8(void)
{
    struct k3_api_err e = {.status = 400};
    snprintf(e.message, sizeof e.message, "bad \xff\xfe byte, cut \xe2\x82");
    snprintf(e.param, sizeof e.param, "messages[0].\xc0\xaf");
    char *j = k3_api_err_json(&e);
    json_error_t je;
    json_t *o = json_loads(j, 0, &je); /* jansson refuses invalid UTF-8 */
    CHECK(o != NULL);
    const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    CHECK(m && strcmp(m, "bad \xef\xbf\xbd\xef\xbf\xbd byte, cut \xef\xbf\xbd") == 0);
    const char *pm = json_string_value(json_object_get(json_object_get(o, "error"), "param"));
    CHECK(pm && strcmp(pm, "messages[0].\xef\xbf\xbd\xef\xbf\xbd") == 0);
    json_decref(o);
    free(j);
    /* a body that is not UTF-8 */
    struct k3_chat_req r;
    const char body[] = "{\"model\": \"k\xff\xfe\", \"messages\": []}";
    CHECK(k3_chat_req_parse(body, sizeof body - 1, &r, &e) != 0 && e.status == 400);
    j = k3_api_err_json(&e);
    o = json_loads(j, 0, &je);
    CHECK(o != NULL);
    json_decref(o);
    free(j);
}

int main(void)
{
    test_error_utf8();
    test_outp_cfg();
    test_kvv_dynamic_tools();
    test_kvv_response_format();
    test_kvv_tool_choice();
    test_kvv_params();
    test_thinking_mapping();
    test_messages();
    return k3_test_summary();
}
