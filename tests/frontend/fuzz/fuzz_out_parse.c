/* fuzz_out_parse.c - libFuzzer target for the K3 output parser. Besides "no crash, no leak,
 * no hang" it checks the parser's contract on every input: the parse of the whole text
 * equals the parse of the same text in random chunks, and the concatenated deltas equal
 * the result; a difference traps.
 * A third run feeds the same text as token ids (markers as special ids) one id at a time,
 * the server's path; its deltas must add up to its result.
 * Input: byte 0 = flags (bit 0 thinking, 1 drop_calls, 2 finish by length, 3 declared-name
 * filter), byte 1 = chunking seed, the rest = generated text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/out_parse.h"

static const char *const names[] = {"f", "get_weather"};
static struct k3_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct k3_err err;
    if (k3_tok_load_files(&tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "fuzz_out_parse: %s\n", err.msg);
        abort();
    }
    return 0;
}

struct acc {
    struct k3_sbuf r, c, args;  /* args of every call, separated by a NUL */
    size_t n_calls;
};

static void add(struct acc *a, struct k3_outp_delta *d)
{
    k3_sbuf_add(&a->r, d->reasoning.p, d->reasoning.n);
    k3_sbuf_add(&a->c, d->content.p, d->content.n);
    for (size_t i = 0; i < d->n_tools; i++) {
        if (d->tools[i].first) {
            if ((size_t)d->tools[i].index != a->n_calls) __builtin_trap();
            if (a->n_calls) k3_sbuf_addc(&a->args, 0);
            a->n_calls++;
        }
        k3_sbuf_add(&a->args, d->tools[i].args.p, d->tools[i].args.n);
    }
    k3_outp_delta_clear(d);
}

static struct k3_outp *run(const struct k3_outp_cfg *cfg, const char *s, size_t n, int why,
                           unsigned seed, struct acc *a)
{
    struct k3_outp *p = k3_outp_new(cfg);
    struct k3_outp_delta d = {0};
    for (size_t i = 0; i < n;) {
        size_t step = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 16 : n;
        if (step > n - i) step = n - i;
        k3_outp_feed(p, s + i, step, &d);
        add(a, &d);
        i += step;
    }
    k3_outp_finish(p, why ? K3_OUTP_LENGTH : K3_OUTP_STOP, &d);
    add(a, &d);
    k3_outp_delta_free(&d);
    return p;
}

static int eq(const struct k3_sbuf *x, const struct k3_sbuf *y)
{
    return x->n == y->n && (!x->n || !memcmp(x->p, y->p, x->n));
}

static void check(const struct k3_outp_result *r, const struct acc *a)
{
    if (!eq(&r->reasoning, &a->r) || !eq(&r->content, &a->c) || r->n_calls != a->n_calls)
        __builtin_trap();
    struct k3_sbuf all = {0};
    for (size_t i = 0; i < r->n_calls; i++) {
        if (i) k3_sbuf_addc(&all, 0);
        k3_sbuf_add(&all, r->calls[i].args.p, r->calls[i].args.n);
    }
    if (!eq(&all, &a->args)) __builtin_trap();
    k3_sbuf_free(&all);
}

static void acc_free(struct acc *a)
{
    k3_sbuf_free(&a->r);
    k3_sbuf_free(&a->c);
    k3_sbuf_free(&a->args);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    struct k3_outp_cfg cfg = {.thinking = data[0] & 1, .drop_calls = (data[0] >> 1) & 1,
                              .tool_names = (data[0] & 8) ? names : NULL, .n_tool_names = 2,
                              .id_seed = 7};
    int why = (data[0] >> 2) & 1;
    const char *s = (const char *)data + 2;
    size_t n = size - 2;
    struct acc a = {0}, b = {0};
    struct k3_outp *whole = run(&cfg, s, n, why, 0, &a);
    struct k3_outp *chunked = run(&cfg, s, n, why, data[1] | 1u, &b);
    const struct k3_outp_result *x = k3_outp_result(whole), *y = k3_outp_result(chunked);
    check(x, &a);
    check(y, &b);
    if (!eq(&x->reasoning, &y->reasoning) || !eq(&x->content, &y->content) ||
        x->n_calls != y->n_calls || strcmp(x->finish_reason, y->finish_reason))
        __builtin_trap();
    for (size_t i = 0; i < x->n_calls; i++)
        if (strcmp(x->calls[i].name, y->calls[i].name) || !eq(&x->calls[i].args, &y->calls[i].args))
            __builtin_trap();
    acc_free(&a);
    acc_free(&b);
    k3_outp_free(whole);
    k3_outp_free(chunked);

    struct k3_tok_ids ids = {0};
    k3_tok_encode(tok, s, n, K3_TOK_SPECIAL, NULL, &ids);
    struct k3_outp *byid = k3_outp_new(&cfg);
    struct k3_outp_delta d = {0};
    struct k3_detok dt;
    struct acc c = {0};
    k3_detok_init(&dt, tok);
    for (size_t i = 0; i < ids.n; i++) {
        if (k3_outp_feed_ids(byid, &dt, &ids.ids[i], 1, &d)) __builtin_trap();
        add(&c, &d);
    }
    char tail[16];
    int m = k3_detok_flush(&dt, tail);
    k3_outp_feed(byid, tail, (size_t)m, &d);
    k3_outp_finish(byid, why ? K3_OUTP_LENGTH : K3_OUTP_STOP, &d);
    add(&c, &d);
    check(k3_outp_result(byid), &c);
    acc_free(&c);
    k3_outp_delta_free(&d);
    k3_outp_free(byid);
    k3_tok_ids_free(&ids);
    return 0;
}
