/* test_dispatch.c - the server without sockets (k3_srv_dispatch) over a real tokenizer and
 * scheduler, with a fake model on a step thread whose output is a fixed K3 answer (reasoning,
 * content, one tool call) encoded with the Kimi tokenizer, then filler tokens. Checks:
 * routing (404, 405 + Allow), the body limit (413), the API key (401), model 404, invalid
 * JSON, every KVV rule of kvv_rules.json with and without stream (status 400 and the
 * error's param before any stream, or success), the streamed deltas == the non-streamed
 * message, usage (prompt_tokens without the 3-id stub), stop strings, include_usage,
 * a client that leaves mid-stream frees its slot and blocks, 429 when full, 503 while
 * draining, /metrics, completions, tokenize / detokenize, context_length_exceeded. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "engine/scheduler.h"
#include "frontend/tokenizer.h"
#include "k3_test.h"
#include "server/route.h"
#include "server/server.h"

static const char *const ANSWER =
    "Let me think about Paris.<|close|>think<|sep|><|open|>response<|sep|>Checking the weather, "
    "world.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"0\"<|sep|>"
    "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>"
    "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";

struct fake {
    struct k3_sched *sched;
    struct k3_srv *srv;
    struct k3_tok_ids answer;
    int32_t filler;       /* after the answer: never a stop */
    atomic_int endless;   /* 1: only filler (streams that never end by themselves) */
    atomic_int stop;
    pthread_t th;
};

static void *step_thread(void *arg)
{
    struct fake *f = arg;
    struct k3_step_plan plan;
    k3_plan_init(&plan);
    struct k3_sampled got[64];
    while (!atomic_load(&f->stop)) {
        if (!k3_sched_wait(f->sched, 0.005)) continue;
        k3_sched_build(f->sched, &plan);
        int n = 0;
        for (int i = 0; i < plan.n_seqs && n < 64; i++) {
            const struct k3_plan_seq *s = &plan.seqs[i];
            if (!(s->flags & K3_SEQ_SAMPLE)) continue;
            int k = s->pos0 + s->n_new - s->sampling.n_prompt; /* index of the token to sample */
            int32_t t = !atomic_load(&f->endless) && k >= 0 && (size_t)k < f->answer.n ? f->answer.ids[k] : f->filler;
            got[n++] = (struct k3_sampled){.seq = i, .token = t, .logprob = -0.5f, .n_top = s->sampling.n_logprobs};
        }
        k3_sched_complete(f->sched, &plan, got, n);
        k3_srv_on_step(f->srv, &plan, 0.001);
        if (atomic_load(&f->endless)) usleep(2000); /* a stream a client can leave mid-way */
    }
    k3_plan_free(&plan);
    return NULL;
}

static struct k3_tok *tok;
static struct fake fk;

static struct k3_srv *make_srv(const char *key, int max_active, int context)
{
    struct k3_srv_cfg c = {.model_name = "k3-test", .api_key = key, .max_body_bytes = 64 * 1024,
                           .max_active = max_active, .context_tokens = context, .vocab_size = k3_tok_n_vocab(tok),
                           .policy = K3_SRV_POLICY_KIMI, .request_timeout_s = 30, .shutdown_grace_s = 0.2};
    struct k3_srv *s;
    struct k3_err err;
    K3_CHECK(!k3_srv_init(&s, &c, tok, fk.sched, &err), "%s", err.msg);
    return s;
}

struct resp {
    int status;
    json_t *json;         /* the body (or the last stream's data chunks as an array) */
    char *text;
    const char *allow;
};

