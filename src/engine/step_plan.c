/* step_plan.c - see step_plan.h for the wire format. Fields are written one
 * by one (never whole structs), so padding bytes never reach the wire and
 * the checksum is the same on every run. */
#include "engine/step_plan.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/grow.h"
#include "core/log.h"
#include "mpi/mpi_check.h"

#define PLAN_MAGIC 0x4b33504cu /* "K3PL" read as a host-order u32 */
#define PLAN_VERSION 3u  /* 3: word-lane checksum */
#define HEADER_BYTES (4 + 4 + 8 + 4 + 4 * 4 + 4)
#define SEQ_BYTES (8 + 4 * 6 + 4 + 4 * 4 + 4 * 3 + 4 + 8 + 4)

void k3_plan_init(struct k3_step_plan *p)
{
    memset(p, 0, sizeof *p);
    k3_plan_reset(p, 0, 1);
}

void k3_plan_free(struct k3_step_plan *p)
{
    free(p->seqs);
    free(p->tokens);
    free(p->blocks);
    free(p->group_first);
    free(p->buf);
    memset(p, 0, sizeof *p);
}

void k3_plan_reset(struct k3_step_plan *p, uint64_t step, int n_groups)
{
    K3_CHECK(n_groups >= 1, "a step plan needs at least one group, not %d", n_groups);
    p->step = step;
    p->flags = 0;
    p->n_groups = n_groups;
    p->n_seqs = p->n_tokens = p->n_blocks = 0;
    p->group_first = k3_grow(p->group_first, &p->grp_cap, (size_t)n_groups + 1, sizeof(int32_t), 16, "a step plan");
    memset(p->group_first, 0, sizeof(int32_t) * ((size_t)n_groups + 1));
}

int k3_plan_add(struct k3_step_plan *p, const struct k3_plan_seq *seq, const int32_t *tokens,
                const int32_t *blocks, struct k3_err *err)
{
    if (seq->group < 0 || seq->group >= p->n_groups)
        return k3_err_set(err, "sequence %llu: group %d of %d", (unsigned long long)seq->seq_id,
                          seq->group, p->n_groups);
    if (p->n_seqs && seq->group < p->seqs[p->n_seqs - 1].group)
        return k3_err_set(err, "sequence %llu: groups must come in order (%d after %d)",
                          (unsigned long long)seq->seq_id, seq->group,
                          p->seqs[p->n_seqs - 1].group);
    if (seq->n_new < 1 || seq->n_blocks < 0 || seq->pos0 < 0)
        return k3_err_set(err, "sequence %llu: n_new %d, n_blocks %d, pos0 %d",
                          (unsigned long long)seq->seq_id, seq->n_new, seq->n_blocks, seq->pos0);
    if ((long long)p->n_tokens + seq->n_new > INT32_MAX ||
        (long long)p->n_blocks + seq->n_blocks > INT32_MAX)
        return k3_err_set(err, "step plan too large");
    p->seqs = k3_grow(p->seqs, &p->seq_cap, (size_t)p->n_seqs + 1, sizeof *p->seqs, 16, "a step plan");
    p->tokens = k3_grow(p->tokens, &p->tok_cap, (size_t)p->n_tokens + (size_t)seq->n_new,
                     sizeof *p->tokens, 16, "a step plan");
    p->blocks = k3_grow(p->blocks, &p->blk_cap, (size_t)p->n_blocks + (size_t)seq->n_blocks + 1,
                     sizeof *p->blocks, 16, "a step plan");
    struct k3_plan_seq *s = &p->seqs[p->n_seqs];
    *s = *seq;
    s->first_token = p->n_tokens;
    s->first_block = p->n_blocks;
    memcpy(p->tokens + p->n_tokens, tokens, sizeof(int32_t) * (size_t)seq->n_new);
    if (seq->n_blocks) memcpy(p->blocks + p->n_blocks, blocks, sizeof(int32_t) * (size_t)seq->n_blocks);
    p->n_tokens += seq->n_new;
    p->n_blocks += seq->n_blocks;
    p->n_seqs++;
    for (int g = seq->group + 1; g <= p->n_groups; g++) p->group_first[g] = p->n_seqs;
    return 0;
}

