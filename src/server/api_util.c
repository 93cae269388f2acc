/* api_util.c - see api_util.h. */
#include "server/api_util.h"

#include <math.h>
#include <string.h>

#include "server/srv_internal.h"

static int number(const json_t *body, const char *key, double *v, struct k3_srv_resp *out)
{
    const json_t *j = json_object_get(body, key);
    if (!j || json_is_null(j)) return 0;
    if (!json_is_number(j)) {
        k3_srv_error(out, 400, "invalid_request_error", key, NULL, "'%s' must be a number", key);
        return -1;
    }
    *v = json_number_value(j);
    return 1;
}

int k3_api_sampling(struct k3_srv *s, json_t *body, double def_temperature, struct k3_sampling *smp,
                    struct k3_srv_resp *out)
{
    int kimi = s->cfg.policy == K3_SRV_POLICY_KIMI;
    double v;
    int has;
    smp->temperature = (float)def_temperature;
    smp->top_p = kimi ? 0.95f : 1.0f;
    smp->repetition_penalty = 1.0f;
    if ((has = number(body, "temperature", &v, out)) < 0) return -1;
    if (has && !(v >= 0 && v <= (kimi ? 1.0 : 2.0))) {
        k3_srv_error(out, 400, "invalid_request_error", "temperature", NULL,
                     "'temperature' must be between 0 and %s for this model", kimi ? "1" : "2");
        return -1;
    }
    if (has) smp->temperature = (float)v;
    if ((has = number(body, "top_p", &v, out)) < 0) return -1;
    if (has && (kimi ? fabs(v - 0.95) > 1e-9 : !(v > 0 && v <= 1))) {
        k3_srv_error(out, 400, "invalid_request_error", "top_p", NULL,
                     kimi ? "'top_p' is fixed at 0.95 for this model; omit it or send 0.95"
                          : "'top_p' must be in (0, 1]");
        return -1;
    }
    if (has) smp->top_p = (float)v;
    static const char *const pen[] = {"presence_penalty", "frequency_penalty"};
    for (int k = 0; k < 2; k++) {
        if ((has = number(body, pen[k], &v, out)) < 0) return -1;
        if (has && (kimi ? v != 0.0 : !(v >= -2 && v <= 2))) {
            k3_srv_error(out, 400, "invalid_request_error", pen[k], NULL,
                         kimi ? "'%s' is fixed at 0 for this model; omit it or send 0"
                              : "'%s' must be between -2 and 2", pen[k]);
            return -1;
        }
        if (has) *(k ? &smp->frequency_penalty : &smp->presence_penalty) = (float)v;
    }
    const json_t *n = json_object_get(body, "n");
    if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1)) {
        k3_srv_error(out, 400, "invalid_request_error", "n", NULL,
                     "'n' must be 1: this server returns one choice");
        return -1;
    }
    /* vLLM's extensions, outside Kimi's policy */
    if ((has = number(body, "top_k", &v, out)) < 0) return -1;
    if (has) smp->top_k = v > 0 ? (int32_t)v : 0;
    if ((has = number(body, "min_p", &v, out)) < 0) return -1;
    if (has) smp->min_p = (float)v;
    if ((has = number(body, "repetition_penalty", &v, out)) < 0) return -1;
    if (has && v > 0) smp->repetition_penalty = (float)v;
    const json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed) && !json_is_integer(seed)) {
        k3_srv_error(out, 400, "invalid_request_error", "seed", NULL, "'seed' must be an integer");
        return -1;
    }
    smp->seed = json_is_integer(seed) ? (uint64_t)json_integer_value(seed) : k3_srv_random(s);
    return 0;
}

int k3_api_stops(const json_t *body, struct k3_gen_params *p, struct k3_srv_resp *out)
{
    const json_t *st = json_object_get(body, "stop");
    if (!st || json_is_null(st)) return 0;
    if (json_is_string(st)) {
        p->stops[p->n_stops++] = json_string_value(st);
        return 0;
    }
    if (json_is_array(st) && json_array_size(st) <= K3_GEN_MAX_STOPS) {
        for (size_t i = 0; i < json_array_size(st); i++) {
            const json_t *e = json_array_get(st, i);
            if (!json_is_string(e)) goto bad;
            p->stops[p->n_stops++] = json_string_value(e);
        }
        return 0;
    }
bad:
    k3_srv_error(out, 400, "invalid_request_error", "stop", NULL,
                 "'stop' must be a string or an array of at most %d strings", K3_GEN_MAX_STOPS);
    return -1;
}

json_t *k3_api_str(const char *p, size_t n)
{
    json_t *j = json_stringn(p ? p : "", n);
    if (j) return j;
    /* not valid UTF-8 (a token's raw bytes): keep the valid sequences, U+FFFD for the rest */
    struct k3_sbuf b = {0};
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80 ? 1 : (u[i] >> 5) == 6 ? 2 : (u[i] >> 4) == 14 ? 3 : (u[i] >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + len <= n && u[i] != 0;
        for (size_t k = 1; ok && k < len; k++) ok = (u[i + k] & 0xc0) == 0x80;
        json_t *t = ok ? json_stringn(p + i, len) : NULL;
        if (t) {
            k3_sbuf_add(&b, p + i, len);
            json_decref(t);
            i += len;
        } else {
            k3_sbuf_adds(&b, "\xef\xbf\xbd");
            i++;
        }
    }
    j = json_stringn(b.p ? b.p : "", b.n);
    k3_sbuf_free(&b);
    return j ? j : json_string("");
}

static json_t *token_entry(const struct k3_tok *tok, int32_t id, float logprob)
{
    size_t n = 0;
    const uint8_t *bytes = k3_tok_bytes(tok, id, &n);
    json_t *arr = json_array();
    for (size_t i = 0; bytes && i < n; i++) json_array_append_new(arr, json_integer(bytes[i]));
    return json_pack("{s:o,s:f,s:o}", "token", k3_api_str((const char *)bytes, bytes ? n : 0),
                     "logprob", (double)logprob, "bytes", arr);
}

void k3_api_chat_logprobs(const struct k3_tok *tok, const struct k3_gen_logprob *lp, size_t n,
                          json_t *arr)
{
    for (size_t i = 0; i < n; i++) {
        json_t *e = token_entry(tok, lp[i].token, lp[i].logprob);
        json_t *top = json_array();
        for (int k = 0; k < lp[i].n_top; k++)
            json_array_append_new(top, token_entry(tok, lp[i].top_ids[k], lp[i].top_logprobs[k]));
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(arr, e);
    }
}

json_t *k3_api_usage(const struct k3_gen_usage *u)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i},s:{s:i}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)u->cached_tokens, "completion_tokens_details",
                     "reasoning_tokens", (json_int_t)u->reasoning_tokens);
}