static struct resp call(struct k3_srv *s, const char *method, const char *path, const char *body,
                        const char *auth)
{
    struct k3_srv_header h[2] = {{"Content-Type", "application/json"}, {"Authorization", auth}};
    struct k3_srv_req rq = {method, path, h, auth ? 2 : 1, body, body ? strlen(body) : 0};
    struct k3_srv_resp r;
    k3_srv_dispatch(s, &rq, &r);
    struct resp out = {.status = r.status};
    for (int i = 0; i < r.n_headers; i++)
        if (!strcmp(r.headers[i].name, "Allow")) out.allow = r.headers[i].value;
    struct k3_sbuf all = {0};
    if (r.stream.next) {
        struct k3_sbuf b = {0};
        int rc;
        do {
            rc = r.stream.next(r.stream.ctx, &b, 1.0);
        } while (rc >= 0);
        k3_sbuf_add(&all, b.p, b.n);
        k3_sbuf_free(&b);
        r.stream.close(r.stream.ctx, 0);
        r.stream.close = NULL;
        /* the SSE data lines as a JSON array ([DONE] as null) */
        out.json = json_array();
        for (char *line = strtok(all.p, "\n"); line; line = strtok(NULL, "\n")) {
            if (strncmp(line, "data: ", 6)) continue;
            json_array_append_new(out.json, strcmp(line + 6, "[DONE]") ? json_loads(line + 6, 0, NULL) : json_null());
        }
    } else {
        out.text = strdup(r.body.p ? r.body.p : "");
        out.json = json_loads(out.text, 0, NULL);
    }
    k3_sbuf_free(&all);
    k3_srv_resp_free(&r);
    return out;
}

static void resp_free(struct resp *r)
{
    json_decref(r->json);
    free(r->text);
}

static const char *err_field(const struct resp *r, const char *k)
{
    return json_string_value(json_object_get(json_object_get(r->json, "error"), k));
}

static void test_routes(void)
{
    struct k3_srv *s = make_srv("s3cret", 8, 4096);
    struct resp r = call(s, "GET", "/nope", NULL, NULL);
    CHECK_MSG(r.status == 404 && err_field(&r, "message"), "unknown route: %d", r.status);
    resp_free(&r);
    r = call(s, "GET", "/v1/chat/completions", NULL, "Bearer s3cret");
    CHECK_MSG(r.status == 405 && r.allow && !strcmp(r.allow, "POST"), "GET chat: %d", r.status);
    resp_free(&r);
    r = call(s, "POST", "/v1/models", "{}", "Bearer s3cret");
    CHECK_MSG(r.status == 405 && r.allow && !strcmp(r.allow, "GET"), "POST models: %d", r.status);
    resp_free(&r);
    r = call(s, "GET", "/v1/models", NULL, NULL);
    CHECK_MSG(r.status == 401 && !strcmp(err_field(&r, "type"), "authentication_error"), "no key: %d", r.status);
    resp_free(&r);
    r = call(s, "GET", "/v1/models", NULL, "Bearer wrong");
    CHECK_MSG(r.status == 401, "wrong key: %d", r.status);
    resp_free(&r);
    r = call(s, "GET", "/v1/models", NULL, "Bearer s3cret");
    CHECK_MSG(r.status == 200 && !strcmp(json_string_value(json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "id")), "k3-test"),
              "models: %d %s", r.status, r.text);
    resp_free(&r);
    r = call(s, "GET", "/health", NULL, NULL);
    CHECK_MSG(r.status == 200, "health is open: %d", r.status);
    resp_free(&r);
    char *big = malloc(70 * 1024);
    memset(big, ' ', 70 * 1024 - 1);
    big[70 * 1024 - 1] = 0;
    r = call(s, "POST", "/v1/chat/completions", big, "Bearer s3cret");
    CHECK_MSG(r.status == 413 && err_field(&r, "message"), "big body: %d", r.status);
    resp_free(&r);
    free(big);
    k3_srv_free(s);

    s = make_srv(NULL, 8, 4096);
    r = call(s, "POST", "/v1/chat/completions", "{\"messages\": [", NULL);
    CHECK_MSG(r.status == 400 && !strcmp(err_field(&r, "type"), "invalid_request_error"), "bad JSON: %d", r.status);
    resp_free(&r);
    r = call(s, "POST", "/v1/chat/completions", "{\"model\": \"gpt-4\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", NULL);
    CHECK_MSG(r.status == 404 && !strcmp(err_field(&r, "code"), "model_not_found"), "unknown model: %d", r.status);
    resp_free(&r);
    k3_srv_free(s);
}

