/* api_util.h - pieces the OpenAI-style modules share: the sampling policy, stop strings,
 * logprob JSON, lossy UTF-8 strings. Internal to src/server. */
#ifndef K3_SERVER_API_UTIL_H
#define K3_SERVER_API_UTIL_H

#include <jansson.h>

#include "server/gen.h"
#include "server/route.h"

/* Checks temperature, top_p, presence/frequency penalties and n of body against the
 * server's policy (kimi: KVV's limits; open: OpenAI's ranges) and fills smp (those, top_k /
 * min_p / repetition_penalty when given, and seed: the request's or a fresh random one).
 * def_temperature applies when the body has none. Returns 0, or -1 with a 400 in out. */
int k3_api_sampling(struct k3_srv *s, json_t *body, double def_temperature, struct k3_sampling *smp,
                    struct k3_srv_resp *out);
/* "stop": a string or an array of strings into p->stops (pointing into body). */
int k3_api_stops(const json_t *body, struct k3_gen_params *p, struct k3_srv_resp *out);
/* A JSON string from bytes that may not be valid UTF-8 (invalid bytes become U+FFFD). */
json_t *k3_api_str(const char *p, size_t n);
/* OpenAI chat logprobs content entries, appended to arr. */
void k3_api_chat_logprobs(const struct k3_tok *tok, const struct k3_gen_logprob *lp, size_t n,
                          json_t *arr);
/* usage object (chat and completions). */
json_t *k3_api_usage(const struct k3_gen_usage *u);

#endif
