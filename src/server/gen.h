/* gen.h - one generation request between an API module and the scheduler: the module
 * submits rendered prompt ids with sampling, output-parser and stop settings; the step
 * thread's callbacks detokenize, parse (k3_outp_feed_ids), apply stop strings and queue
 * what is ready; the module's HTTP thread takes it (k3_gen_wait) and formats it.
 *
 *   struct k3_gen *g;
 *   if (k3_gen_start(s, &params, &g, &e)) { k3_srv_api_error(out, &e); return; }  429/503/400
 *   struct k3_gen_events ev = {0};
 *   while (!ev.done) { k3_gen_wait(g, 1.0, &ev); ...send ev's deltas...; k3_gen_events_clear(&ev); }
 *   (non-streamed: wait without clearing, or read k3_gen_result once ev.done)
 *   k3_gen_events_free(&ev);
 *   k3_gen_release(g);        cancels the sequence if it has not finished (client gone)
 *
 * Ownership: a k3_gen has two references, the module's and the scheduler's (dropped in
 * on_finish, after which no callback touches it); whichever is dropped last frees it. So a
 * client that disconnects mid-stream releases its reference at once, the cancel takes
 * effect at the next step, and the step thread never waits for, or touches freed memory
 * of, an HTTP thread. Callbacks only lock the request's own mutex, briefly.
 *
 * Stop strings apply to the visible text (content, or the raw text without a parser): text
 * that could still be the start of a stop string is held back, the match and everything
 * after it is dropped, and the sequence stops with finish_reason "stop". The streamed
 * deltas and the non-streamed result are built from the same released pieces, so they are
 * identical for the same seeded request. */
#ifndef K3_SERVER_GEN_H
#define K3_SERVER_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/step_plan.h"
#include "frontend/out_parse.h"
#include "frontend/request.h"
#include "server/server.h"

#define K3_GEN_MAX_STOPS 16

struct k3_gen_params {
    const int32_t *prompt;       /* copied */
    int n_prompt;
    int prompt_tokens;           /* what usage reports (chat: without the 3-id stub) */
    int max_tokens;              /* <= 0: up to the context window */
    struct k3_sampling sampling; /* n_prompt is filled in; n_logprobs = top logprobs */
    int logprobs;                /* record each sampled token's logprob (and n_logprobs tops) */
    int parse;                   /* 1: K3 output parser with outp; 0: raw text into content */
    struct k3_outp_cfg outp;     /* the tool names are copied */
    const char *stops[K3_GEN_MAX_STOPS]; /* stop strings (copied) */
    int n_stops;
    int32_t stop_ids[8];         /* stop token ids; 0 given = the model's end of message */
    int n_stop_ids;
};

struct k3_gen_logprob {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_ids[K3_PLAN_TOP_MAX];
    float top_logprobs[K3_PLAN_TOP_MAX];
};

struct k3_gen_usage {
    int prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens;
};

/* What arrived since the events were last cleared. */
struct k3_gen_events {
    struct k3_outp_delta delta;  /* reasoning, content and tool-call pieces */
    struct k3_gen_logprob *lp;   /* one per sampled token, in order */
    size_t n_lp, cap_lp;
    int n_tokens;                /* tokens generated so far (all of them, not since clear) */
    int done;                    /* finished: the fields below are final */
    const char *finish_reason;   /* "stop" | "length" | "tool_calls"; NULL: no answer */
    const char *error;           /* done without an answer: "cancelled" | "rejected" */
    int stop_matched;            /* 1 + the index of the stop string that ended the answer
                                    (Anthropic's stop_sequence); 0: none */
    struct k3_gen_usage usage;
};

/* The whole answer, valid once done (the concatenation of every delta). */
struct k3_gen_call {
    char id[K3_OUTP_ID_BYTES];
    char *name;
    struct k3_sbuf args;
};
struct k3_gen_result {
    struct k3_sbuf reasoning, content;
    struct k3_gen_call *calls;
    size_t n_calls, cap_calls;
};

struct k3_gen;

/* Any thread. Errors (e->status): 400 the prompt does not fit the context (code
 * context_length_exceeded) or an id is outside the vocabulary; 429 too many requests in
 * flight or the scheduler's queue is full; 503 draining or no engine. */
int k3_gen_start(struct k3_srv *s, const struct k3_gen_params *p, struct k3_gen **out,
                 struct k3_api_err *e);
/* Appends what arrived to ev, waiting at most timeout_s for something. Returns 1 when ev
 * changed (new pieces, or done), 0 on timeout. Once done, returns 1 at once. */
int k3_gen_wait(struct k3_gen *g, double timeout_s, struct k3_gen_events *ev);
/* A non-streamed answer: waits until done (ev accumulates every piece). Returns 0; -1 when
 * nothing arrived for idle_timeout_s; -2 when the client left (out->client_alive), after
 * cancelling the sequence. */
int k3_gen_wait_all(struct k3_gen *g, const struct k3_srv_resp *out, double idle_timeout_s,
                    struct k3_gen_events *ev);
/* The whole answer; NULL until done. Owned by g. */
const struct k3_gen_result *k3_gen_result(struct k3_gen *g);
/* Asks the scheduler to stop the sequence (takes effect at the next step). */
void k3_gen_cancel(struct k3_gen *g);
/* Drops the module's reference; cancels the sequence first if it is not done. */
void k3_gen_release(struct k3_gen *g);

void k3_gen_events_clear(struct k3_gen_events *ev);  /* keeps n_tokens, done and usage */
void k3_gen_events_free(struct k3_gen_events *ev);

#endif
