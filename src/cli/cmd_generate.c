/* cmd_generate.c - `k3 generate`: offline batch generation through the
 * serving loop (engine/scheduler.h on rank 0, engine/step_exec.h everywhere).
 *
 *   mpirun -np W k3 generate --model DIR --input requests.jsonl --out results.jsonl
 *
 * Each input line: {"id": ..., "prompt_ids": [...]} or {"id": ..., "messages":
 * [...], "tools": [...]} (rendered with the K3 chat template; needs the
 * checkpoint's tokenizer), plus max_tokens, temperature, top_p, top_k, min_p,
 * presence_penalty, frequency_penalty, repetition_penalty, seed, logprobs /
 * top_logprobs, stop (a string or strings; needs the tokenizer) and
 * stop_token_ids. Each output line, in input order: {"id", "output_ids",
 * "text" (with a tokenizer), "finish_reason", "usage"}, and for messages
 * requests the parsed "reasoning_content", "content" and "tool_calls"
 * (frontend/out_parse.h: thinking as the rendered prompt ends, only the
 * request's declared tools; finish_reason "tool_calls" when there are calls).
 * Progress on stderr.
 *
 * The serving loop is cli/engine_job.h (shared with serve and dump
 * --generate); this file sizes it from the requests (context = the longest
 * prompt + max_tokens, sequences = at most the request count) and turns
 * requests and callbacks into JSONL. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/engine_job.h"
#include "core/clock.h"
#include "core/log.h"
#include "frontend/chat_render.h"
#include "frontend/out_parse.h"
#include "frontend/tokenizer.h"
#include "mpi/bootstrap.h"
#include "mpi/mpi_check.h"

struct gen_item {
    json_t *id;
    int32_t *prompt;
    int n_prompt, max_tokens;
    struct k3_sampling smp;
    int32_t stop_ids[8];
    int n_stop_ids;
    char **stops;               /* stop strings */
    int n_stops;
    /* results */
    int32_t *out;
    int n_out, cap_out;
    char *text;
    size_t n_text, cap_text;
    struct k3_detok detok;
    const char *finish;
    struct k3_sched_usage usage;
    json_t *logprobs;           /* per token, when asked */
    int done;
    /* chat (messages) requests: reasoning, content and tool calls */
    struct k3_outp *outp;
    struct k3_detok outp_detok; /* the parser's own: it tells markers by their special ids */
    struct k3_outp_delta delta; /* unused pieces, cleared per token */
    char **tool_names;          /* the request's declared tools */
    int n_tool_names;
};

struct gen {
    struct gen_item *items;
    int n, n_done;
    uint64_t *ids;              /* scheduler id per item */
    const struct k3_tok *tok;
};

static int item_of(struct gen *g, uint64_t id)
{
    for (int i = 0; i < g->n; i++) /* ids are dense from 1 in submit order */
        if (g->ids[i] == id) return i;
    K3_FATAL("a callback for unknown request %llu", (unsigned long long)id);
}

static int on_token(void *ctx, uint64_t id, const struct k3_sampled *t)
{
    struct gen *g = ctx;
    struct gen_item *it = &g->items[item_of(g, id)];
    if (it->n_out == it->cap_out) {
        it->cap_out = it->cap_out ? 2 * it->cap_out : 64;
        it->out = realloc(it->out, sizeof *it->out * (size_t)it->cap_out);
        K3_CHECK(it->out, "out of memory");
    }
    it->out[it->n_out++] = t->token;
    if (it->logprobs) {
        json_t *e = json_pack("{s:i,s:f}", "token", (json_int_t)t->token, "logprob", (double)t->logprob);
        if (t->n_top) {
            json_t *top = json_array();
            for (int k = 0; k < t->n_top; k++)
                json_array_append_new(top, json_pack("{s:i,s:f}", "token", (json_int_t)t->top_ids[k], "logprob",
                                                     (double)t->top_logprobs[k]));
            json_object_set_new(e, "top_logprobs", top);
        }
        json_array_append_new(it->logprobs, e);
    }
    if (!g->tok) return 0;
    if (it->outp) {
        k3_outp_feed_ids(it->outp, &it->outp_detok, &t->token, 1, &it->delta);
        k3_outp_delta_clear(&it->delta);
    }
    char buf[K3_DETOK_MAX_OUT + 8];
    int n = k3_detok_push(&it->detok, t->token, buf);
    if (n < 0) n = 0;
    if (it->n_text + (size_t)n + 1 > it->cap_text) {
        it->cap_text = 2 * (it->n_text + (size_t)n + 1);
        it->text = realloc(it->text, it->cap_text);
        K3_CHECK(it->text, "out of memory");
    }
    memcpy(it->text + it->n_text, buf, (size_t)n);
    it->n_text += (size_t)n;
    it->text[it->n_text] = 0;
    for (int k = 0; k < it->n_stops; k++) {
        char *at = strstr(it->text, it->stops[k]);
        if (at) {
            *at = 0, it->n_text = (size_t)(at - it->text);
            return 1;
        }
    }
    return 0;
}