/* Every KVV rule, with and without stream: 400 + param, or 200. */
static void test_kvv_rules(const char *path)
{
    json_error_t je;
    json_t *rules = json_load_file(path, 0, &je);
    CHECK_MSG(rules != NULL, "%s: %s", path, je.text);
    if (!rules) return;
    struct k3_srv *s = make_srv(NULL, 64, 4096);
    json_t *cases = json_array(); /* [name, body, param] */
    size_t i, j;
    json_t *m, *pr;
    json_array_foreach(json_object_get(rules, "modes"), i, m) json_array_foreach(json_object_get(rules, "params"), j, pr)
    {
        json_t *body = json_pack("{s:s,s:[{s:s,s:s}]}", "model", "k3-test", "messages", "role", "user", "content", "hi");
        json_object_update(body, m);
        json_object_update(body, json_array_get(pr, 0));
        json_array_append_new(cases, json_pack("[s,o,O]", "params", body, json_array_get(pr, 1)));
    }
    json_t *rq;
    json_array_foreach(json_object_get(rules, "requests"), i, rq)
        json_array_append_new(cases, json_pack("[s,O,O]", json_string_value(json_object_get(rq, "name")),
                                               json_object_get(rq, "body"), json_object_get(rq, "param")));
    int n_checked = 0;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        for (int stream = 0; stream < 2; stream++) {
            json_t *body = json_deep_copy(json_array_get(c, 1));
            json_object_set_new(body, "max_tokens", json_integer(2));
            json_object_set_new(body, "stream", json_boolean(stream));
            char *text = json_dumps(body, JSON_COMPACT);
            struct resp r = call(s, "POST", "/v1/chat/completions", text, NULL);
            const json_t *want = json_array_get(c, 2);
            const char *name = json_string_value(json_array_get(c, 0));
            if (json_is_string(want)) {
                const char *param = err_field(&r, "param");
                CHECK_MSG(r.status == 400 && r.text && param && strstr(param, json_string_value(want)) &&
                          !strcmp(err_field(&r, "type"), "invalid_request_error"),
                          "%s (stream %d): %d %s; want 400 on %s", name, stream, r.status, r.text ? r.text : "(a stream)",
                          json_string_value(want));
            } else {
                CHECK_MSG(r.status == 200, "%s (stream %d): %d %s", name, stream, r.status, r.text ? r.text : "");
            }
            n_checked++;
            resp_free(&r);
            free(text);
            json_decref(body);
        }
    }
    printf("KVV rules: %d requests checked through dispatch\n", n_checked);
    json_decref(cases);
    json_decref(rules);
    k3_srv_free(s);
}

#define TOOLS "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": " \
              "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]"

