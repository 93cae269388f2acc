/* bench_sched.c - rank 0's scheduling time per step, without a model: for B
 * sequences decoding in G attention groups, the time of k3_sched_build (the
 * plan), k3_plan_encode (the broadcast buffer) and k3_sched_complete (tokens
 * back, callbacks, finishes) per step. The goal (issue 8) is < 1 ms at 256.
 * Requests finish and new ones are admitted (prefill chunks) all the time,
 * so the steps are the serving mix, not decodes only: requests ask for
 * `--out`/2 to 3`--out`/2 tokens (staggered), and a finished one is replaced
 * by a new submit (from the on_finish callback, as a server thread would).
 * Correctness in the same run: `#wrong` counts steps whose plan breaks the
 * limits (sequences or tokens of a group) or names a block twice, and
 * resubmits the queue refused.
 *
 *   bench_sched [--batches 1,4,16,64,256] [--groups 1] [--steps 400] [--out 64] [--prompt 32] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "engine/scheduler.h"

struct bench {
    struct k3_sched *s;
    int32_t prompt[4096];
    int n_prompt, n_out;
    long submitted, finished, resubmit_failed;
};

static void on_finish(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *u);

static int submit(struct bench *b)
{
    int out = b->n_out / 2 + 1 + (int)((b->submitted++ * 37) % (b->n_out + 1));
    struct k3_sched_request q = {.prompt = b->prompt, .n_prompt = b->n_prompt, .max_tokens = out,
                                 .cb = {NULL, on_finish, b}};
    struct k3_err err;
    return k3_sched_submit(b->s, &q, &err) > 0 ? 0 : -1;
}

static void on_finish(void *ctx, uint64_t id, enum k3_finish why, const struct k3_sched_usage *u)
{
    (void)id, (void)why, (void)u;
    struct bench *b = ctx;
    b->finished++;
    if (submit(b)) b->resubmit_failed++;
}

/* Whether a plan has more sequences or tokens in a group than the limits,
 * or a block in two sequences of a group. */
static int plan_breaks_limits(const struct k3_step_plan *p, const struct k3_sched_limits *lim)
{
    static unsigned stamp[1 << 20], mark; /* stamp[id] == mark: seen in this group */
    for (int g = 0; g < p->n_groups; g++) {
        int tok = 0, n = p->group_first[g + 1] - p->group_first[g];
        mark++;
        if (n > lim->max_seqs) return 1;
        for (int i = p->group_first[g]; i < p->group_first[g + 1]; i++) {
            const struct k3_plan_seq *s = &p->seqs[i];
            tok += s->n_new;
            for (int k = 0; k < s->n_blocks; k++) {
                int id = p->blocks[s->first_block + k];
                if (id < 0 || id >= lim->n_blocks || id >= 1 << 20 || stamp[id] == mark) return 1;
                stamp[id] = mark;
            }
        }
        if (tok > lim->max_batch_tokens) return 1;
    }
    return 0;
}

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    for (const char *p = s; *p && n < cap;) {
        out[n++] = atoi(p);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return n;
}

int main(int argc, char **argv)
{
    int batches[16] = {1, 4, 16, 64, 256}, n_batches = 5, groups = 1, steps = 400, n_out = 64, n_prompt = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batches")) n_batches = parse_list(argv[i + 1], batches, 16);
        else if (!strcmp(argv[i], "--groups")) groups = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out")) n_out = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) n_prompt = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_sched: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (argc % 2 == 0 || groups < 1 || steps < 20 || n_out < 1 || n_prompt < 1 || n_prompt > 4096) {
        fprintf(stderr, "usage: bench_sched [--batches 1,4,...] [--groups G] [--steps N>=20] [--out N] "
                        "[--prompt N<=4096]\n");
        return 2;
    }
    printf("# rank-0 scheduling per step, %d group(s), prompts of %d tokens, %d-%d output tokens; "
           "times are means over the steps after the first 10%%\n", groups, n_prompt, n_out / 2 + 1,
           n_out / 2 + 1 + n_out);
    printf("# %6s %8s %10s %10s %10s %10s %8s %8s\n", "batch", "steps", "build_us", "encode_us", "complete_us",
           "total_us", "tok/step", "#wrong");
    int bad = 0;
    for (int bi = 0; bi < n_batches; bi++) {
        int B = batches[bi], per_group = (B + groups - 1) / groups;
        struct bench b = {.n_prompt = n_prompt, .n_out = n_out};
        for (int t = 0; t < n_prompt; t++) b.prompt[t] = (int32_t)(t * 7 + 3);
        int ctx = n_prompt + 2 * n_out + 2, bt = 16;
        struct k3_sched_limits lim = {.n_groups = groups, .max_batch_tokens = per_group + 2 * n_prompt,
                                      .max_seqs = per_group, .prefill_chunk = n_prompt, .max_queue = 2 * B + 8,
                                      .context_tokens = ctx, .kda_slots = per_group, .block_tokens = bt,
                                      .n_blocks = per_group * ((ctx + bt - 1) / bt)};
        struct k3_err err;
        if (k3_sched_init(&b.s, &lim, &err)) {
            fprintf(stderr, "bench_sched: %s\n", err.msg);
            return 1;
        }
        for (int i = 0; i < groups * per_group; i++) submit(&b);
        struct k3_step_plan plan;
        k3_plan_init(&plan);
        struct k3_sampled *got = calloc((size_t)(groups * per_group + 1), sizeof *got);
        double t_build = 0, t_enc = 0, t_done = 0;
        long toks = 0, wrong = 0;
        int counted = 0, warm = steps / 10;
        for (int step = 0; step < steps; step++) {
            double t0 = k3_now_s();
            k3_sched_build(b.s, &plan);
            double t1 = k3_now_s();
            k3_plan_encode(&plan);
            double t2 = k3_now_s();
            int n = 0;
            for (int i = 0; i < plan.n_seqs; i++)
                if (plan.seqs[i].flags & K3_SEQ_SAMPLE) got[n++] = (struct k3_sampled){.seq = i, .token = 9};
            double t3 = k3_now_s();
            k3_sched_complete(b.s, &plan, got, n);
            double t4 = k3_now_s();
            if (step < warm) continue;
            wrong += plan_breaks_limits(&plan, &lim);
            t_build += t1 - t0, t_enc += t2 - t1, t_done += t4 - t3;
            toks += plan.n_tokens;
            counted++;
        }
        wrong += b.resubmit_failed;
        double us = 1e6 / counted;
        printf("  %6d %8d %10.1f %10.1f %10.1f %10.1f %8.1f %8ld\n", groups * per_group, counted, t_build * us,
               t_enc * us, t_done * us, (t_build + t_enc + t_done) * us, (double)toks / counted, wrong);
        bad |= wrong != 0;
        free(got);
        k3_plan_free(&plan);
        k3_sched_free(b.s);
    }
    return bad;
}
