/* test_out_parse.c - the K3 output parser: each failure mode of research/frontend.md
 * §3.5-§3.6 as a case, and for every case the streamed parse under many chunkings (one
 * byte, random sizes, one token per delta through the detokenizer) equals the parse of the
 * whole text, and the concatenated deltas equal the final result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/out_parse.h"
#include "k3_test.h"

static struct k3_tok *tok;

struct acc {  /* what a client rebuilds from the deltas */
    struct k3_sbuf reasoning, content;
    struct k3_sbuf args[16];
    char ids[16][K3_OUTP_ID_BYTES];
    char names[16][64];
    int n_calls, bad_index;
};

static void acc_add(struct acc *a, const struct k3_outp_delta *d)
{
    k3_sbuf_add(&a->reasoning, d->reasoning.p, d->reasoning.n);
    k3_sbuf_add(&a->content, d->content.p, d->content.n);
    for (size_t i = 0; i < d->n_tools; i++) {
        const struct k3_outp_tool_delta *t = &d->tools[i];
        if (t->index < 0 || t->index >= 16) { a->bad_index = 1; continue; }
        if (t->first) {
            if (t->index != a->n_calls) a->bad_index = 1;  /* indices contiguous, in order */
            a->n_calls = t->index + 1;
            memcpy(a->ids[t->index], t->id, K3_OUTP_ID_BYTES);
            snprintf(a->names[t->index], 64, "%s", t->name);
        } else if (t->index >= a->n_calls) {
            a->bad_index = 1;
        }
        k3_sbuf_add(&a->args[t->index], t->args.p, t->args.n);
    }
}

static void acc_free(struct acc *a)
{
    k3_sbuf_free(&a->reasoning);
    k3_sbuf_free(&a->content);
    for (int i = 0; i < 16; i++) k3_sbuf_free(&a->args[i]);
}

static int sbuf_eq(const struct k3_sbuf *a, const struct k3_sbuf *b)
{
    return a->n == b->n && (!a->n || !memcmp(a->p, b->p, a->n));
}

static int same_result(const struct k3_outp_result *x, const struct k3_outp_result *y)
{
    if (!sbuf_eq(&x->reasoning, &y->reasoning) || !sbuf_eq(&x->content, &y->content)) return 0;
    if (x->n_calls != y->n_calls || strcmp(x->finish_reason, y->finish_reason)) return 0;
    if (x->n_dropped_calls != y->n_dropped_calls || x->n_bad_values != y->n_bad_values) return 0;
    for (size_t i = 0; i < x->n_calls; i++)
        if (strcmp(x->calls[i].id, y->calls[i].id) || strcmp(x->calls[i].name, y->calls[i].name) ||
            !sbuf_eq(&x->calls[i].args, &y->calls[i].args) ||
            x->calls[i].complete != y->calls[i].complete)
            return 0;
    return 1;
}

static int acc_matches(const struct acc *a, const struct k3_outp_result *r)
{
    if (a->bad_index || (size_t)a->n_calls != r->n_calls) return 0;
    if (!sbuf_eq(&a->reasoning, &r->reasoning) || !sbuf_eq(&a->content, &r->content)) return 0;
    for (size_t i = 0; i < r->n_calls; i++)
        if (strcmp(a->ids[i], r->calls[i].id) || strcmp(a->names[i], r->calls[i].name) ||
            !sbuf_eq(&a->args[i], &r->calls[i].args))
            return 0;
    return 1;
}