/* The accumulated stream (as an OpenAI client would rebuild it) equals the message. */
static void test_stream_equals_whole(void)
{
    struct k3_srv *s = make_srv(NULL, 8, 4096);
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}], " TOOLS ", \"seed\": 7, "
                       "\"max_tokens\": 200, \"logprobs\": true, \"top_logprobs\": 0%s}";
    char b1[1024], b2[1024];
    snprintf(b1, sizeof b1, body, "");
    snprintf(b2, sizeof b2, body, ", \"stream\": true, \"stream_options\": {\"include_usage\": true}");
    struct resp w = call(s, "POST", "/v1/chat/completions", b1, NULL);
    struct resp st = call(s, "POST", "/v1/chat/completions", b2, NULL);
    CHECK_MSG(w.status == 200 && st.status == 200, "%d %d", w.status, st.status);
    const json_t *ch = json_array_get(json_object_get(w.json, "choices"), 0), *msg = json_object_get(ch, "message");
    struct k3_sbuf reas = {0}, cont = {0}, args = {0};
    const char *finish = NULL, *call_id = NULL, *name = NULL, *role = NULL;
    const json_t *usage = NULL;
    size_t i, n_lp = 0;
    json_t *chunk;
    int done_last = json_is_null(json_array_get(st.json, json_array_size(st.json) - 1));
    json_array_foreach(st.json, i, chunk)
    {
        if (json_is_null(chunk)) continue;
        const json_t *c = json_array_get(json_object_get(chunk, "choices"), 0);
        if (json_is_object(json_object_get(chunk, "usage"))) usage = json_object_get(chunk, "usage");
        if (!c) continue;
        const json_t *d = json_object_get(c, "delta");
        if (json_object_get(d, "role")) role = json_string_value(json_object_get(d, "role"));
        const char *t;
        if ((t = json_string_value(json_object_get(d, "reasoning_content")))) k3_sbuf_adds(&reas, t);
        if ((t = json_string_value(json_object_get(d, "content")))) k3_sbuf_adds(&cont, t);
        const json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        if (tc) {
            if (json_object_get(tc, "id")) call_id = json_string_value(json_object_get(tc, "id"));
            const json_t *fn = json_object_get(tc, "function");
            if (json_object_get(fn, "name")) name = json_string_value(json_object_get(fn, "name"));
            k3_sbuf_adds(&args, json_string_value(json_object_get(fn, "arguments")));
        }
        n_lp += json_array_size(json_object_get(json_object_get(c, "logprobs"), "content"));
        if (json_is_string(json_object_get(c, "finish_reason"))) finish = json_string_value(json_object_get(c, "finish_reason"));
    }
    const json_t *call0 = json_array_get(json_object_get(msg, "tool_calls"), 0);
    CHECK_MSG(role && !strcmp(role, "assistant") && done_last, "first delta role, last [DONE]");
    CHECK_MSG(reas.p && !strcmp(reas.p, json_string_value(json_object_get(msg, "reasoning_content"))) &&
              !strcmp(reas.p, "Let me think about Paris."), "reasoning: '%s'", reas.p);
    CHECK_MSG(cont.p && !strcmp(cont.p, json_string_value(json_object_get(msg, "content"))) &&
              !strcmp(cont.p, "Checking the weather, world."), "content: '%s'", cont.p);
    CHECK_MSG(name && !strcmp(name, "get_weather") &&
              !strcmp(name, json_string_value(json_object_get(json_object_get(call0, "function"), "name"))), "tool name");
    CHECK_MSG(args.p && !strcmp(args.p, "{\"city\": \"Paris\"}") &&
              !strcmp(args.p, json_string_value(json_object_get(json_object_get(call0, "function"), "arguments"))),
              "arguments '%s'", args.p);
    CHECK_MSG(call_id && !strncmp(call_id, "call_", 5) && json_is_string(json_object_get(call0, "id")), "call ids");
    CHECK_MSG(finish && !strcmp(finish, "tool_calls") && !strcmp(json_string_value(json_object_get(ch, "finish_reason")), finish),
              "finish %s", finish);
    const json_t *wu = json_object_get(w.json, "usage");
    CHECK_MSG(usage && json_equal(usage, wu), "usage streamed == whole");
    struct k3_tok_ids ans = {0};
    k3_tok_encode(tok, ANSWER, strlen(ANSWER), K3_TOK_SPECIAL, NULL, &ans);
    CHECK_MSG(json_integer_value(json_object_get(wu, "completion_tokens")) == (json_int_t)ans.n,
              "completion_tokens %lld, answer has %zu ids", (long long)json_integer_value(json_object_get(wu, "completion_tokens")), ans.n);
    CHECK(json_integer_value(json_object_get(wu, "total_tokens")) ==
          json_integer_value(json_object_get(wu, "prompt_tokens")) + json_integer_value(json_object_get(wu, "completion_tokens")));
    json_int_t rt = json_integer_value(json_object_get(json_object_get(wu, "completion_tokens_details"), "reasoning_tokens"));
    CHECK_MSG(rt > 0 && rt < (json_int_t)ans.n, "reasoning tokens %lld", (long long)rt);
    CHECK(json_integer_value(json_object_get(json_object_get(wu, "prompt_tokens_details"), "cached_tokens")) == 0);
    CHECK_MSG(n_lp == ans.n && json_array_size(json_object_get(json_object_get(ch, "logprobs"), "content")) == ans.n,
              "logprobs: %zu streamed, answer %zu", n_lp, ans.n);
    /* prompt_tokens: the ids /tokenize renders minus the 3-id stub */
    struct resp tk = call(s, "POST", "/tokenize", "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}], " TOOLS "}", NULL);
    CHECK_MSG(tk.status == 200 && json_integer_value(json_object_get(tk.json, "count")) - 3 ==
                                      json_integer_value(json_object_get(wu, "prompt_tokens")),
              "prompt_tokens %lld vs tokenize %lld", (long long)json_integer_value(json_object_get(wu, "prompt_tokens")),
              (long long)json_integer_value(json_object_get(tk.json, "count")));
    resp_free(&tk);
    k3_tok_ids_free(&ans);
    k3_sbuf_free(&reas), k3_sbuf_free(&cont), k3_sbuf_free(&args);
    resp_free(&w), resp_free(&st);
    k3_srv_free(s);
}

