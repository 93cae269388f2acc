/* test_anthropic.c - the Anthropic Messages API layer (src/frontend/anthropic.h):
 *   - validation: every malformed body is a 400 with an Anthropic error object whose
 *     message names the Anthropic field, streamed or not; errors of the shared OpenAI path
 *     (tool names, Kimi's sampling policy, the encoder) come back in Anthropic paths;
 *   - mapping: thinking, tool_choice, sampling fields, prefill;
 *   - one rendering path: the same conversation written for each API renders byte for
 *     byte the same prompt and the same ids;
 *   - output: the Message for each stop reason, tool_use input (also for cut arguments);
 *     the SSE events, read back by a strict client (event names, order, contiguous
 *     indices), equal the non-streamed Message under whole, 1-byte, random and per-token
 *     chunkings.
 * Bodies are written with ' for " (J() swaps them) to keep them readable. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anthropic_client.h"
#include "frontend/anthropic.h"
#include "k3_test.h"

static struct k3_tok *tok;

/* ' -> " (the bodies below hold no apostrophes of their own) */
static char *J(const char *s)
{
    char *t = strdup(s);
    for (char *c = t; *c; c++)
        if (*c == '\'') *c = '"';
    return t;
}

#define HEAD "'model': 'k3-tiny-chat', 'max_tokens': 64, "
#define USER "{'role': 'user', 'content': 'hello'}"
#define TOOL(n) "{'name': '" n "', 'description': 'A tool.', 'input_schema': {'type': 'object', " \
                "'properties': {'city': {'type': 'string'}}}}"

static int parse(const char *body, struct k3_anth_req *r, struct k3_api_err *e)
{
    char *b = J(body);
    int rc = k3_anth_req_parse(b, strlen(b), r, e);
    free(b);
    return rc;
}

/* body is refused with a 400 whose message contains want, the same with "stream": true,
 * and the error object has Anthropic's shape. */
static void rejects(const char *name, const char *body, const char *want)
{
    struct k3_anth_req r;
    struct k3_api_err e;
    int rc = parse(body, &r, &e);
    CHECK_MSG(rc == -1 && e.status == 400, "%s: accepted", name);
    if (!rc) {
        k3_anth_req_free(&r);
        return;
    }
    CHECK_MSG(strstr(e.message, want) != NULL, "%s: message '%s' lacks '%s'", name, e.message,
              want);
    CHECK_MSG(!strstr(e.message, "function.") && !strstr(e.message, "'stop'"),
              "%s: OpenAI path in '%s'", name, e.message);
    char *j = k3_anth_err_json(&e);
    json_t *o = json_loads(j, 0, NULL);
    const json_t *err = json_object_get(o, "error");
    CHECK_MSG(json_object_size(o) == 2 && !strcmp(json_string_value(json_object_get(o, "type")), "error") &&
              !strcmp(json_string_value(json_object_get(err, "type")), "invalid_request_error") &&
              json_is_string(json_object_get(err, "message")), "%s: error object %s", name, j);
    json_decref(o);
    free(j);
    /* stream plays no part in validation (the server answers before any SSE header) */
    char *b = J(body);
    json_t *v = json_loads(b, 0, NULL);
    free(b);
    if (json_is_object(v) && !json_object_get(v, "stream")) {
        json_object_set_new(v, "stream", json_true());
        struct k3_api_err e2;
        CHECK_MSG(k3_anth_req_from_json(v, &r, &e2) == -1 && !strcmp(e2.message, e.message),
                  "%s: stream changes the answer", name);
    }
    json_decref(v);
}

static void accepts(const char *name, const char *body, struct k3_anth_req *r)
{
    struct k3_api_err e;
    int rc = parse(body, r, &e);
    CHECK_MSG(rc == 0, "%s: refused: %s", name, e.message);
    if (rc) memset(r, 0, sizeof *r);
}

