/* dump_regen.c - see dump_regen.h. Why this policy:
 *
 * - The reply is the model's exact generated ids, not a re-rendering of what
 *   the output parser made of them. When a drafter serves, the target's own
 *   sampled ids are what it must predict, token for token; re-tokenizing the
 *   parsed text can pick other ids (the model is free to emit non-canonical
 *   tokenizations) and drops whatever the parser drops (stray text, a
 *   malformed call). The stop id (<|end_of_msg|>) is kept: the drafter also
 *   has to predict the end.
 * - Earlier turns, as context, are what a client sends back: the parsed
 *   reasoning, content and tool calls, rendered by the chat format. That is
 *   the prompt the model sees in serving at turn k, so the reply to turn k is
 *   drawn from the distribution traffic produces. K3 keeps earlier reasoning
 *   in the think channel, so little is lost; a call whose arguments do not
 *   parse as a JSON object cannot be rendered and is left out.
 * - Every turn rather than only the last: each turn is the model's own reply
 *   to a realistic context, so each is training data. All conversations run
 *   at once, and a conversation's next turn is submitted the moment its
 *   previous reply ends (from the scheduler's on_finish), so continuous
 *   batching keeps the batch full; rounds with a barrier would wait for the
 *   longest reply of every round.
 * - Sampling defaults to K3's own (temperature 1.0 with thinking, 0.6
 *   without, top_p 0.95): the drafter is deployed against sampled traffic,
 *   and greedy decoding of a reasoning model loops. --temperature 0 is
 *   greedy. Seeds are below 2^53 so a JSON number carries them exactly
 *   (k3 generate's "seed" field reproduces a reply).
 * - A reply cut by --max-tokens ends its conversation: the next turn would
 *   be conditioned on a reply no client would have, and a drafter gains
 *   nothing from the rest of the original conversation, which answered
 *   something else. */
#include "cli/dump_regen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/engine_job.h"
#include "core/clock.h"
#include "core/log.h"
#include "frontend/chat_render.h"
#include "frontend/out_parse.h"
#include "io/gen_journal.h"
#include "mpi/mpi_check.h"

#define CMD "k3 dump --generate"

/* One input line through its turns. */
struct item {
    const struct k3_dump_sample *src;
    int chat;                   /* a messages line */
    struct k3_chat_req req;     /* chat: its messages take the regenerated replies */
    int *turn_msg;              /* chat: message index of each assistant turn */
    int n_turns, turn;          /* turn: the one being generated */
    int active;
    float temperature, top_p;
    int32_t *prompt;            /* this turn's prompt */
    int64_t n_prompt;
    int ends_in_think;          /* the prompt leaves the model in the think channel */
    /* this turn */
    uint64_t seed;
    int32_t *out;
    int n_out, cap_out;
    enum k3_finish finish;
    /* the sample */
    int32_t *ids;
    uint8_t *mask;
    int64_t n;
};

struct k3_regen {
    struct item *it;
    int64_t n;
    const struct k3_tok *tok;
    int64_t vocab;
    struct k3_regen_opts o;
    int32_t stop_ids[2];
    int n_stop_ids;
    int64_t context;            /* enough for any turn's request */
    struct k3_gen_journal journal;
    /* rank 0's step thread */
    struct k3_engine_job *e;    /* NULL when every reply is in the journal */
    struct {
        uint64_t id;
        int64_t item;
    } *sub;                     /* every request submitted, in submit (= id) order */
    int64_t n_sub, n_running, n_generated, n_journaled, n_done, n_tokens;
    double t_start, t_sync, t_print;
    int failed;                 /* in a callback: nothing new is submitted */
    struct k3_err fail_err;
    int64_t n_cut;              /* conversations ended early (length, or a turn that no longer renders) */
};

/* ------------------------------------------------------------ chat helpers */