static void on_finish(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *u)
{
    struct gen *g = ctx;
    struct gen_item *it = &g->items[item_of(g, id)];
    it->finish = k3_finish_name(why);
    it->usage = *u;
    if (it->outp) {
        char tail[16];
        int n = k3_detok_flush(&it->outp_detok, tail);
        if (n > 0) k3_outp_feed(it->outp, tail, (size_t)n, &it->delta);
        k3_outp_finish(it->outp, why == K3_FINISH_LENGTH ? K3_OUTP_LENGTH : K3_OUTP_STOP, &it->delta);
        k3_outp_delta_clear(&it->delta);
        const char *fr = k3_outp_result(it->outp)->finish_reason;
        if (fr && !strcmp(fr, "tool_calls")) it->finish = "tool_calls";
    }
    it->done = 1;
    g->n_done++;
}

static int get_ids(const json_t *a, int32_t **out, int *n)
{
    if (!json_is_array(a)) return -1;
    size_t cnt = json_array_size(a);
    *out = malloc(sizeof **out * (cnt ? cnt : 1));
    if (!*out) return -1;
    for (size_t i = 0; i < cnt; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff) return -1;
        (*out)[i] = (int32_t)json_integer_value(v);
    }
    *n = (int)cnt;
    return 0;
}

static double num(const json_t *o, const char *k, double def)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* One input line into an item; returns 0 or -1 with msg. */
/* The declared tool names of a chat request (an empty list, never NULL, so
 * that the parser drops calls to undeclared tools). */
static int tool_names_of(const json_t *tools, struct gen_item *it)
{
    size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
    it->tool_names = calloc(n + 1, sizeof *it->tool_names);
    if (!it->tool_names) return -1;
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(tools, i), *fn = json_object_get(t, "function");
        const json_t *name = json_object_get(fn ? fn : t, "name");
        if (!json_is_string(name)) continue;
        if (!(it->tool_names[it->n_tool_names] = strdup(json_string_value(name)))) return -1;
        it->n_tool_names++;
    }
    return 0;
}