static void test_validation(void)
{
    rejects("not JSON", "{'model': ", "not valid JSON");
    rejects("not an object", "[1, 2]", "JSON object");
    /* jansson quotes the bad bytes; the error object must still be UTF-8 JSON (fuzz find) */
    rejects("invalid UTF-8 in a bad escape", "{'model': '\\u8fd\xc9\xa3u56'}", "not valid JSON");
    rejects("no model", "{'max_tokens': 5, 'messages': [" USER "]}", "model is required");
    rejects("model not a string", "{'model': 3, 'max_tokens': 5, 'messages': [" USER "]}", "model");
    rejects("no max_tokens", "{'model': 'm', 'messages': [" USER "]}", "max_tokens is required");
    rejects("max_tokens 0", "{'model': 'm', 'max_tokens': 0, 'messages': [" USER "]}", "max_tokens");
    rejects("max_tokens string", "{'model': 'm', 'max_tokens': '5', 'messages': [" USER "]}",
            "max_tokens");
    rejects("no messages", "{" HEAD "'system': 'x'}", "messages must be a non-empty array");
    rejects("empty messages", "{" HEAD "'messages': []}", "messages must be a non-empty array");
    rejects("message not object", "{" HEAD "'messages': [3]}", "messages[0] must be an object");
    rejects("system role", "{" HEAD "'messages': [{'role': 'system', 'content': 'x'}]}",
            "messages[0].role");
    rejects("no role", "{" HEAD "'messages': [{'content': 'x'}]}", "messages[0].role");
    rejects("content number", "{" HEAD "'messages': [{'role': 'user', 'content': 3}]}",
            "messages[0].content must be a string or an array");
    rejects("no content", "{" HEAD "'messages': [{'role': 'user'}]}", "messages[0].content");
    rejects("image", "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': 'image', "
            "'source': {'type': 'base64', 'media_type': 'image/png', 'data': 'AA=='}}]}]}",
            "messages[0].content[0]: \"image\" blocks are not supported");
    rejects("document", "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': 'document'}]}]}",
            "not supported");
    rejects("unknown block", "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': 'video'}]}]}",
            "messages[0].content[0].type \"video\" is not a supported block type");
    rejects("block not object", "{" HEAD "'messages': [{'role': 'user', 'content': ['hi']}]}",
            "messages[0].content[0] must be an object");
    rejects("text not string", "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': "
            "'text', 'text': 5}]}]}", "messages[0].content[0].text must be a string");
    rejects("tool_use in user", "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': "
            "'tool_use', 'id': 'a', 'name': 'f', 'input': {}}]}]}", "belong in assistant messages");
    rejects("thinking in user", "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': "
            "'thinking', 'thinking': 'x', 'signature': ''}]}]}", "belong in assistant messages");
    rejects("tool_result in assistant", "{" HEAD "'messages': [" USER ", {'role': 'assistant', "
            "'content': [{'type': 'tool_result', 'tool_use_id': 'a'}]}, " USER "]}",
            "messages[1].content[0]: tool_result blocks belong in user messages");
    rejects("tool_result without id", "{" HEAD "'messages': [{'role': 'user', 'content': "
            "[{'type': 'tool_result', 'content': 'x'}]}]}", "messages[0].content[0].tool_use_id");
    rejects("is_error string", "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': "
            "'tool_result', 'tool_use_id': 'a', 'is_error': 'yes'}]}]}", "is_error must be a boolean");
    rejects("tool_result image", "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': "
            "'tool_result', 'tool_use_id': 'a', 'content': [{'type': 'image'}]}]}]}",
            "messages[0].content[0].content[0]: \"image\" blocks are not supported");
    rejects("tool_result content number", "{" HEAD "'messages': [{'role': 'user', 'content': "
            "[{'type': 'tool_result', 'tool_use_id': 'a', 'content': 7}]}]}",
            "content must be a string or an array of text blocks");
    rejects("thinking without text", "{" HEAD "'messages': [" USER ", {'role': 'assistant', "
            "'content': [{'type': 'thinking', 'signature': 's'}]}, " USER "]}",
            "messages[1].content[0].thinking must be a string");
    rejects("signature number", "{" HEAD "'messages': [" USER ", {'role': 'assistant', "
            "'content': [{'type': 'thinking', 'thinking': 'a', 'signature': 1}]}, " USER "]}",
            "signature must be a string");
    rejects("redacted without data", "{" HEAD "'messages': [" USER ", {'role': 'assistant', "
            "'content': [{'type': 'redacted_thinking'}]}, " USER "]}", "data must be a string");
    rejects("tool_use input string", "{" HEAD "'messages': [" USER ", {'role': 'assistant', "
            "'content': [{'type': 'tool_use', 'id': 't1', 'name': 'f', 'input': '{}'}]}, " USER "]}",
            "messages[1].content[0].input must be an object");
    rejects("tool_use without id", "{" HEAD "'messages': [" USER ", {'role': 'assistant', "
            "'content': [{'type': 'tool_use', 'name': 'f', 'input': {}}]}, " USER "]}",
            "messages[1].content[0].id");
    rejects("prefill with tool_use", "{" HEAD "'messages': [" USER ", {'role': 'assistant', "
            "'content': [{'type': 'tool_use', 'id': 't1', 'name': 'f', 'input': {}}]}]}",
            "assistant prefill");
    rejects("system number", "{" HEAD "'system': 5, 'messages': [" USER "]}", "system must be");
    rejects("system image block", "{" HEAD "'system': [{'type': 'image'}], 'messages': [" USER "]}",
            "system[0]");
    rejects("system block type", "{" HEAD "'system': [{'type': 'tool_result'}], 'messages': ["
            USER "]}", "system[0].type must be \"text\"");
    rejects("tools not array", "{" HEAD "'tools': {}, 'messages': [" USER "]}", "tools must be an array");
    rejects("tool not object", "{" HEAD "'tools': [1], 'messages': [" USER "]}", "tools[0] must be an object");
    rejects("tool without schema", "{" HEAD "'tools': [{'name': 'f'}], 'messages': [" USER "]}",
            "tools[0].input_schema is required");
    rejects("tool schema array", "{" HEAD "'tools': [{'name': 'f', 'input_schema': []}], "
            "'messages': [" USER "]}", "tools[0].input_schema is required");
    rejects("tool without name", "{" HEAD "'tools': [{'input_schema': {}}], 'messages': [" USER "]}",
            "tools[0].name must be a string");
    rejects("server tool", "{" HEAD "'tools': [{'type': 'web_search_20250305', 'name': 'web_search'}], "
            "'messages': [" USER "]}", "server tools are not supported");
    /* the shared path's rules, reported with Anthropic paths */
    rejects("tool name digit", "{" HEAD "'tools': [" TOOL("9f") "], 'messages': [" USER "]}",
            "tools[0].name' is not a valid tool name");
    rejects("tool name @", "{" HEAD "'tools': [" TOOL("a@b") "], 'messages': [" USER "]}",
            "tools[0].name");
    rejects("duplicate tools", "{" HEAD "'tools': [" TOOL("f") ", " TOOL("f") "], 'messages': ["
            USER "]}", "declared more than once");
    rejects("tool_choice string", "{" HEAD "'tools': [" TOOL("f") "], 'tool_choice': 'auto', "
            "'messages': [" USER "]}", "tool_choice must be");
    rejects("tool_choice bogus", "{" HEAD "'tools': [" TOOL("f") "], 'tool_choice': {'type': "
            "'required'}, 'messages': [" USER "]}", "tool_choice must be");
    rejects("any without tools", "{" HEAD "'tool_choice': {'type': 'any'}, 'messages': [" USER "]}",
            "needs tools");
    rejects("tool undeclared", "{" HEAD "'tools': [" TOOL("f") "], 'tool_choice': {'type': "
            "'tool', 'name': 'g'}, 'messages': [" USER "]}", "'g' is not one of the declared");
    rejects("tool without name", "{" HEAD "'tools': [" TOOL("f") "], 'tool_choice': {'type': "
            "'tool'}, 'messages': [" USER "]}", "tool_choice.name");
    rejects("disable_parallel string", "{" HEAD "'tools': [" TOOL("f") "], 'tool_choice': {'type': "
            "'auto', 'disable_parallel_tool_use': 1}, 'messages': [" USER "]}", "must be a boolean");
    rejects("thinking no budget", "{" HEAD "'thinking': {'type': 'enabled'}, 'messages': [" USER "]}",
            "budget_tokens");
    rejects("thinking small budget", "{'model': 'm', 'max_tokens': 4096, 'thinking': {'type': "
            "'enabled', 'budget_tokens': 1000}, 'messages': [" USER "]}", "at least 1024");
    rejects("budget over max_tokens", "{'model': 'm', 'max_tokens': 2000, 'thinking': {'type': "
            "'enabled', 'budget_tokens': 2000}, 'messages': [" USER "]}", "less than max_tokens");
    rejects("thinking bogus", "{" HEAD "'thinking': {'type': 'on'}, 'messages': [" USER "]}",
            "thinking must be");
    rejects("thinking string", "{" HEAD "'thinking': 'enabled', 'messages': [" USER "]}",
            "thinking must be");
    rejects("temperature 1.5", "{" HEAD "'temperature': 1.5, 'messages': [" USER "]}",
            "'temperature' must be between 0 and 1");
    rejects("temperature string", "{" HEAD "'temperature': 'hot', 'messages': [" USER "]}",
            "'temperature' must be a number");
    rejects("top_p 0.5", "{" HEAD "'top_p': 0.5, 'messages': [" USER "]}", "'top_p' is fixed at 0.95");
    rejects("top_k -1", "{" HEAD "'top_k': -1, 'messages': [" USER "]}", "top_k must be");
    rejects("top_k real", "{" HEAD "'top_k': 1.5, 'messages': [" USER "]}", "top_k must be");
    rejects("stop not array", "{" HEAD "'stop_sequences': 'x', 'messages': [" USER "]}",
            "stop_sequences must be");
    rejects("stop empty string", "{" HEAD "'stop_sequences': [''], 'messages': [" USER "]}",
            "stop_sequences must be");
    rejects("stop 17", "{" HEAD "'stop_sequences': ['a','b','c','d','e','f','g','h','i','j','k',"
            "'l','m','n','o','p','q'], 'messages': [" USER "]}", "at most 16");
    rejects("output_config string", "{" HEAD "'output_config': 'x', 'messages': [" USER "]}",
            "output_config must be an object");
    rejects("effort bogus", "{" HEAD "'output_config': {'effort': 'huge'}, 'messages': [" USER "]}",
            "output_config.effort");
    rejects("format not json_schema", "{" HEAD "'output_config': {'format': {'type': 'text'}}, "
            "'messages': [" USER "]}", "output_config.format");
    rejects("metadata array", "{" HEAD "'metadata': [], 'messages': [" USER "]}", "metadata");
    rejects("metadata user_id", "{" HEAD "'metadata': {'user_id': 3}, 'messages': [" USER "]}",
            "metadata.user_id");
    rejects("stream string", "{" HEAD "'stream': 'yes', 'messages': [" USER "]}", "'stream' must be a boolean");
    rejects("seed real", "{" HEAD "'seed': 1.5, 'messages': [" USER "]}", "'seed' must be an integer");

    /* a long non-ASCII type name is cut at a character boundary in the message */
    struct k3_sbuf big = {0};
    k3_sbuf_adds(&big, "{" HEAD "'messages': [{'role': 'user', 'content': [{'type': '");
    for (int i = 0; i < 400; i++) k3_sbuf_adds(&big, "\xe4\xbd\xa0");
    k3_sbuf_adds(&big, "'}]}]}");
    rejects("long type name", big.p, "is not a supported block type");
    k3_sbuf_free(&big);
}