static int64_t lcp(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    int64_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static int render(const struct k3_tok *tok, const struct k3_chat_req *req, size_t n_msgs, int gen,
                  struct k3_tok_ids *ids, int *ends_in_think, struct k3_err *err)
{
    json_t *msgs = json_array();
    for (size_t i = 0; i < n_msgs; i++) json_array_append(msgs, json_array_get(req->messages, i));
    struct k3_chat_opts o = k3_chat_req_opts(req);
    o.add_generation_prompt = gen;
    o.continue_final = 0;
    struct k3_chat_prompt p = {0};
    int rc = k3_chat_render(msgs, req->tools, &o, &p, err);
    json_decref(msgs);
    if (rc) return -1;
    ids->n = 0;
    k3_chat_prompt_encode(tok, &p, ids);
    if (ends_in_think) *ends_in_think = p.ends_in_think;
    k3_chat_prompt_free(&p);
    return 0;
}

int k3_dump_render(const struct k3_tok *tok, const struct k3_chat_req *req, size_t n_msgs, int gen,
                   struct k3_tok_ids *ids, struct k3_err *err)
{
    return render(tok, req, n_msgs, gen, ids, NULL, err);
}

int k3_dump_assistant_mask(const struct k3_tok *tok, const struct k3_chat_req *req, size_t n_msgs,
                           const int32_t *ids, int64_t n, uint8_t *mask, struct k3_err *err)
{
    struct k3_tok_ids part = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < n_msgs; i++) {
        const char *role = json_string_value(json_object_get(json_array_get(req->messages, i), "role"));
        if (!role || strcmp(role, "assistant") != 0) continue;
        rc = k3_dump_render(tok, req, i, 1, &part, err);
        int64_t a = rc ? 0 : lcp(part.ids, (int64_t)part.n, ids, n);
        if (!rc) rc = k3_dump_render(tok, req, i + 1, 0, &part, err);
        int64_t b = rc ? 0 : lcp(part.ids, (int64_t)part.n, ids, n);
        for (int64_t t = a; t < b; t++) mask[t] = 1;
    }
    k3_tok_ids_free(&part);
    return rc;
}

/* ------------------------------------------------------------ preparing */

/* splitmix64: request (sample, turn) gets its own stream; 53 bits (see the file comment). */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t request_seed(uint64_t base, int64_t sample, int turn)
{
    return mix(mix(base) ^ mix((uint64_t)sample * 4096u + (uint64_t)turn)) >> 11;
}

/* The rendered prompt of it's current turn into it->prompt. */
static int render_turn(struct k3_regen *g, struct item *it, struct k3_err *err)
{
    struct k3_tok_ids ids = {0};
    int think = 0;
    if (render(g->tok, &it->req, (size_t)it->turn_msg[it->turn], 1, &ids, &think, err)) return -1;
    for (size_t t = 0; t < ids.n; t++)
        if (ids.ids[t] >= g->vocab) {
            k3_tok_ids_free(&ids);
            return k3_err_set(err, "the rendered conversation has token %d, outside this model's vocabulary "
                              "(%lld): is the tokenizer the model's?", ids.ids[t], (long long)g->vocab);
        }
    free(it->prompt);
    it->prompt = ids.ids, it->n_prompt = (int64_t)ids.n, it->ends_in_think = think;
    return 0;
}

static int prepare_item(struct k3_regen *g, struct item *it, struct k3_err *err)
{
    const struct k3_dump_sample *s = it->src;
    float t_flag = g->o.temperature;
    int64_t longest;
    if (!s->request) {
        if (s->has_mask)
            return k3_err_set(err, "\"loss_mask\" cannot be given with --generate: the loss mask is the "
                              "generated continuation");
        it->prompt = malloc(sizeof(int32_t) * (size_t)s->n);
        K3_CHECK(it->prompt, "out of memory");
        memcpy(it->prompt, s->ids, sizeof(int32_t) * (size_t)s->n);
        it->n_prompt = s->n, it->n_turns = 1;
        it->temperature = t_flag >= 0 ? t_flag : 1.0f, it->top_p = 0.95f;
        longest = s->n + g->o.max_tokens;
    } else {
        struct k3_api_err e;
        if (k3_chat_req_from_json(s->request, &it->req, &e))
            return k3_err_set(err, "%s%s%s", e.param[0] ? e.param : "", e.param[0] ? ": " : "", e.message);
        it->chat = 1;
        if (it->req.partial)
            return k3_err_set(err, "a partial assistant turn cannot be regenerated with --generate (remove "
                              "\"partial\")");
        size_t n_msgs = json_array_size(it->req.messages);
        it->turn_msg = malloc(sizeof(int) * (n_msgs ? n_msgs : 1));
        K3_CHECK(it->turn_msg, "out of memory");
        for (size_t i = 0; i < n_msgs; i++) {
            const char *role = json_string_value(json_object_get(json_array_get(it->req.messages, i), "role"));
            if (role && !strcmp(role, "assistant")) it->turn_msg[it->n_turns++] = (int)i;
        }
        if (!it->n_turns)
            return k3_err_set(err, "the conversation has no assistant turn, so --generate has nothing to "
                              "regenerate (end it with an assistant message; its content is replaced)");
        if (!g->tok) return k3_err_set(err, "messages need the checkpoint's tokenizer");
        it->temperature = t_flag >= 0 ? t_flag : (float)it->req.temperature;
        it->top_p = (float)it->req.top_p;
        if (render_turn(g, it, err)) return -1;
        /* a bound on any turn's request: the original conversation (its
         * replies then give way to ours), each reply at most max_tokens, plus
         * the closers a re-rendered reply may add */
        struct k3_tok_ids full = {0};
        if (k3_dump_render(g->tok, &it->req, (size_t)it->turn_msg[it->n_turns - 1] + 1, 0, &full, err)) return -1;
        longest = (int64_t)full.n + (int64_t)it->n_turns * (g->o.max_tokens + 64);
        k3_tok_ids_free(&full);
    }
    if (longest > g->context) g->context = longest;
    it->active = 1;
    return 0;
}