static int parse_item(const char *line, int line_no, const struct k3_tok *tok, int64_t vocab, struct gen_item *it,
                      char *msg, size_t msg_n)
{
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    if (!json_is_object(o)) {
        snprintf(msg, msg_n, "not a JSON object (%s)", je.text);
        json_decref(o);
        return -1;
    }
    int rc = -1;
    it->id = json_incref(json_object_get(o, "id") ? json_object_get(o, "id") : json_null());
    const json_t *pid = json_object_get(o, "prompt_ids"), *msgs = json_object_get(o, "messages");
    if (pid) {
        if (get_ids(pid, &it->prompt, &it->n_prompt)) {
            snprintf(msg, msg_n, "prompt_ids must be an array of token ids");
            goto out;
        }
    } else if (msgs) {
        if (!tok) {
            snprintf(msg, msg_n, "messages need the checkpoint's tokenizer (none loaded)");
            goto out;
        }
        struct k3_chat_opts co = {.thinking = json_is_false(json_object_get(o, "thinking")) ? 0 : 1,
                                  .add_generation_prompt = 1};
        struct k3_chat_prompt p;
        memset(&p, 0, sizeof p);
        struct k3_err err;
        if (k3_chat_render(msgs, json_object_get(o, "tools"), &co, &p, &err)) {
            snprintf(msg, msg_n, "messages: %.400s", err.msg);
            goto out;
        }
        struct k3_tok_ids ids = {0};
        k3_chat_prompt_encode(tok, &p, &ids);
        if (tool_names_of(json_object_get(o, "tools"), it)) {
            k3_chat_prompt_free(&p);
            free(ids.ids);
            snprintf(msg, msg_n, "out of memory for tool names");
            goto out;
        }
        /* a fixed seed: the tool call ids of a rerun are the same */
        struct k3_outp_cfg oc = {.thinking = p.ends_in_think, .tool_names = (const char *const *)it->tool_names,
                                 .n_tool_names = (size_t)it->n_tool_names, .id_seed = 0x6b3 + (uint64_t)line_no};
        it->outp = k3_outp_new(&oc);
        k3_detok_init(&it->outp_detok, tok);
        k3_chat_prompt_free(&p);
        it->prompt = ids.ids, it->n_prompt = (int)ids.n;
    } else {
        snprintf(msg, msg_n, "needs prompt_ids or messages");
        goto out;
    }
    for (int i = 0; i < it->n_prompt; i++)
        if (it->prompt[i] >= vocab) {
            snprintf(msg, msg_n, "token id %d is outside the vocabulary (%lld)", it->prompt[i], (long long)vocab);
            goto out;
        }
    if (it->n_prompt < 1) {
        snprintf(msg, msg_n, "an empty prompt");
        goto out;
    }
    it->max_tokens = (int)num(o, "max_tokens", num(o, "max_completion_tokens", 16));
    it->smp.temperature = (float)num(o, "temperature", 0);
    it->smp.top_p = (float)num(o, "top_p", 1);
    it->smp.top_k = (int32_t)num(o, "top_k", 0);
    it->smp.min_p = (float)num(o, "min_p", 0);
    it->smp.presence_penalty = (float)num(o, "presence_penalty", 0);
    it->smp.frequency_penalty = (float)num(o, "frequency_penalty", 0);
    it->smp.repetition_penalty = (float)num(o, "repetition_penalty", 1);
    it->smp.seed = (uint64_t)num(o, "seed", 0);
    const json_t *lp = json_object_get(o, "logprobs");
    if (json_is_true(lp) || json_is_integer(lp)) {
        it->logprobs = json_array();
        it->smp.n_logprobs = (int32_t)num(o, "top_logprobs", json_is_integer(lp) ? (double)json_integer_value(lp) : 0);
    }
    if (it->max_tokens < 1 || it->smp.temperature < 0 || it->smp.top_k < 0 || it->smp.n_logprobs < 0 ||
        it->smp.n_logprobs > K3_PLAN_TOP_MAX) {
        snprintf(msg, msg_n, "max_tokens >= 1, temperature >= 0, top_k >= 0, top_logprobs 0..%d", K3_PLAN_TOP_MAX);
        goto out;
    }
    const json_t *st = json_object_get(o, "stop_token_ids");
    for (size_t i = 0; json_is_array(st) && i < json_array_size(st) && it->n_stop_ids < 8; i++)
        it->stop_ids[it->n_stop_ids++] = (int32_t)json_integer_value(json_array_get(st, i));
    const json_t *stop = json_object_get(o, "stop");
    if (stop) {
        if (!tok) {
            snprintf(msg, msg_n, "stop strings need the checkpoint's tokenizer (none loaded)");
            goto out;
        }
        size_t ns = json_is_array(stop) ? json_array_size(stop) : 1;
        it->stops = calloc(ns, sizeof *it->stops);
        for (size_t i = 0; i < ns; i++) {
            const json_t *s = json_is_array(stop) ? json_array_get(stop, i) : stop;
            if (json_is_string(s) && json_string_length(s)) it->stops[it->n_stops++] = strdup(json_string_value(s));
        }
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

static void item_free(struct gen_item *it)
{
    json_decref(it->id);
    json_decref(it->logprobs);
    free(it->prompt);
    free(it->out);
    free(it->text);
    for (int k = 0; k < it->n_stops; k++) free(it->stops[k]);
    free(it->stops);
    for (int k = 0; k < it->n_tool_names; k++) free(it->tool_names[k]);
    free(it->tool_names);
    if (it->outp) k3_outp_free(it->outp);
    k3_outp_delta_free(&it->delta);
}

/* reasoning_content, content and tool_calls of a chat request into o. */
static void put_parsed(json_t *o, const struct k3_outp_result *r)
{
    json_object_set_new(o, "reasoning_content", r->reasoning.n ? json_stringn(r->reasoning.p, r->reasoning.n)
                                                                 : json_null());
    json_object_set_new(o, "content", json_stringn(r->content.p ? r->content.p : "", r->content.n));
    json_t *calls = json_array();
    for (size_t i = 0; i < r->n_calls; i++) {
        const struct k3_outp_call *c = &r->calls[i];
        json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s#}}", "id", c->id, "type", "function", "function",
                                               "name", c->name ? c->name : "", "arguments",
                                               c->args.p ? c->args.p : "", (int)c->args.n));
    }
    json_object_set_new(o, "tool_calls", calls);
}