/* chunking: 0 whole, 1 one byte, 2 random sizes (seed), 3 one token per delta */
static struct k3_outp *run(const struct k3_outp_cfg *cfg, const char *text, enum k3_outp_end why,
                           int chunking, unsigned seed, struct acc *a)
{
    struct k3_outp *p = k3_outp_new(cfg);
    struct k3_outp_delta d = {0};
    size_t n = strlen(text);
    if (chunking == 3) {
        struct k3_tok_ids ids = {0};
        k3_tok_encode(tok, text, n, K3_TOK_SPECIAL, NULL, &ids);
        struct k3_detok dt;
        k3_detok_init(&dt, tok);
        for (size_t i = 0; i < ids.n; i++) {
            k3_outp_feed_ids(p, &dt, &ids.ids[i], 1, &d);
            acc_add(a, &d);
            k3_outp_delta_clear(&d);
        }
        char buf[16];
        int m = k3_detok_flush(&dt, buf);
        k3_outp_feed(p, buf, (size_t)m, &d);
        k3_tok_ids_free(&ids);
    } else {
        for (size_t i = 0; i < n;) {
            size_t step = chunking == 0 ? n : chunking == 1 ? 1 : 1 + (size_t)(rand_r(&seed) % 12);
            if (step > n - i) step = n - i;
            k3_outp_feed(p, text + i, step, &d);
            acc_add(a, &d);
            k3_outp_delta_clear(&d);
            i += step;
        }
    }
    k3_outp_finish(p, why, &d);
    acc_add(a, &d);
    k3_outp_delta_free(&d);
    return p;
}

static const char *const declared[] = {"get_weather", "get_time", "f"};
static int skip_ids;  /* the case's text holds marker prefixes that ids spell as plain text */

/* Parses text whole, then under 1-byte, 40 random and per-token chunkings; every streamed
 * run must equal the whole parse and its deltas must add up. Returns the whole parse. */