int k3_regen_prepare(struct k3_regen **out, struct k3_dump_input *in, const struct k3_tok *tok,
                     const struct k3_model_config *cfg, const struct k3_regen_opts *o, struct k3_err *err)
{
    struct k3_regen *g = calloc(1, sizeof *g);
    K3_CHECK(g, "out of memory");
    *out = g;
    g->tok = tok, g->vocab = cfg->vocab_size, g->o = *o;
    g->journal.fd = -1;
    /* The end of a reply: the model's eos (<|end_of_msg|> for K3) and, for
     * chat, the tokenizer's <|end_of_msg|> should a config name another eos. */
    if (cfg->eos_token_id >= 0 && cfg->eos_token_id < cfg->vocab_size)
        g->stop_ids[g->n_stop_ids++] = cfg->eos_token_id;
    int32_t eom = tok ? k3_tok_special_id(tok, "<|end_of_msg|>") : -1;
    if (eom >= 0 && eom < cfg->vocab_size && (!g->n_stop_ids || eom != g->stop_ids[0]))
        g->stop_ids[g->n_stop_ids++] = eom;
    g->n = in->n;
    g->it = calloc((size_t)in->n, sizeof *g->it);
    K3_CHECK(g->it, "out of memory");
    for (int64_t i = 0; i < in->n; i++) {
        g->it[i].src = &in->s[i];
        if (prepare_item(g, &g->it[i], err))
            return k3_err_prefix(err, "line %lld (id %s)", (long long)in->s[i].line, in->s[i].id);
    }
    if (k3_gen_journal_open(&g->journal, o->journal, o->identity, o->no_fsync, err)) return -1;
    if (g->journal.n)
        K3_INFO(CMD ": %lld replies already in %s%s", (long long)g->journal.n, o->journal,
                g->journal.complete ? " (all of them)" : "");
    return 0;
}

/* ------------------------------------------------------------ the pipeline */

/* The model's reply as the chat format's assistant message: what the output
 * parser finds in it (reasoning, content, the tool calls that render). */
static json_t *reply_message(const struct k3_regen *g, const struct item *it)
{
    struct k3_chat_prompt think = {.ends_in_think = it->ends_in_think};
    struct k3_outp_cfg oc = k3_chat_req_outp_cfg(&it->req, &think, it->seed);
    struct k3_outp *p = k3_outp_new(&oc);
    struct k3_detok dt;
    k3_detok_init(&dt, g->tok);
    struct k3_outp_delta d = {0};
    k3_outp_feed_ids(p, &dt, it->out, (size_t)it->n_out, &d);
    char tail[K3_DETOK_MAX_OUT + 8];
    int n = k3_detok_flush(&dt, tail);
    if (n > 0) k3_outp_feed(p, tail, (size_t)n, &d);
    k3_outp_finish(p, K3_OUTP_STOP, &d);
    k3_outp_delta_free(&d);
    const struct k3_outp_result *r = k3_outp_result(p);
    json_t *m = json_pack("{s:s,s:s%}", "role", "assistant", "content", r->content.p ? r->content.p : "",
                          r->content.n);
    if (r->reasoning.n) json_object_set_new(m, "reasoning_content", json_stringn(r->reasoning.p, r->reasoning.n));
    json_t *calls = json_array();
    for (size_t i = 0; i < r->n_calls; i++) {
        const struct k3_outp_call *c = &r->calls[i];
        json_t *args = c->complete && c->args.n ? json_loadb(c->args.p, c->args.n, 0, NULL) : NULL;
        if (json_is_object(args))
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s%}}", "id", c->id, "type", "function",
                                                   "function", "name", c->name ? c->name : "", "arguments",
                                                   c->args.p, c->args.n));
        json_decref(args);
    }
    if (json_array_size(calls)) json_object_set_new(m, "tool_calls", calls);
    else json_decref(calls);
    k3_outp_free(p);
    return m;
}