static int read_items(const char *path, const struct k3_tok *tok, int64_t vocab, struct gen *g)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "k3 generate: cannot open %s\n", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int cap_items = 0, lineno = 0, rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)len) continue;
        if (g->n == cap_items) {
            cap_items = cap_items ? 2 * cap_items : 64;
            g->items = realloc(g->items, sizeof *g->items * (size_t)cap_items);
            K3_CHECK(g->items, "out of memory");
        }
        struct gen_item *it = &g->items[g->n];
        memset(it, 0, sizeof *it);
        char msg[512];
        if (parse_item(line, lineno, tok, vocab, it, msg, sizeof msg)) {
            fprintf(stderr, "k3 generate: %s:%d: %s\n", path, lineno, msg);
            item_free(it);
            rc = -1;
            break;
        }
        if (tok) k3_detok_init(&it->detok, tok);
        g->n++;
    }
    free(line);
    fclose(f);
    return rc;
}

static int write_items(const char *path, struct gen *g)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "k3 generate: cannot write %s\n", path);
        return -1;
    }
    for (int i = 0; i < g->n; i++) {
        struct gen_item *it = &g->items[i];
        json_t *ids = json_array();
        for (int k = 0; k < it->n_out; k++) json_array_append_new(ids, json_integer(it->out[k]));
        json_t *o = json_pack("{s:O,s:o,s:s,s:{s:i,s:i,s:i}}", "id", it->id, "output_ids", ids, "finish_reason",
                              it->finish ? it->finish : "error", "usage", "prompt_tokens",
                              (json_int_t)it->usage.prompt_tokens, "completion_tokens",
                              (json_int_t)it->usage.completion_tokens, "total_tokens",
                              (json_int_t)(it->usage.prompt_tokens + it->usage.completion_tokens));
        if (g->tok) {
            char tail[16];
            int n = k3_detok_flush(&it->detok, tail);
            json_object_set_new(o, "text", json_stringn(it->text ? it->text : "", it->n_text));
            (void)n;
        }
        if (it->outp) put_parsed(o, k3_outp_result(it->outp));
        if (it->logprobs) json_object_set(o, "logprobs", it->logprobs);
        char *s = json_dumps(o, JSON_COMPACT);
        fprintf(f, "%s\n", s);
        free(s);
        json_decref(o);
    }
    return fclose(f) ? -1 : 0;
}

struct progress {
    struct gen *g;
    struct k3_sched *sched;
    int last_pct;
};

static void on_step(void *ctx, const struct k3_step_plan *plan, double step_s)
{
    (void)plan, (void)step_s;
    struct progress *p = ctx;
    int pct = 100 * p->g->n_done / p->g->n;
    if (pct == p->last_pct) return;
    struct k3_sched_stats st;
    k3_sched_stats(p->sched, &st);
    fprintf(stderr, "\rk3 generate: %3d%% %d/%d done, %d running, %d queued, %llu preemptions", pct, p->g->n_done,
            p->g->n, st.running, st.queued, (unsigned long long)st.preemptions);
    p->last_pct = pct;
}

