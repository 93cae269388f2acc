/* fuzz_http.c - libFuzzer target for the HTTP request path without sockets: k3_srv_dispatch
 * (routing, limits, auth, every API module: Anthropic messages, OpenAI chat and
 * completions, tokenize, detokenize, models, health, metrics) over the real tokenizer and
 * scheduler, with a fake model on a step thread that answers each sequence with one of a
 * few K3 outputs (reasoning, content, tool calls, a malformed json block, filler) and then
 * the end-of-message id. Streams are read to the end or left after the first piece (the
 * client-disconnect path). Besides "no crash, no leak, no hang": every status is one the
 * server documents, a JSON response parses, every SSE data line is JSON (or [DONE]).
 * Input: byte 0 = route, byte 1 = flags (bits 0-1 auth: none / Bearer / x-api-key / wrong
 * key, bits 2-3 the model's answer, bit 4 leave streams early, bit 5 the open sampling
 * policy), the rest = the body. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "engine/scheduler.h"
#include "engine/step_plan.h"
#include "frontend/tokenizer.h"
#include "server/server.h"

static const char *const answers[4] = {
    ("Think.<|close|>think<|sep|><|open|>response<|sep|>Sunny, \"warm\" 你好<|close|>response<|sep|>"
    "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument "
    "key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>"
    "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"),
    "Plain text <|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>",
    ("<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>json type=\"object\"<|sep|>"
     "[1, {\"a\"<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|end_of_msg|>"),
    "filler filler filler filler filler filler filler filler filler filler<|end_of_msg|>",
};

static struct {
    struct k3_tok *tok;
    struct k3_sched *sched;
    struct k3_srv *srv[2];  /* kimi and open policy */
    struct k3_tok_ids ids[4];
    atomic_int answer;
    pthread_t th;
} F;

/* The fake model: the k-th sampled token of a sequence is the k-th id of the answer. */
static void *step_thread(void *arg)
{
    (void)arg;
    struct k3_step_plan plan;
    k3_plan_init(&plan);
    struct k3_sampled got[64];
    for (;;) {
        if (!k3_sched_wait(F.sched, 0.01)) continue;
        k3_sched_build(F.sched, &plan);
        const struct k3_tok_ids *a = &F.ids[atomic_load(&F.answer) & 3];
        int n = 0;
        for (int i = 0; i < plan.n_seqs && n < 64; i++) {
            const struct k3_plan_seq *s = &plan.seqs[i];
            if (!(s->flags & K3_SEQ_SAMPLE)) continue;
            int k = s->pos0 + s->n_new - s->sampling.n_prompt;
            int32_t t = k >= 0 && (size_t)k < a->n ? a->ids[k] : a->ids[a->n - 1];
            got[n++] = (struct k3_sampled){.seq = i, .token = t, .logprob = -1.0f,
                                           .n_top = s->sampling.n_logprobs};
        }
        k3_sched_complete(F.sched, &plan, got, n);
        for (int p = 0; p < 2; p++) k3_srv_on_step(F.srv[p], &plan, 0.001);
    }
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct k3_err err;
    if (k3_tok_load_files(&F.tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    struct k3_sched_limits lim = {.n_groups = 2, .max_batch_tokens = 512, .max_seqs = 4,
                                  .prefill_chunk = 256, .max_queue = 16, .context_tokens = 4096,
                                  .kda_slots = 4, .block_tokens = 16, .n_blocks = 1024};
    K3_CHECK(!k3_sched_init(&F.sched, &lim, &err), "%s", err.msg);
    for (int i = 0; i < 4; i++)
        k3_tok_encode(F.tok, answers[i], strlen(answers[i]), K3_TOK_SPECIAL, NULL, &F.ids[i]);
    for (int p = 0; p < 2; p++) {
        struct k3_srv_cfg c = {.model_name = "k3-test", .api_key = "key", .max_body_bytes = 16384,
                               .max_active = 8, .context_tokens = 2048,
                               .vocab_size = k3_tok_n_vocab(F.tok),
                               .policy = p ? K3_SRV_POLICY_OPEN : K3_SRV_POLICY_KIMI,
                               .request_timeout_s = 10, .shutdown_grace_s = 1};
        K3_CHECK(!k3_srv_init(&F.srv[p], &c, F.tok, F.sched, &err), "%s", err.msg);
    }
    pthread_create(&F.th, NULL, step_thread, NULL);  /* runs until the process ends */
    return 0;
}

static const struct {
    const char *method, *path;
} routes[] = {
    {"POST", "/v1/messages"}, {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"},
    {"POST", "/tokenize"}, {"POST", "/detokenize"}, {"GET", "/v1/models"}, {"GET", "/health"},
    {"GET", "/metrics"}, {"POST", "/v1/models"}, {"POST", "/nope"}, {"GET", "/v1/messages"},
};

static int status_known(int s)
{
    static const int ok[] = {200, 400, 401, 404, 405, 413, 429, 503, 529};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (s == ok[i]) return 1;
    return 0;
}

/* Every "data: " line of an SSE text is one JSON value or [DONE]. */
static void check_sse(const char *p, size_t n)
{
    const char *end = p + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (len > 6 && !memcmp(p, "data: ", 6) && !(len == 12 && !memcmp(p + 6, "[DONE]", 6))) {
            json_t *j = json_loadb(p + 6, len - 6, JSON_ALLOW_NUL, NULL);
            if (!j) __builtin_trap();
            json_decref(j);
        }
        p += len + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t nr = sizeof routes / sizeof *routes;
    unsigned flags = data[1];
    struct k3_srv_header h[2] = {{"Content-Type", "application/json"}, {NULL, NULL}};
    int nh = 1;
    switch (flags & 3) {
    case 1: h[nh++] = (struct k3_srv_header){"Authorization", "Bearer key"}; break;
    case 2: h[nh++] = (struct k3_srv_header){"x-api-key", "key"}; break;
    case 3: h[nh++] = (struct k3_srv_header){"x-api-key", "wrong"}; break;
    }
    atomic_store(&F.answer, (int)(flags >> 2) & 3);
    struct k3_srv_req rq = {routes[data[0] % nr].method, routes[data[0] % nr].path, h, nh,
                            (const char *)data + 2, size - 2};
    struct k3_srv_resp r;
    k3_srv_dispatch(F.srv[(flags >> 5) & 1], &rq, &r);
    if (!status_known(r.status)) __builtin_trap();
    if (r.stream.next) {
        struct k3_sbuf b = {0};
        int rc, calls = 0;
        do {
            rc = r.stream.next(r.stream.ctx, &b, 0.5);
            if ((flags & 16) && ++calls >= 2) break;  /* the client leaves */
        } while (rc >= 0);
        check_sse(b.p ? b.p : "", b.n);
        k3_sbuf_free(&b);
    } else if (r.content_type && !strcmp(r.content_type, "application/json")) {
        json_t *j = json_loadb(r.body.p ? r.body.p : "", r.body.n, JSON_ALLOW_NUL, NULL);
        if (!j) __builtin_trap();
        json_decref(j);
    }
    k3_srv_resp_free(&r);  /* closes a stream still open as aborted */
    return 0;
}