/* The sample: this turn's prompt, then the reply; the mask on the replies. */
static int finalize(struct k3_regen *g, struct item *it, struct k3_err *err)
{
    it->n = it->n_prompt + it->n_out;
    it->ids = malloc(sizeof(int32_t) * (size_t)it->n);
    it->mask = calloc((size_t)it->n, 1);
    K3_CHECK(it->ids && it->mask, "out of memory");
    memcpy(it->ids, it->prompt, sizeof(int32_t) * (size_t)it->n_prompt);
    memcpy(it->ids + it->n_prompt, it->out, sizeof(int32_t) * (size_t)it->n_out);
    memset(it->mask + it->n_prompt, 1, (size_t)it->n_out);
    it->active = 0;
    g->n_done++;
    if (it->chat)
        return k3_dump_assistant_mask(g->tok, &it->req, (size_t)it->turn_msg[it->turn], it->prompt, it->n_prompt,
                                      it->mask, err);
    return 0;
}

/* A reply is in it->out: the next turn's prompt, or the finished sample. */
static int collect(struct k3_regen *g, struct item *it, struct k3_err *err)
{
    int64_t i = it - g->it;
    if (it->finish != K3_FINISH_STOP && it->finish != K3_FINISH_LENGTH)
        return k3_err_set(err, "sample %lld (id %s), turn %d: the request was %s (a prompt of %lld tokens; the "
                          "engine's context is in its log line)", (long long)i, it->src->id, it->turn,
                          k3_finish_name(it->finish), (long long)it->n_prompt);
    int last = !it->chat || it->turn + 1 == it->n_turns;
    if (!last && it->finish == K3_FINISH_LENGTH) {
        last = 1;
        g->n_cut++;
    }
    if (!last) {
        /* the next turn sees this reply as the chat format renders it */
        int turn = it->turn;
        json_t *old = json_incref(json_array_get(it->req.messages, (size_t)it->turn_msg[turn]));
        json_array_set_new(it->req.messages, (size_t)it->turn_msg[turn], reply_message(g, it));
        int32_t *prompt = it->prompt;
        int64_t n_prompt = it->n_prompt;
        int think = it->ends_in_think;
        it->prompt = NULL;
        it->turn++;
        struct k3_err why;
        if (render_turn(g, it, &why)) {
            /* e.g. a tool result that answers a call this reply did not make: keep what renders */
            K3_WARN(CMD ": sample %lld (id %s) ends after turn %d: turn %d no longer renders (%s)", (long long)i,
                    it->src->id, turn, turn + 1, why.msg);
            json_array_set_new(it->req.messages, (size_t)it->turn_msg[turn], old);
            old = NULL;
            it->prompt = prompt, it->n_prompt = n_prompt, it->ends_in_think = think, it->turn = turn;
            last = 1;
            g->n_cut++;
        } else {
            free(prompt);
        }
        json_decref(old);
    }
    if (last && finalize(g, it, err)) return k3_err_prefix(err, "sample %lld (id %s)", (long long)i, it->src->id);
    return 0;
}

static int on_token(void *ctx, uint64_t id, const struct k3_sampled *t);
static void on_finish(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *u);

/* Takes it as far as it goes without the model: replies in the journal are
 * used, the first missing one is submitted (e NULL: none may be missing). */