/* Rank 0: submits every item, runs the loop until idle, writes the results. */
static int generate_root(struct k3_engine_job *e, struct gen *g, const char *outp)
{
    const char *cmd = "k3 generate";
    struct k3_sched *sched = k3_engine_job_sched(e);
    struct k3_err err;
    g->ids = calloc((size_t)g->n, sizeof *g->ids);
    K3_CHECK(g->ids, "out of memory");
    for (int i = 0; i < g->n; i++) {
        struct gen_item *it = &g->items[i];
        struct k3_sched_request q = {.prompt = it->prompt, .n_prompt = it->n_prompt, .max_tokens = it->max_tokens,
                                     .sampling = it->smp, .n_stop_ids = it->n_stop_ids,
                                     .cb = {on_token, on_finish, g}};
        memcpy(q.stop_ids, it->stop_ids, sizeof q.stop_ids);
        g->ids[i] = k3_sched_submit(sched, &q, &err);
        if (!g->ids[i]) {
            fprintf(stderr, "%s: request %d: %s\n", cmd, i, err.msg);
            it->finish = "rejected";
            it->done = 1, g->n_done++;
        }
    }
    struct progress pr = {g, sched, -1};
    double t0 = k3_now_s();
    k3_engine_job_run(e, K3_ENGINE_UNTIL_IDLE, on_step, &pr);
    double run_s = k3_now_s() - t0;
    fprintf(stderr, "\n");
    struct k3_sched_stats st;
    k3_sched_stats(sched, &st);
    long long out_tok = 0;
    for (int i = 0; i < g->n; i++) out_tok += g->items[i].n_out;
    /* validation/bench/bench_generate.sh reads this line */
    K3_INFO("%s: %d requests, %llu steps, %llu prefill and %llu decode tokens, %llu preemptions; %lld tokens "
            "generated in %.3f s: %.2f tokens/s, %.2f tokens/s with the prompts", cmd, g->n,
            (unsigned long long)st.steps, (unsigned long long)st.prefill_tokens,
            (unsigned long long)st.decode_tokens, (unsigned long long)st.preemptions, out_tok, run_s,
            run_s > 0 ? (double)out_tok / run_s : 0,
            run_s > 0 ? (double)(st.prefill_tokens + st.decode_tokens) / run_s : 0);
    return write_items(outp, g) ? K3_EXIT_FAIL : K3_EXIT_OK;
}

int k3_cmd_generate(struct k3_cli *cli)
{
    const char *cmd = "k3 generate";
    int root = cli->job->rank == 0;
    const char *in = k3_arg(&cli->args, "input"), *outp = k3_arg(&cli->args, "out");
    if ((!k3_arg(&cli->args, "model") && !k3_arg(&cli->args, "config")) || !in || !outp) {
        if (root) fprintf(stderr, "%s: --model, --input and --out are required (see k3 generate --help)\n", cmd);
        return K3_EXIT_USAGE;
    }
    struct k3_model_job mj;
    int rc = k3_model_job_init(&mj, cli, cmd);
    if (rc) {
        k3_model_job_free(&mj);
        return rc;
    }
    const struct k3_deploy *d = &cli->deploy;
    struct gen g = {0};
    struct k3_tok *tok = NULL;
    struct k3_err err;
    /* rank 0 reads the requests; the job is sized from them */
    struct k3_engine_size size = {0};
    int ok = 0;
    if (root) {
        const char *dir = k3_arg(&cli->args, "model") ? k3_arg(&cli->args, "model") : d->model.path;
        if (k3_tok_load(&tok, dir, &err)) tok = NULL; /* prompt_ids and output ids still work */
        g.tok = tok;
        if (read_items(in, tok, mj.cfg.vocab_size, &g) == 0 && g.n > 0) {
            for (int i = 0; i < g.n; i++)
                if (g.items[i].n_prompt + g.items[i].max_tokens > size.context_tokens)
                    size.context_tokens = g.items[i].n_prompt + g.items[i].max_tokens;
            size.max_seqs = size.max_queue = g.n;
            ok = 1;
        } else if (g.n == 0) {
            fprintf(stderr, "%s: no requests in %s\n", cmd, in);
        }
    }
    K3_CHECK_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, cli->job->world_comm));
    rc = K3_EXIT_FAIL;
    struct k3_engine_job *e = NULL;
    if (ok && k3_engine_job_init(&e, &mj, d, &size, &err)) {
        if (root) fprintf(stderr, "%s: %s\n", cmd, err.msg);
    } else if (ok) {
        if (root) {
            rc = generate_root(e, &g, outp);
            k3_engine_job_shutdown(e);
        } else {
            k3_engine_job_worker(e);
            rc = K3_EXIT_OK;
        }
    }
    K3_CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, cli->job->world_comm));
    k3_engine_job_free(e);
    free(g.ids);
    for (int i = 0; i < g.n; i++) item_free(&g.items[i]);
    free(g.items);
    if (tok) k3_tok_free(tok);
    k3_model_job_free(&mj);
    return rc;
}