/* The encoder's complaints come back with the Anthropic path of the message. */
static void test_render_errors(void)
{
    struct k3_anth_req r;
    struct k3_api_err e;
    /* a tool_result no call answers, with nothing to name its tool */
    accepts("orphan tool_result", "{" HEAD "'messages': [" USER ", {'role': 'assistant', "
            "'content': 'ok'}, {'role': 'user', 'content': [{'type': 'text', 'text': 'a'}, "
            "{'type': 'tool_result', 'tool_use_id': 'nope', 'content': 'x'}]}]}", &r);
    struct k3_chat_prompt p;
    CHECK(k3_anth_req_render(&r, &p, &e) == -1);
    CHECK_MSG(strstr(e.message, "messages[2].content[1]") != NULL, "render error: %s", e.message);
    CHECK(e.status == 400);
    k3_anth_req_free(&r);
}

static void test_mapping(void)
{
    struct k3_anth_req r;
    accepts("plain", "{" HEAD "'messages': [" USER "]}", &r);
    CHECK(r.chat.thinking == 0);  /* Anthropic's default: no extended thinking */
    CHECK(r.chat.max_tokens == 64 && !strcmp(r.model, "k3-tiny-chat") && r.top_k == 0);
    CHECK(r.chat.temperature == 0.6 && r.chat.top_p == 0.95 && !r.chat.stream);
    CHECK(!r.chat.tool_choice && !r.chat.stop && !r.chat.has_seed);
    k3_anth_req_free(&r);

    accepts("thinking", "{'model': 'm', 'max_tokens': 4096, 'thinking': {'type': 'enabled', "
            "'budget_tokens': 1024}, 'messages': [" USER "]}", &r);
    CHECK(r.chat.thinking == 1 && !strcmp(r.chat.effort, "max") && r.chat.temperature == 1.0);
    k3_anth_req_free(&r);
    accepts("adaptive", "{" HEAD "'thinking': {'type': 'adaptive'}, 'messages': [" USER "]}", &r);
    CHECK(r.chat.thinking == 1);
    k3_anth_req_free(&r);
    accepts("disabled", "{" HEAD "'thinking': {'type': 'disabled'}, 'messages': [" USER "]}", &r);
    CHECK(r.chat.thinking == 0);
    k3_anth_req_free(&r);
    accepts("between_tools + effort", "{" HEAD "'thinking': {'type': 'between_tools'}, "
            "'output_config': {'effort': 'medium'}, 'messages': [" USER "]}", &r);
    CHECK(r.chat.thinking == 1 && !strcmp(r.chat.effort, "high"));
    k3_anth_req_free(&r);
    accepts("effort xhigh", "{" HEAD "'thinking': {'type': 'adaptive'}, 'output_config': "
            "{'effort': 'xhigh'}, 'messages': [" USER "]}", &r);
    CHECK(r.chat.thinking == 1 && !strcmp(r.chat.effort, "max"));
    k3_anth_req_free(&r);
    accepts("effort low", "{" HEAD "'thinking': {'type': 'adaptive'}, 'output_config': "
            "{'effort': 'low'}, 'messages': [" USER "]}", &r);
    CHECK(!strcmp(r.chat.effort, "low"));
    k3_anth_req_free(&r);
    accepts("format", "{" HEAD "'output_config': {'format': {'type': 'json_schema', 'schema': "
            "{'type': 'object', 'properties': {'a': {'type': 'integer'}}}}}, 'messages': [" USER "]}", &r);
    CHECK(r.chat.rf_type == K3_RF_JSON_SCHEMA &&
          json_is_object(json_object_get(r.chat.response_schema, "properties")));
    k3_anth_req_free(&r);

    accepts("sampling", "{" HEAD "'temperature': 0.3, 'top_p': 0.95, 'top_k': 40, 'seed': 7, "
            "'stop_sequences': ['END', '###'], 'stream': true, 'metadata': {'user_id': 'u'}, "
            "'service_tier': 'auto', 'messages': [" USER "]}", &r);
    CHECK(r.chat.temperature == 0.3 && r.top_k == 40 && r.chat.has_seed && r.chat.seed == 7);
    CHECK(r.chat.stream == 1 && json_array_size(r.chat.stop) == 2);
    CHECK(json_integer_value(json_object_get(r.chat.root, "top_k")) == 40);
    k3_anth_req_free(&r);

    static const char *const choice[][2] = {{"auto", "auto"}, {"any", "required"},
                                            {"none", "none"}, {"tool', 'name': 'g", "required"}};
    for (int i = 0; i < 4; i++) {
        char body[512];
        snprintf(body, sizeof body, "{" HEAD "'tools': [" TOOL("f") ", " TOOL("g") "], "
                 "'tool_choice': {'type': '%s', 'disable_parallel_tool_use': true}, "
                 "'messages': [" USER "]}", choice[i][0]);
        accepts(choice[i][0], body, &r);
        CHECK_MSG(r.chat.tool_choice && !strcmp(r.chat.tool_choice, choice[i][1]),
                  "tool_choice %s -> %s", choice[i][0], r.chat.tool_choice);
        CHECK(r.tool_choice_named == (i == 3) && r.chat.n_tool_names == 2);
        k3_anth_req_free(&r);
    }

    /* translation: system blocks, split user turns, assistant blocks, prefill */
    accepts("translation", "{" HEAD "'system': [{'type': 'text', 'text': 'S1'}, {'type': 'text', "
            "'text': 'S2', 'cache_control': {'type': 'ephemeral'}}], 'tools': [" TOOL("f") "], "
            "'messages': [" USER ", {'role': 'assistant', 'content': [{'type': 'thinking', "
            "'thinking': 'T1', 'signature': 'sig'}, {'type': 'redacted_thinking', 'data': 'x'}, "
            "{'type': 'thinking', 'thinking': 'T2', 'signature': ''}, {'type': 'text', 'text': "
            "'A'}, {'type': 'tool_use', 'id': 'toolu_1', 'name': 'f', 'input': {'city': 'Oslo'}}]}, "
            "{'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': 'toolu_1', "
            "'content': [{'type': 'text', 'text': 'R'}], 'is_error': true}, {'type': 'text', "
            "'text': 'U2'}]}, {'role': 'assistant', 'content': 'Pre'}]}", &r);
    char *got = json_dumps(r.chat.messages, JSON_COMPACT);
    char *want = J("[{'role':'system','content':[{'type':'text','text':'S1'},{'type':'text',"
                   "'text':'S2'}]},{'role':'user','content':'hello'},{'role':'assistant',"
                   "'content':[{'type':'text','text':'A'}],'reasoning_content':'T1\\nT2',"
                   "'tool_calls':[{'id':'toolu_1','type':'function','function':{'name':'f',"
                   "'arguments':{'city':'Oslo'}}}]},{'role':'tool','tool_call_id':'toolu_1',"
                   "'content':[{'type':'text','text':'R'}]},{'role':'user','content':[{'type':"
                   "'text','text':'U2'}]},{'role':'assistant','content':'Pre','partial':true}]");
    json_t *a = json_loads(got, 0, NULL), *b = json_loads(want, 0, NULL);
    CHECK_MSG(json_equal(a, b), "translated messages\n got %s\nwant %s", got, want);
    CHECK(r.chat.partial == 1);
    json_decref(a);
    json_decref(b);
    free(got);
    free(want);
    k3_anth_req_free(&r);

    CHECK(!strcmp(k3_anth_err_type(400), "invalid_request_error"));
    CHECK(!strcmp(k3_anth_err_type(401), "authentication_error"));
    CHECK(!strcmp(k3_anth_err_type(404), "not_found_error"));
    CHECK(!strcmp(k3_anth_err_type(413), "request_too_large"));
    CHECK(!strcmp(k3_anth_err_type(529), "overloaded_error"));
    CHECK(!strcmp(k3_anth_err_type(500), "api_error"));
    CHECK(k3_anth_status(503) == 529 && k3_anth_status(400) == 400);
    char *j = k3_anth_err_json_msg(529, "busy \"now\"");
    CHECK_MSG(!strcmp(j, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
                         "\"message\":\"busy \\\"now\\\"\"}}"), "%s", j);
    free(j);
}