/* FNV-1a style over the payload, a 32-bit word at a time in four
 * independent lanes (a byte-wise chain cost ~0.1 ms for a plan of 256
 * sequences), with the 4 bytes at `zero_at` read as zeros (the sum's own
 * field): cheap, and enough to catch a torn or stale buffer. */
static uint32_t checksum(const uint8_t *b, size_t n, size_t zero_at)
{
    uint32_t h[4] = {2166136261u, 2166136261u ^ 1u, 2166136261u ^ 2u, 2166136261u ^ 3u}, w[4];
    uint8_t chunk[16];
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (i < zero_at + 4 && zero_at < i + 16) { /* the window with the sum field */
            memcpy(chunk, b + i, sizeof chunk);
            for (size_t j = i; j < i + 16; j++)
                if (j >= zero_at && j < zero_at + 4) chunk[j - i] = 0;
            memcpy(w, chunk, sizeof w);
        } else {
            memcpy(w, b + i, sizeof w);
        }
        for (int k = 0; k < 4; k++) h[k] = (h[k] ^ w[k]) * 16777619u;
    }
    for (; i < n; i++) h[0] = (h[0] ^ (i >= zero_at && i < zero_at + 4 ? 0 : b[i])) * 16777619u;
    return ((h[0] * 16777619u ^ h[1]) * 16777619u ^ h[2]) * 16777619u ^ h[3];
}

#define PUT(dst, v) (memcpy((dst), &(v), sizeof(v)), (dst) += sizeof(v))
#define GET(src, v) (memcpy(&(v), (src), sizeof(v)), (src) += sizeof(v))

size_t k3_plan_encode(struct k3_step_plan *p)
{
    size_t n = HEADER_BYTES + (size_t)p->n_seqs * SEQ_BYTES +
               sizeof(int32_t) * ((size_t)p->n_tokens + (size_t)p->n_blocks);
    p->buf = k3_grow(p->buf, &p->buf_cap, n, 1, 16, "a step plan");
    uint8_t *w = p->buf;
    uint32_t magic = PLAN_MAGIC, version = PLAN_VERSION, sum = 0;
    int32_t ng = p->n_groups, ns = p->n_seqs, nt = p->n_tokens, nb = p->n_blocks;
    PUT(w, magic); PUT(w, version); PUT(w, p->step); PUT(w, p->flags);
    PUT(w, ng); PUT(w, ns); PUT(w, nt); PUT(w, nb);
    uint8_t *sum_at = w;
    PUT(w, sum);
    for (int i = 0; i < p->n_seqs; i++) {
        const struct k3_plan_seq *s = &p->seqs[i];
        const struct k3_sampling *m = &s->sampling;
        PUT(w, s->seq_id); PUT(w, s->group); PUT(w, s->kda_slot); PUT(w, s->pos0);
        PUT(w, s->n_new); PUT(w, s->n_blocks); PUT(w, s->flags); PUT(w, s->first_token);
        PUT(w, m->temperature); PUT(w, m->top_p); PUT(w, m->min_p); PUT(w, m->top_k);
        PUT(w, m->presence_penalty); PUT(w, m->frequency_penalty);
        PUT(w, m->repetition_penalty); PUT(w, m->n_logprobs); PUT(w, m->seed); PUT(w, m->n_prompt);
    }
    memcpy(w, p->tokens, sizeof(int32_t) * (size_t)p->n_tokens);
    w += sizeof(int32_t) * (size_t)p->n_tokens;
    if (p->n_blocks) memcpy(w, p->blocks, sizeof(int32_t) * (size_t)p->n_blocks);
    w += sizeof(int32_t) * (size_t)p->n_blocks;
    K3_CHECK((size_t)(w - p->buf) == n, "step plan encoding wrote %zu of %zu bytes",
             (size_t)(w - p->buf), n);
    sum = checksum(p->buf, n, (size_t)(sum_at - p->buf));
    memcpy(sum_at, &sum, sizeof sum);
    return n;
}