static void test_stop_strings(void)
{
    struct k3_srv *s = make_srv(NULL, 8, 4096);
    for (int stream = 0; stream < 2; stream++) {
        char body[512];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": [\"zzz\", \"world\"], "
                 "\"max_tokens\": 200, \"stream\": %s}", stream ? "true" : "false");
        struct resp r = call(s, "POST", "/v1/chat/completions", body, NULL);
        struct k3_sbuf cont = {0};
        const char *finish = NULL;
        if (stream) {
            size_t i;
            json_t *chunk;
            json_array_foreach(r.json, i, chunk)
            {
                const json_t *c = json_array_get(json_object_get(chunk, "choices"), 0);
                const char *t = json_string_value(json_object_get(json_object_get(c, "delta"), "content"));
                if (t) k3_sbuf_adds(&cont, t);
                if (json_is_string(json_object_get(c, "finish_reason"))) finish = json_string_value(json_object_get(c, "finish_reason"));
            }
        } else {
            const json_t *c = json_array_get(json_object_get(r.json, "choices"), 0);
            k3_sbuf_adds(&cont, json_string_value(json_object_get(json_object_get(c, "message"), "content")));
            finish = json_string_value(json_object_get(c, "finish_reason"));
        }
        CHECK_MSG(r.status == 200 && cont.p && !strcmp(cont.p, "Checking the weather, ") && finish && !strcmp(finish, "stop"),
                  "stop (stream %d): '%s' %s", stream, cont.p, finish);
        k3_sbuf_free(&cont);
        resp_free(&r);
    }
    k3_srv_free(s);
}

static int metric(struct k3_srv *s, const char *name)
{
    struct resp r = call(s, "GET", "/metrics", NULL, NULL);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = r.text ? strstr(r.text, key) : NULL;
    int v = at ? atoi(at + strlen(key)) : -1;
    resp_free(&r);
    return v;
}

static int alive_for_4_polls(void *ctx)
{
    return ++*(int *)ctx <= 4;
}

/* A client that leaves mid-stream: its slot and blocks come back; 429 while it ran with
 * max_active 1; 503 while draining. */