/* ---- one rendering path ------------------------------------------------------------- */

/* The Anthropic body and the OpenAI body render to the same prompt text and ids. */
static void same_prompt(const char *name, const char *anth, const char *openai)
{
    struct k3_anth_req ar;
    struct k3_chat_req cr;
    struct k3_api_err e;
    accepts(name, anth, &ar);
    char *ob = J(openai);
    int rc = k3_chat_req_parse(ob, strlen(ob), &cr, &e);
    free(ob);
    CHECK_MSG(rc == 0, "%s: OpenAI body refused: %s", name, e.message);
    if (rc || !ar.openai) {
        if (!rc) k3_chat_req_free(&cr);
        k3_anth_req_free(&ar);
        return;
    }
    struct k3_chat_prompt pa, po;
    CHECK(k3_anth_req_render(&ar, &pa, &e) == 0);
    CHECK(k3_chat_req_render(&cr, &po, &e) == 0);
    struct k3_tok_ids ia = {0}, io = {0};
    size_t na = k3_chat_prompt_encode(tok, &pa, &ia), no = k3_chat_prompt_encode(tok, &po, &io);
    CHECK_MSG(pa.text.n == po.text.n && !memcmp(pa.text.p, po.text.p, pa.text.n),
              "%s: prompts differ\n--- anthropic\n%s\n--- openai\n%s", name, pa.text.p, po.text.p);
    CHECK_MSG(na == no && ia.n == io.n && !memcmp(ia.ids, io.ids, ia.n * sizeof *ia.ids),
              "%s: ids differ (%zu/%zu ids, prompt_tokens %zu/%zu)", name, ia.n, io.n, na, no);
    CHECK(ia.n > 10);
    struct k3_outp_cfg ca = k3_chat_req_outp_cfg(&ar.chat, &pa, 1),
                       co = k3_chat_req_outp_cfg(&cr, &po, 1);
    CHECK_MSG(ca.thinking == co.thinking && ca.drop_calls == co.drop_calls &&
              ca.n_tool_names == co.n_tool_names, "%s: parser configs differ", name);
    CHECK(ar.chat.temperature == cr.temperature && ar.chat.max_tokens == cr.max_tokens);
    k3_tok_ids_free(&ia);
    k3_tok_ids_free(&io);
    k3_chat_prompt_free(&pa);
    k3_chat_prompt_free(&po);
    k3_chat_req_free(&cr);
    k3_anth_req_free(&ar);
}