int k3_plan_decode(struct k3_step_plan *p, const uint8_t *buf, size_t n, struct k3_err *err)
{
    if (n < HEADER_BYTES) return k3_err_set(err, "step plan: %zu bytes, less than a header", n);
    const uint8_t *r = buf;
    uint32_t magic, version, flags, sum;
    uint64_t step;
    int32_t ng, ns, nt, nb;
    GET(r, magic); GET(r, version); GET(r, step); GET(r, flags);
    GET(r, ng); GET(r, ns); GET(r, nt); GET(r, nb); GET(r, sum);
    if (magic != PLAN_MAGIC)
        return k3_err_set(err, "step plan: bad magic 0x%08x (a corrupt buffer, or ranks of "
                          "different byte order)", magic);
    if (version != PLAN_VERSION)
        return k3_err_set(err, "step plan: version %u, this k3 speaks %u (mixed k3 builds in one "
                          "job?)", version, PLAN_VERSION);
    if (ng < 1 || ns < 0 || nt < 0 || nb < 0)
        return k3_err_set(err, "step plan: bad counts (groups %d, seqs %d, tokens %d, blocks %d)",
                          ng, ns, nt, nb);
    size_t want = HEADER_BYTES + (size_t)ns * SEQ_BYTES + sizeof(int32_t) * ((size_t)nt + (size_t)nb);
    if (want != n)
        return k3_err_set(err, "step plan: counts imply %zu bytes, buffer has %zu", want, n);
    /* the sum was taken with its own field (the header's last word) as zeros */
    if (checksum(buf, n, HEADER_BYTES - 4) != sum) return k3_err_set(err, "step plan: checksum mismatch (corrupt buffer)");
    k3_plan_reset(p, step, ng);
    p->flags = flags;
    p->seqs = k3_grow(p->seqs, &p->seq_cap, (size_t)ns + 1, sizeof *p->seqs, 16, "a step plan");
    p->tokens = k3_grow(p->tokens, &p->tok_cap, (size_t)nt + 1, sizeof *p->tokens, 16, "a step plan");
    p->blocks = k3_grow(p->blocks, &p->blk_cap, (size_t)nb + 1, sizeof *p->blocks, 16, "a step plan");
    long long tok = 0, blk = 0;
    for (int i = 0; i < ns; i++) {
        struct k3_plan_seq *s = &p->seqs[i];
        struct k3_sampling *m = &s->sampling;
        memset(s, 0, sizeof *s);
        GET(r, s->seq_id); GET(r, s->group); GET(r, s->kda_slot); GET(r, s->pos0);
        GET(r, s->n_new); GET(r, s->n_blocks); GET(r, s->flags); GET(r, s->first_token);
        GET(r, m->temperature); GET(r, m->top_p); GET(r, m->min_p); GET(r, m->top_k);
        GET(r, m->presence_penalty); GET(r, m->frequency_penalty);
        GET(r, m->repetition_penalty); GET(r, m->n_logprobs); GET(r, m->seed); GET(r, m->n_prompt);
        if (s->group < 0 || s->group >= ng || (i && s->group < p->seqs[i - 1].group) ||
            s->n_new < 1 || s->n_blocks < 0 || s->first_token != tok)
            return k3_err_set(err, "step plan: sequence %d is inconsistent", i);
        s->first_block = (int32_t)blk;
        tok += s->n_new;
        blk += s->n_blocks;
        if (tok > nt || blk > nb)
            return k3_err_set(err, "step plan: sequence %d overruns the token or block arrays", i);
        for (int g = s->group + 1; g <= ng; g++) p->group_first[g] = i + 1;
    }
    if (tok != nt || blk != nb)
        return k3_err_set(err, "step plan: sequences use %lld tokens and %lld blocks of %d and %d",
                          tok, blk, nt, nb);
    memcpy(p->tokens, r, sizeof(int32_t) * (size_t)nt);
    r += sizeof(int32_t) * (size_t)nt;
    if (nb) memcpy(p->blocks, r, sizeof(int32_t) * (size_t)nb);
    p->n_seqs = ns;
    p->n_tokens = nt;
    p->n_blocks = nb;
    return 0;
}

