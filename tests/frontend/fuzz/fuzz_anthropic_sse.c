/* fuzz_anthropic_sse.c - libFuzzer target for the Anthropic Message and SSE writer over
 * the K3 output parser. Every input is generated text; it is parsed whole, in random
 * chunks (which cut UTF-8 characters) and one token id at a time (the server's path), each
 * run feeding the event writer. The contract checked: the events read back by a strict
 * client (anthropic_client.h) follow the grammar and equal the non-streamed Message built
 * from the parser's result, whenever the model kept its channel order (the writer reports
 * a reopened channel; then only the grammar is checked); every event is valid JSON.
 * Invalid UTF-8 in the input is replaced by '?' first: the model's text is UTF-8 (the
 * detokenizer holds partial characters), and a JSON reader cannot compare invalid bytes.
 * Input: byte 0 = flags (bit 0 thinking, 1 drop_calls, 2 finish by length, 3 declared-name
 * filter, 4 a stop sequence matched), byte 1 = chunking seed, the rest = generated text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../anthropic_client.h"
#include "frontend/anthropic.h"

static const char *const names[] = {"f", "get_weather"};
static struct k3_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct k3_err err;
    if (k3_tok_load_files(&tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "fuzz_anthropic_sse: %s\n", err.msg);
        abort();
    }
    return 0;
}

/* s with every byte that does not start a valid UTF-8 sequence replaced by '?'. */
static char *utf8_fix(const uint8_t *s, size_t n)
{
    char *t = malloc(n + 1);
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        int ok = len && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = (s[i + k] & 0xc0) == 0x80;
        if (ok && len == 3) {  /* no overlongs, no surrogates */
            ok = !(c == 0xe0 && s[i + 1] < 0xa0) && !(c == 0xed && s[i + 1] >= 0xa0);
        } else if (ok && len == 4) {
            ok = !(c == 0xf0 && s[i + 1] < 0x90) && !(c == 0xf4 && s[i + 1] >= 0x90);
        }
        if (!ok) {
            t[i++] = '?';
            continue;
        }
        memcpy(t + i, s + i, len);
        i += len;
    }
    t[n] = 0;
    return t;
}

static void run(const struct k3_outp_cfg *cfg, const char *s, size_t n, int why, int chunking,
                unsigned seed, const char *stop)
{
    struct k3_outp *p = k3_outp_new(cfg);
    struct k3_outp_delta d = {0};
    struct k3_sbuf sse = {0};
    struct k3_anth_usage u = {.input_tokens = 5, .output_tokens = 0};
    struct k3_anth_stream *w = k3_anth_stream_new("msg_fuzz", "m");
    k3_anth_stream_begin(w, &u, &sse);
    if (chunking == 2) {
        struct k3_tok_ids ids = {0};
        k3_tok_encode(tok, s, n, K3_TOK_SPECIAL, NULL, &ids);
        struct k3_detok dt;
        k3_detok_init(&dt, tok);
        for (size_t i = 0; i < ids.n; i++) {
            if (k3_outp_feed_ids(p, &dt, &ids.ids[i], 1, &d)) __builtin_trap();
            k3_anth_stream_feed(w, &d, &sse);
            k3_outp_delta_clear(&d);
        }
        char tail[16];
        int m = k3_detok_flush(&dt, tail);
        k3_outp_feed(p, tail, (size_t)m, &d);
        k3_tok_ids_free(&ids);
    } else {
        for (size_t i = 0; i < n;) {
            size_t step = chunking ? 1 + (seed = seed * 1103515245u + 12345u) % 16 : n;
            if (step > n - i) step = n - i;
            k3_outp_feed(p, s + i, step, &d);
            k3_anth_stream_feed(w, &d, &sse);
            k3_outp_delta_clear(&d);
            i += step;
        }
    }
    k3_outp_finish(p, why ? K3_OUTP_LENGTH : K3_OUTP_STOP, &d);
    k3_anth_stream_feed(w, &d, &sse);
    u.output_tokens = 9;
    k3_anth_stream_end(w, k3_outp_result(p), stop, &u, &sse);
    char *whole = k3_anth_message_json("msg_fuzz", "m", k3_outp_result(p), stop, &u);
    json_t *ref = json_loads(whole, JSON_ALLOW_NUL, NULL);
    if (!ref) __builtin_trap();
    struct client c;
    client_init(&c);
    client_read(&c, sse.p, sse.n);
    if (c.bad || !c.stopped) __builtin_trap();
    if (!k3_anth_stream_reopened(w) && !json_equal(c.msg, ref)) __builtin_trap();
    client_free(&c);
    json_decref(ref);
    free(whole);
    k3_sbuf_free(&sse);
    k3_anth_stream_free(w);
    k3_outp_delta_free(&d);
    k3_outp_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    struct k3_outp_cfg cfg = {.thinking = data[0] & 1, .drop_calls = (data[0] >> 1) & 1,
                              .tool_names = (data[0] & 8) ? names : NULL, .n_tool_names = 2,
                              .id_seed = 7};
    int why = (data[0] >> 2) & 1;
    const char *stop = (data[0] & 16) ? "###" : NULL;
    char *s = utf8_fix(data + 2, size - 2);
    for (int chunking = 0; chunking < 3; chunking++) run(&cfg, s, size - 2, why, chunking, data[1] | 1u, stop);
    free(s);
    return 0;
}