static void test_same_prompt(void)
{
    same_prompt("system + user",
                "{" HEAD "'system': 'You are terse.', 'messages': [{'role': 'user', 'content': "
                "'What is 2+2?'}]}",
                "{'model': 'm', 'max_tokens': 64, 'thinking': {'type': 'disabled'}, 'messages': "
                "[{'role': 'system', 'content': 'You are terse.'}, {'role': 'user', 'content': "
                "'What is 2+2?'}]}");
    same_prompt("agent loop with thinking and tools",
                "{'model': 'm', 'max_tokens': 8192, 'thinking': {'type': 'enabled', "
                "'budget_tokens': 2048}, 'system': [{'type': 'text', 'text': 'Be helpful.'}], "
                "'tools': [" TOOL("get_weather") ", {'name': 'get_time', 'input_schema': {'type': "
                "'object'}}], 'tool_choice': {'type': 'any'}, 'messages': [{'role': 'user', "
                "'content': [{'type': 'text', 'text': 'Weather in Oslo and the time?'}]}, "
                "{'role': 'assistant', 'content': [{'type': 'thinking', 'thinking': 'Two calls.', "
                "'signature': 'abc'}, {'type': 'text', 'text': 'Checking.'}, {'type': 'tool_use', "
                "'id': 'toolu_a', 'name': 'get_weather', 'input': {'city': 'Oslo', 'days': 2, "
                "'units': null}}, {'type': 'tool_use', 'id': 'toolu_b', 'name': 'get_time', "
                "'input': {}}]}, {'role': 'user', 'content': [{'type': 'tool_result', "
                "'tool_use_id': 'toolu_b', 'content': '12:00'}, {'type': 'tool_result', "
                "'tool_use_id': 'toolu_a', 'content': [{'type': 'text', 'text': 'Rain, 4 C'}]}]}, "
                "{'role': 'assistant', 'content': 'Rain and noon.'}, {'role': 'user', 'content': "
                "'Thanks! 你好'}]}",
                "{'model': 'm', 'max_tokens': 8192, 'tools': [{'type': 'function', 'function': "
                "{'name': 'get_weather', 'description': 'A tool.', 'parameters': {'type': "
                "'object', 'properties': {'city': {'type': 'string'}}}}}, {'type': 'function', "
                "'function': {'name': 'get_time', 'parameters': {'type': 'object'}}}], "
                "'tool_choice': 'required', 'messages': [{'role': 'system', 'content': "
                "'Be helpful.'}, {'role': 'user', 'content': 'Weather in Oslo and the time?'}, "
                "{'role': 'assistant', 'reasoning_content': 'Two calls.', 'content': 'Checking.', "
                "'tool_calls': [{'id': 'toolu_a', 'type': 'function', 'function': {'name': "
                "'get_weather', 'arguments': '{\\'city\\': \\'Oslo\\', \\'days\\': 2, "
                "\\'units\\': null}'}}, {'id': 'toolu_b', 'type': 'function', 'function': "
                "{'name': 'get_time', 'arguments': '{}'}}]}, {'role': 'tool', 'tool_call_id': "
                "'toolu_b', 'content': '12:00'}, {'role': 'tool', 'tool_call_id': 'toolu_a', "
                "'content': 'Rain, 4 C'}, {'role': 'assistant', 'content': 'Rain and noon.'}, "
                "{'role': 'user', 'content': 'Thanks! 你好'}]}");
    same_prompt("prefill",
                "{" HEAD "'messages': [" USER ", {'role': 'assistant', 'content': 'Sure: {'}]}",
                "{'model': 'm', 'max_tokens': 64, 'thinking': {'type': 'disabled'}, 'messages': ["
                "{'role': 'user', 'content': 'hello'}, {'role': 'assistant', 'content': "
                "'Sure: {', 'partial': true}]}");
    same_prompt("prefill inside thinking",
                "{'model': 'm', 'max_tokens': 4096, 'thinking': {'type': 'enabled', "
                "'budget_tokens': 1024}, 'messages': [" USER ", {'role': 'assistant', "
                "'content': [{'type': 'thinking', 'thinking': 'Let me see', 'signature': ''}]}]}",
                "{'model': 'm', 'max_tokens': 4096, 'messages': [{'role': 'user', 'content': "
                "'hello'}, {'role': 'assistant', 'reasoning_content': 'Let me see', 'content': "
                "'', 'partial': true}]}");
    same_prompt("effort and output format",
                "{'model': 'm', 'max_tokens': 64, 'thinking': {'type': 'adaptive'}, 'output_config': "
                "{'effort': 'low', 'format': {'type': 'json_schema', 'schema': {'type': 'object'}}}, "
                "'messages': [" USER "]}",
                "{'model': 'm', 'max_tokens': 64, 'thinking': {'type': 'enabled', 'effort': 'low'}, "
                "'response_format': {'type': 'json_schema', 'json_schema': {'name': 'output', "
                "'schema': {'type': 'object'}}}, 'messages': [{'role': 'user', 'content': 'hello'}]}");
    same_prompt("tool_choice none, stop, temperature",
                "{" HEAD "'temperature': 0.2, 'stop_sequences': ['X'], 'tools': [" TOOL("f") "], "
                "'tool_choice': {'type': 'none'}, 'messages': [" USER "]}",
                "{'model': 'm', 'max_tokens': 64, 'temperature': 0.2, 'stop': ['X'], "
                "'thinking': {'type': 'disabled'}, 'tools': [{'type': 'function', 'function': "
                "{'name': 'f', 'description': 'A tool.', 'parameters': {'type': 'object', "
                "'properties': {'city': {'type': 'string'}}}}}], 'tool_choice': 'none', "
                "'messages': [{'role': 'user', 'content': 'hello'}]}");
}