static int advance(struct k3_regen *g, struct item *it, struct k3_err *err)
{
    int64_t i = it - g->it;
    while (it->active) {
        it->n_out = 0;
        it->finish = 0;
        it->seed = request_seed(g->o.seed, i, it->turn);
        const struct k3_gen_reply *r = k3_gen_journal_find(&g->journal, i, it->turn);
        if (!r) break;
        if (r->n > it->cap_out) {
            it->cap_out = r->n;
            it->out = realloc(it->out, sizeof *it->out * (size_t)it->cap_out);
            K3_CHECK(it->out, "out of memory");
        }
        memcpy(it->out, r->ids, sizeof *it->out * (size_t)r->n);
        it->n_out = r->n;
        it->finish = !strcmp(r->finish, "length") ? K3_FINISH_LENGTH : K3_FINISH_STOP;
        g->n_journaled++;
        if (collect(g, it, err)) return -1;
    }
    if (!it->active) return 0;
    if (!g->e)
        return k3_err_set(err, "%s says it is complete but has no reply for sample %lld turn %d; remove it to "
                          "generate again", g->o.journal, (long long)i, it->turn);
    struct k3_sched_request q = {
        .prompt = it->prompt, .n_prompt = (int)it->n_prompt, .max_tokens = g->o.max_tokens,
        .sampling = {.temperature = it->temperature, .top_p = it->top_p, .repetition_penalty = 1.0f, .seed = it->seed},
        .n_stop_ids = g->n_stop_ids, .cb = {on_token, on_finish, g}};
    memcpy(q.stop_ids, g->stop_ids, sizeof g->stop_ids);
    for (int k = 0; k < it->src->n_stop_ids && q.n_stop_ids < 8; k++) q.stop_ids[q.n_stop_ids++] = it->src->stop_ids[k];
    uint64_t id = k3_sched_submit(k3_engine_job_sched(g->e), &q, err);
    if (!id) return k3_err_prefix(err, "sample %lld (id %s), turn %d", (long long)i, it->src->id, it->turn);
    g->sub[g->n_sub].id = id, g->sub[g->n_sub].item = i;
    g->n_sub++;
    g->n_running++;
    return 0;
}

/* The item of a request: submissions are kept in submit order, which is id order. */
static struct item *item_of(struct k3_regen *g, uint64_t id)
{
    int64_t lo = 0, hi = g->n_sub - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (g->sub[mid].id == id) return &g->it[g->sub[mid].item];
        if (g->sub[mid].id < id) lo = mid + 1;
        else hi = mid - 1;
    }
    K3_FATAL(CMD ": a callback for unknown request %llu", (unsigned long long)id);
}

static int on_token(void *ctx, uint64_t id, const struct k3_sampled *t)
{
    struct k3_regen *g = ctx;
    struct item *it = item_of(g, id);
    if (it->n_out == it->cap_out) {
        it->cap_out = it->cap_out ? 2 * it->cap_out : 256;
        it->out = realloc(it->out, sizeof *it->out * (size_t)it->cap_out);
        K3_CHECK(it->out, "out of memory");
    }
    it->out[it->n_out++] = t->token;
    g->n_tokens++;
    return 0;
}

/* On the step thread, between steps: the reply goes to the journal and the
 * conversation's next turn is submitted at once, so the batch stays full
 * (no barrier between turns). After a failure nothing new is submitted;
 * what runs finishes and is journaled. */
static void on_finish(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *u)
{
    (void)u;
    struct k3_regen *g = ctx;
    struct item *it = item_of(g, id);
    it->finish = why;
    g->n_running--;
    g->n_generated++;
    if (why == K3_FINISH_STOP || why == K3_FINISH_LENGTH)
        k3_gen_journal_add(&g->journal, it - g->it, it->turn, it->seed, k3_finish_name(why), it->out, it->n_out);
    if (!g->failed && (collect(g, it, &g->fail_err) || advance(g, it, &g->fail_err))) g->failed = 1;
}

static void progress(struct k3_regen *g, int last)
{
    double t = k3_now_s();
    int tty = isatty(2);
    if (!last && t - g->t_print < (tty ? 0.5 : 5.0)) return;
    g->t_print = t;
    double dt = t - g->t_start > 1e-9 ? t - g->t_start : 1e-9;
    fprintf(stderr, "%s" CMD ": %lld/%lld samples done, %lld replies generated, %lld running  %.0f tok/s%s",
            tty ? "\r" : "", (long long)g->n_done, (long long)g->n, (long long)g->n_generated,
            (long long)g->n_running, (double)g->n_tokens / dt, tty && !last ? "" : "\n");
    fflush(stderr);
}