static void test_disconnect_and_limits(void)
{
    struct k3_srv *s = make_srv(NULL, 1, 4096);
    atomic_store(&fk.endless, 1);
    int total_slots = metric(s, "k3_kda_slots_capacity"), total_blocks = metric(s, "k3_mla_blocks_capacity");
    struct k3_srv_req rq = {"POST", "/v1/chat/completions", NULL, 0, NULL, 0};
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"go on forever\"}], \"stream\": true}";
    rq.body = body, rq.body_len = strlen(body);
    struct k3_srv_resp r;
    k3_srv_dispatch(s, &rq, &r);
    CHECK(r.status == 200 && r.stream.next);
    struct k3_sbuf b = {0};
    int pieces = 0;
    for (int i = 0; i < 200 && pieces < 5; i++) pieces += r.stream.next(r.stream.ctx, &b, 1.0) > 0;
    CHECK_MSG(pieces == 5 && b.n > 0, "stream pieces %d: %s", pieces, b.p);
    CHECK_MSG(metric(s, "k3_kda_slots_free") < total_slots, "a slot is taken while streaming");
    struct resp busy = call(s, "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL);
    CHECK_MSG(busy.status == 429 && !strcmp(err_field(&busy, "type"), "rate_limit_error"), "full: %d", busy.status);
    resp_free(&busy);
    k3_srv_resp_free(&r); /* the client leaves */
    k3_sbuf_free(&b);
    for (int i = 0; i < 400 && k3_srv_n_active(s); i++) usleep(5000);
    CHECK_MSG(k3_srv_n_active(s) == 0, "cancelled request still active");
    CHECK_MSG(metric(s, "k3_kda_slots_free") == total_slots && metric(s, "k3_mla_blocks_free") == total_blocks,
              "slots %d/%d blocks %d/%d after the client left", metric(s, "k3_kda_slots_free"), total_slots,
              metric(s, "k3_mla_blocks_free"), total_blocks);
    CHECK_MSG(metric(s, "k3_requests_finished_total{reason=\"cancelled\"}") == 1, "cancel counted");
    /* a non-streamed request whose client leaves while it waits for the whole answer */
    const char *whole = "{\"messages\": [{\"role\": \"user\", \"content\": \"go on forever\"}]}";
    struct k3_srv_req rq2 = {"POST", "/v1/chat/completions", NULL, 0, whole, strlen(whole)};
    int polls = 0;
    k3_srv_dispatch_conn(s, &rq2, alive_for_4_polls, &polls, &r);
    CHECK_MSG(r.status == 499 && polls == 5, "client gone while waiting: %d after %d polls", r.status, polls);
    k3_srv_resp_free(&r);
    for (int i = 0; i < 400 && k3_srv_n_active(s); i++) usleep(5000);
    CHECK_MSG(metric(s, "k3_kda_slots_free") == total_slots && metric(s, "k3_mla_blocks_free") == total_blocks &&
              metric(s, "k3_requests_finished_total{reason=\"cancelled\"}") == 2,
              "slots and blocks back after a non-streamed client left");
    atomic_store(&fk.endless, 0);
    k3_srv_drain(s);
    struct resp d = call(s, "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL);
    CHECK_MSG(d.status == 503, "draining: %d", d.status);
    resp_free(&d);
    d = call(s, "GET", "/health", NULL, NULL);
    CHECK_MSG(d.status == 503, "health while draining: %d", d.status);
    resp_free(&d);
    k3_srv_free(s);
}

static void test_other_routes(void)
{
    struct k3_srv *s = make_srv(NULL, 8, 64);
    struct resp r = call(s, "POST", "/v1/completions", "{\"prompt\": [1, 2, 3], \"max_tokens\": 4, \"logprobs\": 2}", NULL);
    const json_t *c = json_array_get(json_object_get(r.json, "choices"), 0);
    CHECK_MSG(r.status == 200 && json_is_string(json_object_get(c, "text")) &&
              !strcmp(json_string_value(json_object_get(c, "finish_reason")), "length") &&
              json_array_size(json_object_get(json_object_get(c, "logprobs"), "tokens")) == 4,
              "completions: %d %s", r.status, r.text);
    CHECK(json_integer_value(json_object_get(json_object_get(r.json, "usage"), "prompt_tokens")) == 3);
    resp_free(&r);
    r = call(s, "POST", "/v1/completions", "{\"prompt\": \"Hello\", \"max_tokens\": 3, \"stream\": true}", NULL);
    CHECK_MSG(r.status == 200 && json_is_null(json_array_get(r.json, json_array_size(r.json) - 1)), "completions stream");
    resp_free(&r);
    r = call(s, "POST", "/v1/completions", "{\"prompt\": [1, 99999999]}", NULL);
    CHECK_MSG(r.status == 400 && !strcmp(err_field(&r, "param"), "prompt"), "id out of range: %d", r.status);
    resp_free(&r);
    /* a prompt longer than the context (64 here) */
    char body[4096] = "{\"messages\": [{\"role\": \"user\", \"content\": \"";
    for (int i = 0; i < 200; i++) strcat(body, "word ");
    strcat(body, "\"}]}");
    r = call(s, "POST", "/v1/chat/completions", body, NULL);
    CHECK_MSG(r.status == 400 && err_field(&r, "code") && !strcmp(err_field(&r, "code"), "context_length_exceeded"),
              "too long: %d %s", r.status, r.text);
    resp_free(&r);
    r = call(s, "POST", "/tokenize", "{\"prompt\": \"Hello world<|end_of_msg|>\"}", NULL);
    json_t *ids = json_object_get(r.json, "tokens");
    CHECK_MSG(r.status == 200 && json_array_size(ids) >= 3, "tokenize: %d %s", r.status, r.text);
    json_t *dj = json_pack("{s:O}", "tokens", ids);
    char *dbody = json_dumps(dj, JSON_COMPACT);
    json_decref(dj);
    struct resp d = call(s, "POST", "/detokenize", dbody, NULL);
    CHECK_MSG(d.status == 200 && !strcmp(json_string_value(json_object_get(d.json, "prompt")), "Hello world<|end_of_msg|>"),
              "detokenize: %s", d.text);
    resp_free(&d);
    free(dbody);
    resp_free(&r);
    r = call(s, "POST", "/detokenize", "{\"tokens\": [-1]}", NULL);
    CHECK(r.status == 400);
    resp_free(&r);
    r = call(s, "GET", "/metrics", NULL, NULL);
    CHECK_MSG(r.status == 200 && strstr(r.text, "# TYPE k3_step_seconds histogram") &&
              strstr(r.text, "k3_http_requests_total{route=\"/v1/completions\",status=\"200\"} 2") &&
              strstr(r.text, "k3_requests_waiting ") && strstr(r.text, "k3_mla_blocks_free "),
              "metrics:\n%s", r.text);
    resp_free(&r);
    k3_srv_free(s);
}

int main(void)
{
    struct k3_err err;
    if (k3_tok_load_files(&tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "tokenizer: %s\n", err.msg);
        return 1;
    }
    struct k3_sched_limits lim = {.n_groups = 2, .max_batch_tokens = 512, .max_seqs = 4, .prefill_chunk = 256,
                                  .max_queue = 64, .context_tokens = 4096, .kda_slots = 4, .block_tokens = 16,
                                  .n_blocks = 1024};
    K3_CHECK(!k3_sched_init(&fk.sched, &lim, &err), "%s", err.msg);
    k3_tok_encode(tok, ANSWER, strlen(ANSWER), K3_TOK_SPECIAL, NULL, &fk.answer);
    fk.filler = 1000; /* an ordinary token */
    /* the step thread reports to whichever server the test made last */
    struct k3_srv *metrics_sink = make_srv(NULL, 1, 0);
    fk.srv = metrics_sink;
    pthread_create(&fk.th, NULL, step_thread, &fk);
    test_routes();
    test_kvv_rules(K3_KVV_RULES);
    test_stream_equals_whole();
    test_stop_strings();
    test_disconnect_and_limits();
    test_other_routes();
    atomic_store(&fk.stop, 1);
    pthread_join(fk.th, NULL);
    k3_srv_free(metrics_sink);
    k3_sched_free(fk.sched);
    k3_tok_ids_free(&fk.answer);
    k3_tok_free(tok);
    return k3_test_summary();
}