static struct k3_outp *parse_checked(const char *name, const char *text, int thinking,
                                     int drop_calls, enum k3_outp_end why)
{
    struct k3_outp_cfg cfg = {.thinking = thinking, .drop_calls = drop_calls,
                              .tool_names = declared, .n_tool_names = 3, .id_seed = 42};
    struct acc a0 = {0};
    struct k3_outp *ref = run(&cfg, text, why, 0, 0, &a0);
    CHECK_MSG(acc_matches(&a0, k3_outp_result(ref)), "%s: whole-text deltas differ", name);
    acc_free(&a0);
    int bad = 0;
    for (int k = 0; k < 43; k++) {
        int chunking = k == 0 ? 1 : k == 1 ? 3 : 2;
        if (chunking == 3 && skip_ids) continue;
        struct acc a = {0};
        struct k3_outp *p = run(&cfg, text, why, chunking, (unsigned)k * 7919u, &a);
        if (!same_result(k3_outp_result(p), k3_outp_result(ref)) ||
            !acc_matches(&a, k3_outp_result(p))) {
            if (!bad) fprintf(stderr, "%s: chunking %d (seed %d) differs\n", name, chunking, k);
            bad++;
        }
        acc_free(&a);
        k3_outp_free(p);
    }
    CHECK_MSG(bad == 0, "%s: %d chunkings differ from the whole parse", name, bad);
    /* nothing leaks: no marker in reasoning, content or a tool name, whatever the input */
    const struct k3_outp_result *r = k3_outp_result(ref);
    static const char *const markers[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (int m = 0; m < 4; m++) {
        CHECK_MSG(!(r->reasoning.p && strstr(r->reasoning.p, markers[m])) &&
                  !(r->content.p && strstr(r->content.p, markers[m])), "%s: %s leaked", name,
                  markers[m]);
        for (size_t i = 0; i < r->n_calls; i++)
            CHECK_MSG(!strstr(r->calls[i].name, markers[m]), "%s: %s in a tool name", name, markers[m]);
    }
    return ref;
}

static int str_is(const struct k3_sbuf *b, const char *s)
{
    int ok = b->n == strlen(s) && !memcmp(b->p ? b->p : "", s, b->n);
    if (!ok) fprintf(stderr, "got '%.*s', want '%s'\n", (int)b->n, b->p ? b->p : "", s);
    return ok;
}

static int no_markup(const struct k3_outp_result *r)
{
    return !(r->reasoning.p && strstr(r->reasoning.p, "<|")) &&
           !(r->content.p && strstr(r->content.p, "<|"));
}

static void test_example(void)
{
    /* research/frontend.md §3.1, K3 */
    struct k3_outp *p = parse_checked(
        "example",
        "The user wants weather for two cities; call get_weather twice.<|close|>think<|sep|>"
        "<|open|>response<|sep|>Checking both cities now.<|close|>response<|sep|><|open|>tools"
        "<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" "
        "type=\"string\"<|sep|>Beijing<|close|>argument<|sep|><|close|>call<|sep|><|open|>call "
        "tool=\"get_weather\" index=\"2\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>"
        "Shanghai<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>3"
        "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
        "<|end_of_msg|>",
        1, 0, K3_OUTP_STOP);
    const struct k3_outp_result *r = k3_outp_result(p);
    CHECK(str_is(&r->reasoning, "The user wants weather for two cities; call get_weather twice."));
    CHECK(str_is(&r->content, "Checking both cities now."));
    CHECK(r->n_calls == 2);
    if (r->n_calls == 2) {
        CHECK(!strcmp(r->calls[0].name, "get_weather") && !strcmp(r->calls[1].name, "get_weather"));
        CHECK(str_is(&r->calls[0].args, "{\"city\": \"Beijing\"}"));
        CHECK(str_is(&r->calls[1].args, "{\"city\": \"Shanghai\", \"days\": 3}"));
        CHECK(!strncmp(r->calls[0].id, "call_", 5) && strlen(r->calls[0].id) == 29);
        CHECK(strcmp(r->calls[0].id, r->calls[1].id) != 0);
        CHECK(r->calls[0].complete && r->calls[1].complete);
    }
    CHECK(!strcmp(r->finish_reason, "tool_calls"));
    k3_outp_free(p);
}

static void test_missing_closers(void)
{
    /* no <|close|>argument, call, tools or message: <|end_of_msg|> closes everything */
    struct k3_outp *p = parse_checked(
        "missing closers",
        "r<|open|>response<|sep|>c<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|>"
        "<|open|>argument key=\"a\" type=\"string\"<|sep|>x<|open|>argument key=\"b\" "
        "type=\"boolean\"<|sep|>true<|end_of_msg|>",
        1, 0, K3_OUTP_STOP);
    const struct k3_outp_result *r = k3_outp_result(p);
    CHECK(str_is(&r->reasoning, "r") && str_is(&r->content, "c"));
    CHECK(r->n_calls == 1 && r->n_calls && str_is(&r->calls[0].args, "{\"a\": \"x\", \"b\": true}"));
    CHECK(!strcmp(r->finish_reason, "tool_calls"));
    k3_outp_free(p);
    /* the stream stops (stop id not fed) inside an argument: the stop closes it */
    p = parse_checked("stop inside argument",
                      "<|open|>call tool=\"f\"<|sep|><|open|>argument key=\"n\" type=\"number\"<|sep|>7",
                      0, 0, K3_OUTP_STOP);
    r = k3_outp_result(p);
    CHECK(r->n_calls == 1 && str_is(&r->calls[0].args, "{\"n\": 7}") && r->calls[0].complete);
    k3_outp_free(p);
}

static void test_calls_in_unclosed_think(void)
{
    struct k3_outp *p = parse_checked(
        "call inside think",
        "I should check the time.<|open|>call tool=\"get_time\" index=\"1\"<|sep|><|open|>argument "
        "key=\"tz\" type=\"string\"<|sep|>UTC<|close|>argument<|sep|><|close|>call<|sep|>"
        "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
        1, 0, K3_OUTP_STOP);
    const struct k3_outp_result *r = k3_outp_result(p);
    CHECK(str_is(&r->reasoning, "I should check the time.") && r->content.n == 0);
    CHECK(r->n_calls == 1 && str_is(&r->calls[0].args, "{\"tz\": \"UTC\"}"));
    CHECK(!strcmp(r->finish_reason, "tool_calls") && no_markup(r));
    k3_outp_free(p);
}

static void test_truncation(void)
{
    struct k3_outp *p = parse_checked(
        "length mid-call",
        "t<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
        "<|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"a\" type=\"string\"<|sep|>"
        "x<|close|>argument<|sep|><|open|>argument key=\"b\" type=\"string\"<|sep|>partial va",
        1, 0, K3_OUTP_LENGTH);
    const struct k3_outp_result *r = k3_outp_result(p);
    CHECK(!strcmp(r->finish_reason, "length"));  /* not tool_calls */
    /* string values stream as they arrive, so the cut value is there, unterminated */
    CHECK(r->n_calls == 1 && !r->calls[0].complete &&
          str_is(&r->calls[0].args, "{\"a\": \"x\", \"b\": \"partial va"));
    k3_outp_free(p);
    /* cut inside a marker: the marker prefix does not leak into content */
    skip_ids = 1;  /* as ids, "<|clo" is ordinary tokens: text, not a cut marker */
    p = parse_checked("length mid-marker", "answer<|clo", 0, 0, K3_OUTP_LENGTH);
    skip_ids = 0;
    r = k3_outp_result(p);
    CHECK(str_is(&r->content, "answer") && !strcmp(r->finish_reason, "length"));
    k3_outp_free(p);
    p = parse_checked("length in reasoning", "thinking about it", 1, 0, K3_OUTP_LENGTH);
    r = k3_outp_result(p);
    CHECK(str_is(&r->reasoning, "thinking about it") && r->content.n == 0);
    k3_outp_free(p);
}

static void test_bad_values_and_names(void)
{
    struct k3_outp *p = parse_checked(
        "invalid typed values",
        "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|>"
        "<|open|>argument key=\"n\" type=\"number\"<|sep|>abc<|close|>argument<|sep|>"
        "<|open|>argument key=\"o\" type=\"object\"<|sep|>{\"k\": [1,2.50]}<|close|>argument<|sep|>"
        "<|open|>argument key=\"b\" type=\"boolean\"<|sep|>yes<|close|>argument<|sep|>"
        "<|open|>argument key=\"z\" type=\"null\"<|sep|> null <|close|>argument<|sep|>"
        "<|open|>argument key=\"q&quot;&amp;\" type=\"string\"<|sep|>line1\n\"line2\"<|close|>argument<|sep|>"
        "<|close|>call<|sep|><|close|>tools<|sep|>",
        1, 0, K3_OUTP_STOP);
    const struct k3_outp_result *r = k3_outp_result(p);
    CHECK(r->n_calls == 1 && r->n_bad_values == 2);
    CHECK(r->n_calls && str_is(&r->calls[0].args, "{\"n\": \"abc\", \"o\": {\"k\": [1, 2.5]}, "
                                                  "\"b\": \"yes\", \"z\": null, \"q\\\"&\": "
                                                  "\"line1\\n\\\"line2\\\"\"}"));
    k3_outp_free(p);
    /* unknown tool and nameless call: dropped with their markup; a known one survives */
    p = parse_checked(
        "unknown tool",
        "<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|><|open|>tools<|sep|>"
        "<|open|>call tool=\"rm_rf\" index=\"1\"<|sep|><|open|>argument key=\"p\" type=\"string\"<|sep|>"
        "/<|close|>argument<|sep|><|close|>call<|sep|><|open|>call index=\"2\"<|sep|><|close|>call<|sep|>"
        "<|open|>call tool=\"get_time\" index=\"3\"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
        1, 0, K3_OUTP_STOP);
    r = k3_outp_result(p);
    CHECK(r->n_calls == 1 && r->n_dropped_calls == 2 && str_is(&r->content, "ok"));
    CHECK(r->n_calls && !strcmp(r->calls[0].name, "get_time") && str_is(&r->calls[0].args, "{}"));
    k3_outp_free(p);
    p = parse_checked("only unknown tools",
                      "<|open|>call tool=\"nope\"<|sep|><|close|>call<|sep|>", 0, 0, K3_OUTP_STOP);
    CHECK(k3_outp_result(p)->n_calls == 0 && !strcmp(k3_outp_result(p)->finish_reason, "stop"));
    k3_outp_free(p);
}

static void test_drop_and_plain(void)
{
    /* tool_choice none: calls and markup vanish, content stays */
    struct k3_outp *p = parse_checked(
        "tool_choice none",
        "hmm<|close|>think<|sep|><|open|>response<|sep|>Sure.<|close|>response<|sep|><|open|>tools"
        "<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument key=\"a\" type=\"string\"<|sep|>x"
        "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|end_of_msg|>",
        1, 1, K3_OUTP_STOP);
    const struct k3_outp_result *r = k3_outp_result(p);
    CHECK(r->n_calls == 0 && str_is(&r->content, "Sure.") && !strcmp(r->finish_reason, "stop"));
    k3_outp_free(p);
    /* thinking off, and text that merely looks like markers */
    p = parse_checked("plain text", "a < b <| c <|op x |> <|sep<|close|>response<|sep|>"
                      "<|close|>message<|sep|><|end_of_msg|>trailing", 0, 0, K3_OUTP_STOP);
    r = k3_outp_result(p);
    CHECK(str_is(&r->content, "a < b <| c <|op x |> <|sep") && r->reasoning.n == 0);
    k3_outp_free(p);
    /* a stop right after "<|" keeps the text: it was not a marker */
    p = parse_checked("stop after <|", "x <|", 0, 0, K3_OUTP_STOP);
    CHECK(str_is(&k3_outp_result(p)->content, "x <|"));
    k3_outp_free(p);
    /* raw json block, and stray whitespace inside tags */
    p = parse_checked("json block",
                      "<|open|>tools<|sep|><|open|> call tool=\"f\" index=\"1\" <|sep|><|open|>json "
                      "type=\"object\"<|sep|>{\"a\":[1,2],\"b\":\"\xc3\xa9\"}<|close|>json<|sep|>"
                      "<|close|>call<|sep|><|open|>call tool=\"f\"<|sep|><|open|>json<|sep|>{oops"
                      "<|close|>json<|sep|><|close|>call<|sep|>", 0, 0, K3_OUTP_STOP);
    r = k3_outp_result(p);
    CHECK(r->n_calls == 2);
    if (r->n_calls == 2) {
        CHECK(str_is(&r->calls[0].args, "{\"a\": [1, 2], \"b\": \"\xc3\xa9\"}"));
        CHECK(str_is(&r->calls[1].args, "{oops"));
    }
    k3_outp_free(p);
    /* whitespace between channels is not content; text without a response opener is */
    p = parse_checked("ws between channels", "r<|close|>think<|sep|>\n \n<|open|>response<|sep|>c"
                      "<|close|>response<|sep|>", 1, 0, K3_OUTP_STOP);
    CHECK(str_is(&k3_outp_result(p)->content, "c"));
    k3_outp_free(p);
    p = parse_checked("missing response opener", "r<|close|>think<|sep|>\n hello<|close|>response"
                      "<|sep|>", 1, 0, K3_OUTP_STOP);
    CHECK(str_is(&k3_outp_result(p)->content, "\n hello"));
    k3_outp_free(p);
    /* reasoning with UTF-8 split across tokens, and reasoning-only output */
    p = parse_checked("utf8", "思考一下。<|close|>think<|sep|><|open|>response<|sep|>答案：42"
                      "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", 1, 0,
                      K3_OUTP_STOP);
    r = k3_outp_result(p);
    CHECK(str_is(&r->reasoning, "思考一下。") && str_is(&r->content, "答案：42"));
    k3_outp_free(p);
}

/* A long string argument streams before its closer arrives (vllm#50604: K3 arguments
 * arrived in one piece after minutes); other types wait for their closer. */
static void test_string_args_stream(void)
{
    struct k3_outp_cfg cfg = {.thinking = 0, .tool_names = declared, .n_tool_names = 3, .id_seed = 1};
    struct k3_outp *p = k3_outp_new(&cfg);
    struct k3_outp_delta d = {0};
    struct acc a = {0};
    const char *part1 = "<|open|>call tool=\"f\"<|sep|><|open|>argument key=\"n\" type=\"number\"<|sep|>4";
    k3_outp_feed(p, part1, strlen(part1), &d);
    acc_add(&a, &d);
    k3_outp_delta_clear(&d);
    CHECK(a.n_calls == 1 && a.args[0].n == 0);  /* the number is not complete yet */
    const char *part2 = "2<|close|>argument<|sep|><|open|>argument key=\"code\" type=\"string\"<|sep|>"
                        "print(\"hi\")\nx = 1";
    k3_outp_feed(p, part2, strlen(part2), &d);
    acc_add(&a, &d);
    k3_outp_delta_clear(&d);
    CHECK(str_is(&a.args[0], "{\"n\": 42, \"code\": \"print(\\\"hi\\\")\\nx = 1"));
    const char *part3 = "<|close|>argument<|sep|><|close|>call<|sep|>";
    k3_outp_feed(p, part3, strlen(part3), &d);
    k3_outp_finish(p, K3_OUTP_STOP, &d);
    acc_add(&a, &d);
    CHECK(str_is(&a.args[0], "{\"n\": 42, \"code\": \"print(\\\"hi\\\")\\nx = 1\"}"));
    CHECK(acc_matches(&a, k3_outp_result(p)));
    acc_free(&a);
    k3_outp_delta_free(&d);
    k3_outp_free(p);
}

/* Through ids, marker text spelled with ordinary tokens is text: a model quoting
 * "<|close|>argument<|sep|>" inside a code argument does not end the argument (the text
 * path, like vLLM's regexes, cannot tell). */
static void test_literal_markers_in_ids(void)
{
    struct k3_tok_ids ids = {0};
    const char *a = "<|open|>call tool=\"f\"<|sep|><|open|>argument key=\"code\" type=\"string\"<|sep|>";
    const char *b = "print('<|close|>argument<|sep|>')";
    const char *c = "<|close|>argument<|sep|><|close|>call<|sep|><|end_of_msg|>";
    k3_tok_encode(tok, a, strlen(a), K3_TOK_SPECIAL, NULL, &ids);
    k3_tok_encode(tok, b, strlen(b), K3_TOK_PLAIN, NULL, &ids);
    k3_tok_encode(tok, c, strlen(c), K3_TOK_SPECIAL, NULL, &ids);
    struct k3_outp_cfg cfg = {.thinking = 0, .tool_names = declared, .n_tool_names = 3};
    struct k3_outp *p = k3_outp_new(&cfg);
    struct k3_outp_delta d = {0};
    struct k3_detok dt;
    k3_detok_init(&dt, tok);
    struct acc acc = {0};
    for (size_t i = 0; i < ids.n; i++) {  /* one id per delta */
        CHECK(k3_outp_feed_ids(p, &dt, &ids.ids[i], 1, &d) == 0);
        acc_add(&acc, &d);
        k3_outp_delta_clear(&d);
    }
    k3_outp_finish(p, K3_OUTP_STOP, &d);
    acc_add(&acc, &d);
    const struct k3_outp_result *r = k3_outp_result(p);
    CHECK(r->n_calls == 1 && r->n_calls &&
          str_is(&r->calls[0].args, "{\"code\": \"print('<|close|>argument<|sep|>')\"}"));
    CHECK(acc_matches(&acc, r) && !strcmp(r->finish_reason, "tool_calls"));
    int32_t bad = 1 << 30;
    CHECK(k3_outp_feed_ids(p, &dt, &bad, 1, &d) == 0);  /* after finish: ignored */
    acc_free(&acc);
    k3_outp_delta_free(&d);
    k3_outp_free(p);
    k3_tok_ids_free(&ids);
}

int main(void)
{
    struct k3_err err;
    if (k3_tok_load_files(&tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "tokenizer: %s\n", err.msg);
        return 1;
    }
    test_example();
    test_missing_closers();
    test_calls_in_unclosed_think();
    test_truncation();
    test_bad_values_and_names();
    test_drop_and_plain();
    test_string_args_stream();
    test_literal_markers_in_ids();
    k3_tok_free(tok);
    return k3_test_summary();
}