/* After each step: the journal about once a second (a kill then loses at most
 * that much generation), and the progress line. */
static void on_step(void *ctx, const struct k3_step_plan *plan, double step_s)
{
    (void)plan, (void)step_s;
    struct k3_regen *g = ctx;
    double t = k3_now_s();
    if (t - g->t_sync >= 1.0 && !g->failed) {
        if (k3_gen_journal_sync(&g->journal, &g->fail_err)) g->failed = 1;
        g->t_sync = t;
    }
    progress(g, 0);
}

/* Rank 0: every conversation from its first missing reply; g->e is NULL when
 * the journal already holds every reply. */
static int pipeline(struct k3_regen *g, struct k3_err *err)
{
    int64_t cap = 0;
    for (int64_t i = 0; i < g->n; i++) cap += g->it[i].n_turns;
    g->sub = malloc(sizeof *g->sub * (size_t)(cap ? cap : 1));
    K3_CHECK(g->sub, "out of memory");
    g->t_start = g->t_sync = g->t_print = k3_now_s();
    int rc = 0;
    for (int64_t i = 0; !rc && i < g->n; i++) rc = advance(g, &g->it[i], err);
    if (g->e) {
        /* on a failed submit, what was submitted still runs to the journal */
        if (rc) g->failed = 1;
        k3_engine_job_run(g->e, K3_ENGINE_UNTIL_IDLE, on_step, g);
        if (g->n_generated) progress(g, 1);
    }
    if (!rc && g->failed) rc = (*err = g->fail_err, -1);
    if (k3_gen_journal_sync(&g->journal, rc ? &g->fail_err : err)) rc = -1;
    if (!rc && g->n_done != g->n)
        rc = k3_err_set(err, "%lld samples were not finished when the engine went idle", (long long)(g->n - g->n_done));
    if (!rc && !g->journal.complete) rc = k3_gen_journal_complete(&g->journal, g->n, err);
    if (!rc)
        K3_INFO(CMD ": %lld replies generated, %lld taken from %s; %lld conversation(s) ended early (a reply cut by "
                "--max-tokens, or a next turn that no longer renders)", (long long)g->n_generated,
                (long long)g->n_journaled, g->o.journal, (long long)g->n_cut);
    return rc;
}

int k3_regen_run(struct k3_regen *g, struct k3_model_job *mj, const struct k3_deploy *d, struct k3_err *err)
{
    struct k3_job *job = mj->job;
    long long hdr[3] = {0, 0, 0};   /* need the engine, context, conversations */
    if (job->rank == 0) hdr[0] = !g->journal.complete, hdr[1] = g->context, hdr[2] = g->n;
    K3_CHECK_MPI(MPI_Bcast(hdr, 3, MPI_LONG_LONG, 0, job->world_comm));
    struct k3_engine_job *e = NULL;
    int rc = 0;
    if (hdr[0]) {
        struct k3_engine_size size = {.context_tokens = (int)(hdr[1] < 1ll << 30 ? hdr[1] : 1ll << 30),
                                      .max_seqs = (int)(hdr[2] < 1 << 20 ? hdr[2] : 1 << 20),
                                      .max_queue = (int)(hdr[2] < 1 << 30 ? hdr[2] : 1 << 30)};
        rc = k3_engine_job_init(&e, mj, d, &size, err);
    }
    if (!rc && job->rank == 0) {
        g->e = e;
        rc = pipeline(g, err);
        g->e = NULL;
        if (e) k3_engine_job_shutdown(e);
    } else if (!rc && e) {
        k3_engine_job_worker(e);
    }
    k3_engine_job_free(e);
    K3_CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, job->world_comm));
    return rc;
}

void k3_regen_sample(const struct k3_regen *g, int64_t i, const int32_t **ids, const uint8_t **mask, int64_t *n)
{
    *ids = g->it[i].ids, *mask = g->it[i].mask, *n = g->it[i].n;
}

void k3_regen_free(struct k3_regen *g)
{
    if (!g) return;
    for (int64_t i = 0; i < g->n; i++) {
        struct item *it = &g->it[i];
        if (it->chat) k3_chat_req_free(&it->req);
        free(it->turn_msg);
        free(it->prompt);
        free(it->out);
        free(it->ids);
        free(it->mask);
    }
    free(g->it);
    free(g->sub);
    k3_gen_journal_free(&g->journal);
    free(g);
}