/* ---- output ------------------------------------------------------------------------- */

static const char *const names[] = {"get_weather", "get_time", "f"};

/* Parses out (the generated text) with chunking 0 whole, 1 one byte, 2 random, 3 one
 * token per delta; returns the SSE text (malloc'ed) and the parser (for its result). */
static char *stream(const char *out, int thinking, enum k3_outp_end why, int chunking,
                    unsigned seed, struct k3_outp **parser, int *reopened)
{
    struct k3_outp_cfg cfg = {.thinking = thinking, .tool_names = names, .n_tool_names = 3,
                              .id_seed = 99};
    struct k3_outp *p = k3_outp_new(&cfg);
    struct k3_outp_delta d = {0};
    struct k3_sbuf sse = {0};
    struct k3_anth_usage u = {.input_tokens = 17, .output_tokens = 0,
                              .cache_read_input_tokens = 4};
    struct k3_anth_stream *s = k3_anth_stream_new("msg_test", "k3-tiny-chat");
    k3_anth_stream_begin(s, &u, &sse);
    size_t n = strlen(out);
    if (chunking == 3) {
        struct k3_tok_ids ids = {0};
        k3_tok_encode(tok, out, n, K3_TOK_SPECIAL, NULL, &ids);
        struct k3_detok dt;
        k3_detok_init(&dt, tok);
        for (size_t i = 0; i < ids.n; i++) {
            k3_outp_feed_ids(p, &dt, &ids.ids[i], 1, &d);
            k3_anth_stream_feed(s, &d, &sse);
            k3_outp_delta_clear(&d);
            if (i % 7 == 3) k3_anth_sse_ping(&sse);
        }
        char buf[16];
        int m = k3_detok_flush(&dt, buf);
        k3_outp_feed(p, buf, (size_t)m, &d);
        k3_tok_ids_free(&ids);
    } else {
        for (size_t i = 0; i < n;) {
            size_t step = chunking == 0 ? n : chunking == 1 ? 1 : 1 + (size_t)(rand_r(&seed) % 12);
            if (step > n - i) step = n - i;
            k3_outp_feed(p, out + i, step, &d);
            k3_anth_stream_feed(s, &d, &sse);
            k3_outp_delta_clear(&d);
            i += step;
        }
    }
    k3_outp_finish(p, why, &d);
    k3_anth_stream_feed(s, &d, &sse);
    k3_outp_delta_free(&d);
    u.output_tokens = 23;
    k3_anth_stream_end(s, k3_outp_result(p), NULL, &u, &sse);
    *reopened = k3_anth_stream_reopened(s);
    k3_anth_stream_free(s);
    *parser = p;
    return k3_sbuf_take(&sse);
}

static json_t *whole_message(const struct k3_outp_result *res, const char *stop_sequence)
{
    struct k3_anth_usage u = {.input_tokens = 17, .output_tokens = 23,
                              .cache_read_input_tokens = 4};
    char *j = k3_anth_message_json("msg_test", "k3-tiny-chat", res, stop_sequence, &u);
    json_error_t err;
    json_t *v = json_loads(j, 0, &err);
    CHECK_MSG(v != NULL, "message is not JSON: %s: %s", err.text, j);
    free(j);
    return v;
}

/* --emit DIR: each case's events (per-token and one random chunking) and its non-streamed
 * Message go to DIR/NAME.K.sse and DIR/NAME.K.json for check_anthropic_sdk.py, which reads
 * them with the official SDK. */
static const char *emit_dir;

