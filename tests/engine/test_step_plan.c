/* test_step_plan.c - step plans: encode/decode round trips of random plans,
 * corrupt buffers rejected, broadcast to every rank and the sampled tokens
 * gathered back, on however many ranks mpirun starts. */
#include <stdlib.h>
#include <string.h>

#include "engine/step_plan.h"
#include "k3_test_mpi.h"
#include "mpi/bootstrap.h"
#include "mpi/mpi_check.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* A plan with some empty groups, prefill chunks and decodes. */
static void make_plan(struct k3_step_plan *p, uint64_t step, int n_groups)
{
    struct k3_err err;
    k3_plan_reset(p, step, n_groups);
    for (int g = 0; g < n_groups; g++) {
        int n = rnd(3) == 0 ? 0 : (int)rnd(5);
        for (int i = 0; i < n; i++) {
            struct k3_plan_seq s = {0};
            s.seq_id = step * 1000 + (uint64_t)(g * 10 + i);
            s.group = g;
            s.kda_slot = (int)rnd(16);
            s.pos0 = (int)rnd(500);
            s.flags = rnd(2) ? K3_SEQ_PREFILL : 0;
            s.n_new = s.flags & K3_SEQ_PREFILL ? 1 + (int)rnd(40) : 1;
            if (rnd(2)) s.flags |= K3_SEQ_SAMPLE;
            s.n_blocks = (int)rnd(6);
            s.sampling.temperature = 0.1f * (float)rnd(10);
            s.sampling.top_p = 0.9f;
            s.sampling.top_k = (int)rnd(50);
            s.sampling.seed = rng;
            int32_t tok[64], blk[8];
            for (int j = 0; j < s.n_new; j++) tok[j] = (int32_t)rnd(163840);
            for (int j = 0; j < s.n_blocks; j++) blk[j] = (int32_t)rnd(4096);
            CHECK(k3_plan_add(p, &s, tok, blk, &err) == 0);
        }
    }
}

static int plans_equal(const struct k3_step_plan *a, const struct k3_step_plan *b)
{
    if (a->step != b->step || a->flags != b->flags || a->n_groups != b->n_groups ||
        a->n_seqs != b->n_seqs || a->n_tokens != b->n_tokens || a->n_blocks != b->n_blocks)
        return 0;
    for (int g = 0; g <= a->n_groups; g++)
        if (a->group_first[g] != b->group_first[g]) return 0;
    for (int i = 0; i < a->n_seqs; i++) {
        const struct k3_plan_seq *x = &a->seqs[i], *y = &b->seqs[i];
        if (x->seq_id != y->seq_id || x->group != y->group || x->kda_slot != y->kda_slot ||
            x->pos0 != y->pos0 || x->n_new != y->n_new || x->n_blocks != y->n_blocks ||
            x->flags != y->flags || x->first_token != y->first_token ||
            x->first_block != y->first_block ||
            memcmp(&x->sampling.seed, &y->sampling.seed, sizeof x->sampling.seed) ||
            x->sampling.temperature != y->sampling.temperature ||
            x->sampling.top_k != y->sampling.top_k)
            return 0;
    }
    return !memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n_tokens) &&
           (!a->n_blocks || !memcmp(a->blocks, b->blocks, sizeof(int32_t) * (size_t)a->n_blocks));
}

static void test_round_trip(void)
{
    struct k3_step_plan a, b;
    struct k3_err err;
    k3_plan_init(&a);
    k3_plan_init(&b);
    for (int it = 0; it < 200; it++) {
        make_plan(&a, (uint64_t)it, 1 + (int)rnd(8));
        if (it % 7 == 0) a.flags = K3_STEP_SHUTDOWN;
        size_t n = k3_plan_encode(&a);
        CHECK_MSG(k3_plan_decode(&b, a.buf, n, &err) == 0, "%s", err.msg);
        CHECK(plans_equal(&a, &b));
        /* group_first partitions the sequences by group */
        for (int g = 0; g < b.n_groups; g++)
            for (int i = b.group_first[g]; i < b.group_first[g + 1]; i++) CHECK(b.seqs[i].group == g);
    }
    /* corrupt buffers: every single-byte flip and every truncation is caught */
    make_plan(&a, 7, 3);
    while (a.n_seqs == 0) make_plan(&a, 7, 3);
    size_t n = k3_plan_encode(&a);
    uint8_t *copy = malloc(n);
    int caught = 0, tried = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(copy, a.buf, n);
        copy[i] ^= 0x5a;
        tried++;
        caught += k3_plan_decode(&b, copy, n, &err) == -1;
    }
    CHECK_MSG(caught == tried, "%d of %d corrupted bytes caught", caught, tried);
    for (size_t len = 0; len < n; len += 3) CHECK(k3_plan_decode(&b, a.buf, len, &err) == -1);
    free(copy);
    /* bad additions are refused */
    struct k3_plan_seq s = {.group = 1, .n_new = 1};
    int32_t t = 5;
    k3_plan_reset(&a, 1, 2);
    CHECK(k3_plan_add(&a, &s, &t, NULL, &err) == 0);
    s.group = 0;
    CHECK(k3_plan_add(&a, &s, &t, NULL, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "groups must come in order");
    s.group = 5;
    CHECK(k3_plan_add(&a, &s, &t, NULL, &err) == -1);
    s.group = 1;
    s.n_new = 0;
    CHECK(k3_plan_add(&a, &s, &t, NULL, &err) == -1);
    k3_plan_free(&a);
    k3_plan_free(&b);
}

static void test_bcast(struct k3_job *job)
{
    struct k3_step_plan p, want;
    k3_plan_init(&p);
    k3_plan_init(&want);
    for (int step = 0; step < 20; step++) {
        rng = 1234567ull + (uint64_t)step; /* every rank builds the same expected plan */
        make_plan(&want, (uint64_t)step, 1 + step % 4);
        if (job->rank == 0) {
            rng = 1234567ull + (uint64_t)step;
            make_plan(&p, (uint64_t)step, 1 + step % 4);
        } else {
            k3_plan_reset(&p, 999, 1); /* stale contents must be replaced */
        }
        k3_plan_bcast(&p, job->world_comm, 0);
        CHECK_MSG(plans_equal(&p, &want), "rank %d step %d", job->rank, step);
        /* each rank returns the sampled tokens of the sequences i % world == rank */
        struct k3_sampled mine[64], all[64];
        int n = 0;
        for (int i = 0; i < p.n_seqs; i++)
            if ((p.seqs[i].flags & K3_SEQ_SAMPLE) && i % job->world == job->rank)
                mine[n++] = (struct k3_sampled){.seq = i, .token = p.tokens[p.seqs[i].first_token] + 1, .logprob = -0.5f};
        int got = k3_plan_gather_sampled(&p, job->world_comm, 0, mine, n, all, NULL);
        if (job->rank == 0) {
            int want_n = 0, ok = 1;
            for (int i = 0; i < p.n_seqs; i++) want_n += (p.seqs[i].flags & K3_SEQ_SAMPLE) != 0;
            CHECK(got == want_n);
            for (int j = 0; j < got; j++)
                ok &= all[j].token == p.tokens[p.seqs[all[j].seq].first_token] + 1 &&
                      (p.seqs[all[j].seq].flags & K3_SEQ_SAMPLE);
            CHECK(ok);
        }
    }
    k3_plan_free(&p);
    k3_plan_free(&want);
}

int main(int argc, char **argv)
{
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    if (job.rank == 0) test_round_trip();
    test_bcast(&job);
    int rc = k3_test_summary_all(job.world_comm);
    k3_job_free(&job);
    return rc;
}