void k3_plan_bcast(struct k3_step_plan *p, MPI_Comm comm, int root)
{
    int rank;
    K3_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    unsigned long long n = rank == root ? k3_plan_encode(p) : 0;
    K3_CHECK_MPI(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, comm));
    K3_CHECK(n < (1ull << 31), "step plan of %llu bytes is too large to broadcast", n);
    if (rank != root) p->buf = k3_grow(p->buf, &p->buf_cap, (size_t)n, 1, 16, "a step plan");
    K3_CHECK_MPI(MPI_Bcast(p->buf, (int)n, MPI_BYTE, root, comm));
    if (rank != root) {
        struct k3_err err;
        if (k3_plan_decode(p, p->buf, (size_t)n, &err))
            K3_FATAL("received a step plan that does not decode: %s", err.msg);
    }
}

void k3_plan_bcast_idle(struct k3_step_plan *p, MPI_Comm comm, int root)
{
    int rank;
    K3_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    unsigned long long n = rank == root ? k3_plan_encode(p) : 0;
    MPI_Request rq;
    K3_CHECK_MPI(MPI_Ibcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, comm, &rq));
    if (rank == root) {
        K3_CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    } else {
        /* Poll for ~200 us (a busy step loop sends the next plan within that),
         * then sleep with a back-off up to 5 ms, so an idle server's workers
         * cost nothing and a new request waits at most one sleep. */
        double t0 = k3_now_s();
        long sleep_ns = 50000;
        for (int done = 0;;) {
            K3_CHECK_MPI(MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
            if (done) break;
            if (k3_now_s() - t0 < 200e-6) continue;
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 5000000) sleep_ns *= 2;
        }
    }
    K3_CHECK(n < (1ull << 31), "step plan of %llu bytes is too large to broadcast", n);
    if (rank != root) p->buf = k3_grow(p->buf, &p->buf_cap, (size_t)n, 1, 16, "a step plan");
    K3_CHECK_MPI(MPI_Bcast(p->buf, (int)n, MPI_BYTE, root, comm));
    if (rank != root) {
        struct k3_err err;
        if (k3_plan_decode(p, p->buf, (size_t)n, &err))
            K3_FATAL("received a step plan that does not decode: %s", err.msg);
    }
}

int k3_plan_gather_sampled(const struct k3_step_plan *p, MPI_Comm comm, int root,
                           const struct k3_sampled *mine, int n, struct k3_sampled *all, int *scratch)
{
    int rank, size;
    K3_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    K3_CHECK_MPI(MPI_Comm_size(comm, &size));
    int *counts = NULL, *displs = NULL, total = 0;
    int bytes = n * (int)sizeof *mine;
    if (rank == root) {
        counts = scratch ? scratch : malloc(sizeof(int) * 2 * (size_t)size);
        K3_CHECK(counts, "out of memory");
        displs = counts + size;
    }
    K3_CHECK_MPI(MPI_Gather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, root, comm));
    if (rank == root) {
        for (int r = 0; r < size; r++) {
            displs[r] = total;
            total += counts[r];
        }
        K3_CHECK(total / (int)sizeof *all <= p->n_seqs,
                 "ranks returned %d sampled tokens for a plan of %d sequences",
                 total / (int)sizeof *all, p->n_seqs);
    }
    K3_CHECK_MPI(MPI_Gatherv(mine, bytes, MPI_BYTE, all, counts, displs, MPI_BYTE, root, comm));
    if (!scratch) free(counts);
    return rank == root ? total / (int)sizeof *all : 0;
}