static void emit_case(const char *name, int k, const char *sse, const json_t *whole)
{
    char path[512], base[64];
    snprintf(base, sizeof base, "%s", name);
    for (char *c = base; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'))) *c = '_';
    snprintf(path, sizeof path, "%s/%s.%d.sse", emit_dir, base, k);
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(sse, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s.%d.json", emit_dir, base, k);
    CHECK(json_dump_file(whole, path, JSON_COMPACT) == 0);
}

/* Every chunking's events read back equal the non-streamed message. Returns the message. */
static json_t *stream_checked(const char *name, const char *out, int thinking,
                              enum k3_outp_end why)
{
    json_t *ref = NULL;
    int bad_runs = 0;
    for (int k = 0; k < 44; k++) {
        int chunking = k < 3 ? k + 1 : k == 3 ? 0 : 2;
        struct k3_outp *p;
        int reopened;
        char *sse = stream(out, thinking, why, chunking == 3 ? 3 : chunking, (unsigned)k * 7919u,
                           &p, &reopened);
        json_t *whole = whole_message(k3_outp_result(p), NULL);
        struct client c;
        client_init(&c);
        client_read(&c, sse, strlen(sse));
        if (!c.stopped) bad(&c, "no message_stop");
        int same = !c.bad && json_equal(c.msg, whole) && !reopened;
        if (!same && !bad_runs++) {
            char *a = c.msg ? json_dumps(c.msg, JSON_COMPACT) : strdup("(none)");
            char *b = json_dumps(whole, JSON_COMPACT);
            fprintf(stderr, "%s: chunking %d seed %d: %s\n stream %s\n  whole %s\n%s\n", name,
                    chunking, k, c.bad ? c.why : "differs", a, b, sse);
            free(a);
            free(b);
        }
        if (emit_dir && (k == 2 || k == 5)) emit_case(name, k, sse, whole);
        if (!ref) ref = json_incref(whole);
        else if (!json_equal(ref, whole)) bad_runs++;
        json_decref(whole);
        client_free(&c);
        free(sse);
        k3_outp_free(p);
    }
    CHECK_MSG(bad_runs == 0, "%s: %d chunkings differ", name, bad_runs);
    return ref;
}

#define O "<|open|>"
#define C "<|close|>"
#define S "<|sep|>"
#define END C "message" S "<|end_of_msg|>"

static const json_t *block(const json_t *m, size_t i)
{
    return json_array_get(json_object_get(m, "content"), i);
}

static void test_stream_cases(void)
{
    json_t *m = stream_checked("reasoning + text", "Think about it.\n" C "think" S O "response" S
                               "Hello, \"world\" 你好 🌍\n\ttab" C "response" S END, 1, K3_OUTP_STOP);
    CHECK(json_array_size(json_object_get(m, "content")) == 2);
    CHECK(str_eq(json_object_get(block(m, 0), "type"), "thinking") &&
          str_eq(json_object_get(block(m, 0), "thinking"), "Think about it.\n") &&
          str_eq(json_object_get(block(m, 0), "signature"), ""));
    CHECK(str_eq(json_object_get(block(m, 1), "text"), "Hello, \"world\" 你好 🌍\n\ttab"));
    CHECK(str_eq(json_object_get(m, "stop_reason"), "end_turn") &&
          json_is_null(json_object_get(m, "stop_sequence")));
    CHECK(str_eq(json_object_get(m, "id"), "msg_test") && str_eq(json_object_get(m, "type"), "message") &&
          str_eq(json_object_get(m, "role"), "assistant") &&
          str_eq(json_object_get(m, "model"), "k3-tiny-chat"));
    const json_t *u = json_object_get(m, "usage");
    CHECK(json_integer_value(json_object_get(u, "input_tokens")) == 17 &&
          json_integer_value(json_object_get(u, "output_tokens")) == 23 &&
          json_integer_value(json_object_get(u, "cache_read_input_tokens")) == 4 &&
          json_integer_value(json_object_get(u, "cache_creation_input_tokens")) == 0);
    json_decref(m);

    m = stream_checked("tool calls", "Need tools." C "think" S O "response" S "Checking." C
                       "response" S O "tools" S O "call tool=\"get_weather\" index=\"1\"" S O
                       "argument key=\"city\" type=\"string\"" S "Oslo \"N\"" C "argument" S O
                       "argument key=\"days\" type=\"number\"" S "2" C "argument" S O
                       "argument key=\"opts\" type=\"object\"" S "{\"a\": [1, 2.5, null]}" C
                       "argument" S C "call" S O "call tool=\"get_time\" index=\"2\"" S C "call" S
                       O "call tool=\"undeclared\" index=\"3\"" S C "call" S C "tools" S END,
                       1, K3_OUTP_STOP);
    CHECK(json_array_size(json_object_get(m, "content")) == 4);
    const json_t *t0 = block(m, 2), *t1 = block(m, 3);
    CHECK(str_eq(json_object_get(t0, "type"), "tool_use") &&
          str_eq(json_object_get(t0, "name"), "get_weather") &&
          !strncmp(json_string_value(json_object_get(t0, "id")), "toolu_", 6) &&
          strlen(json_string_value(json_object_get(t0, "id"))) == 30);
    json_t *want = json_loads("{\"city\": \"Oslo \\\"N\\\"\", \"days\": 2, \"opts\": {\"a\": [1, 2.5, null]}}",
                              0, NULL);
    CHECK(json_equal(json_object_get(t0, "input"), want));
    json_decref(want);
    CHECK(str_eq(json_object_get(t1, "name"), "get_time") &&
          json_object_size(json_object_get(t1, "input")) == 0 &&
          json_is_object(json_object_get(t1, "input")));
    CHECK(strcmp(json_string_value(json_object_get(t0, "id")), json_string_value(json_object_get(t1, "id"))));
    CHECK(str_eq(json_object_get(m, "stop_reason"), "tool_use"));
    json_decref(m);

    m = stream_checked("instant", "Just text." C "response" S END, 0, K3_OUTP_STOP);
    CHECK(json_array_size(json_object_get(m, "content")) == 1 &&
          str_eq(json_object_get(block(m, 0), "type"), "text"));
    json_decref(m);

    m = stream_checked("empty thinking", C "think" S O "response" S "x" C "response" S END, 1,
                       K3_OUTP_STOP);
    CHECK(json_array_size(json_object_get(m, "content")) == 1);
    json_decref(m);

    m = stream_checked("nothing", END, 0, K3_OUTP_STOP);
    CHECK(json_array_size(json_object_get(m, "content")) == 0 &&
          str_eq(json_object_get(m, "stop_reason"), "end_turn"));
    json_decref(m);

    m = stream_checked("cut in reasoning", "Long thought that never", 1, K3_OUTP_LENGTH);
    CHECK(str_eq(json_object_get(m, "stop_reason"), "max_tokens") &&
          json_array_size(json_object_get(m, "content")) == 1);
    json_decref(m);

    /* a call cut by max_tokens: the members complete so far */
    m = stream_checked("cut in a call", O "response" S "ok" C "response" S O "tools" S O
                       "call tool=\"f\" index=\"1\"" S O "argument key=\"a\" type=\"number\"" S
                       "1" C "argument" S O "argument key=\"b\" type=\"string\"" S "unfini",
                       0, K3_OUTP_LENGTH);
    CHECK(str_eq(json_object_get(m, "stop_reason"), "max_tokens"));
    want = json_loads("{\"a\": 1}", 0, NULL);
    CHECK(json_equal(json_object_get(block(m, 1), "input"), want));
    json_decref(want);
    json_decref(m);

    /* cut right after a number argument: the number counts (as the SDK's reader has it) */
    m = stream_checked("cut after a number", O "tools" S O "call tool=\"f\" index=\"1\"" S O
                       "argument key=\"a\" type=\"number\"" S "12" C "argument" S O "argu",
                       0, K3_OUTP_LENGTH);
    want = json_loads("{\"a\": 12}", 0, NULL);
    CHECK(json_equal(json_object_get(block(m, 0), "input"), want));
    json_decref(want);
    json_decref(m);

    /* a raw json block that is not an object: {} */
    m = stream_checked("json block not an object", O "tools" S O "call tool=\"f\" index=\"1\"" S
                       O "json type=\"object\"" S "[1, 2]" C "json" S C "call" S C "tools" S END,
                       0, K3_OUTP_STOP);
    CHECK(json_object_size(json_object_get(block(m, 0), "input")) == 0);
    json_decref(m);

    /* stop_sequence */
    struct k3_outp_cfg cfg = {.id_seed = 1};
    struct k3_outp *p = k3_outp_new(&cfg);
    struct k3_outp_delta d = {0};
    k3_outp_feed(p, "abc", 3, &d);
    k3_outp_finish(p, K3_OUTP_STOP, &d);
    m = whole_message(k3_outp_result(p), "###");
    CHECK(str_eq(json_object_get(m, "stop_reason"), "stop_sequence") &&
          str_eq(json_object_get(m, "stop_sequence"), "###"));
    json_decref(m);
    k3_outp_delta_free(&d);
    k3_outp_free(p);
}

/* Out of format: think reopened after the response. One token per delta (the server's
 * path) streams it as a second thinking block after the text, and the writer says so. */
static void test_reopened(void)
{
    struct k3_outp *p;
    int reopened;
    char *sse = stream("A" C "think" S O "response" S "B" C "response" S O "think" S "C" C
                       "think" S END, 1, K3_OUTP_STOP, 3, 0, &p, &reopened);
    struct client c;
    client_init(&c);
    client_read(&c, sse, strlen(sse));
    CHECK_MSG(!c.bad, "%s", c.why);
    CHECK(reopened == 1 && json_array_size(json_object_get(c.msg, "content")) == 3);
    CHECK(str_eq(json_object_get(block(c.msg, 2), "thinking"), "C"));
    client_free(&c);
    free(sse);
    k3_outp_free(p);
}

static void input_is(const char *args, const char *want)
{
    json_t *v = k3_anth_tool_input(args, strlen(args)), *w = json_loads(want, 0, NULL);
    char *got = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_MSG(json_equal(v, w), "input of '%s' is %s, want %s", args, got, want);
    free(got);
    json_decref(v);
    json_decref(w);
}

static void test_tool_input(void)
{
    input_is("{\"a\": 1}", "{\"a\": 1}");
    input_is("{}", "{}");
    input_is("", "{}");
    input_is("not json", "{}");
    input_is("[1, 2]", "{}");
    input_is("\"s\"", "{}");
    input_is("{", "{}");
    input_is("{\"a\": \"x\", \"b\": \"unfin", "{\"a\": \"x\"}");
    input_is("{\"a\": \"x\", \"b\"", "{\"a\": \"x\"}");
    input_is("{\"a\": \"x\", \"b\": ", "{\"a\": \"x\"}");
    input_is("{\"a\": [1, 2", "{\"a\": [1, 2]}");
    input_is("{\"a\": [1, 2,", "{\"a\": [1, 2]}");
    input_is("{\"a\": {\"b\": true}, \"c\": tr", "{\"a\": {\"b\": true}}");
    input_is("{\"a\": {\"b\": [{\"c\": \"q\\\"}", "{\"a\": {\"b\": [{}]}}");
    input_is("{\"k\\\"ey\": \"v\", \"n\": 12", "{\"k\\\"ey\": \"v\", \"n\": 12}");
    input_is("{\"a\": 1} trailing", "{}");
    input_is("{\"a\": [], \"b\": {}, ", "{\"a\": [], \"b\": {}}");
    input_is("]]]}}}", "{}");
    input_is("{\"a\": 1.", "{}");
    input_is("{\"a\": -", "{}");
    input_is("{\"a\": nul", "{}");
    input_is("{\"a\": null", "{\"a\": null}");
    input_is("{\"a\": true", "{\"a\": true}");
    input_is("{\"a\": 1e", "{}");
    input_is("{\"a\": 1e5", "{\"a\": 100000.0}");
    input_is("{\"a\": -0", "{\"a\": 0}");
    input_is("{\"a\": [1,]", "{}");
    input_is("{\"a\" 1", "{}");
    input_is("{\"a\": hello}", "{}");
    input_is("{\"a\": {}, \"b\": [[", "{\"a\": {}, \"b\": [[]]}");
    input_is("{\"a\": \"x\"}}", "{}");
    input_is("  {\"a\": 2", "{\"a\": 2}");

    char id[K3_ANTH_ID_BYTES];
    k3_anth_tool_id("call_abcdefghijklmnopqrstuvwx", id);
    CHECK(!strcmp(id, "toolu_abcdefghijklmnopqrstuvwx"));
    char m1[K3_ANTH_ID_BYTES], m2[K3_ANTH_ID_BYTES];
    k3_anth_msg_id(1, m1);
    k3_anth_msg_id(2, m2);
    CHECK(!strncmp(m1, "msg_", 4) && strlen(m1) == 28 && strcmp(m1, m2));

    struct k3_sbuf b = {0};
    k3_anth_sse_error(529, "Overloaded", &b);
    CHECK(!strcmp(b.p, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
                       "\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"));
    k3_sbuf_free(&b);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--emit")) emit_dir = argv[2];
    struct k3_err err;
    if (k3_tok_load_files(&tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "test_anthropic: %s\n", err.msg);
        return 1;
    }
    test_validation();
    test_render_errors();
    test_mapping();
    test_same_prompt();
    test_stream_cases();
    test_reopened();
    test_tool_input();
    k3_tok_free(tok);
    return k3_test_summary();
}
