/* sampler.c - see sampler.h. Sums of exp(x - max) are fp64; every quantity
 * that decides a token is combined from an all-gather in rank order, so all
 * ranks of the group compute it bit for bit alike. Vocabulary slices are
 * assumed to ascend with the rank (model/parallel.h's k3_split), so rank
 * order then slice order is id order. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "engine/sample_dist.h"

#define GATHER_MAX 64 /* ranks in a group, for stack buffers */

int k3_sampler_init(struct k3_sampler *s, int64_t v0, int64_t nv, int64_t vocab, struct k3_comm *comm,
                    struct k3_err *err)
{
    memset(s, 0, sizeof *s);
    s->v0 = v0, s->nv = nv, s->vocab = vocab, s->comm = comm;
    size_t n = (size_t)(nv > 0 ? nv : 1);
    s->raw = malloc(sizeof *s->raw * n);
    s->count = calloc(n, sizeof *s->count);
    s->seen = calloc(n, 1);
    if (!s->raw || !s->count || !s->seen) {
        k3_sampler_free(s);
        return k3_err_set(err, "out of memory for a sampler over %lld logits", (long long)nv);
    }
    if (comm && comm->size > GATHER_MAX) {
        k3_sampler_free(s);
        return k3_err_set(err, "a group of %d ranks (the sampler handles %d)", comm->size, GATHER_MAX);
    }
    return 0;
}

void k3_sampler_free(struct k3_sampler *s)
{
    free(s->raw);
    free(s->count);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double k3_sampler_uniform(uint64_t seed, int64_t pos)
{
    uint64_t h = mix64(mix64(seed) ^ (uint64_t)pos);
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* Steps 1-3 of sampler.h on a slice: penalties, mask (by the caller),
 * temperature. count/seen are scratch of nv entries, returned to 0. */
static void penalize(const struct k3_sampling *p, float *x, int64_t v0, int64_t nv,
                     const struct k3_sample_hist *h, int32_t *count, uint8_t *seen)
{
    float r = p->repetition_penalty, f = p->frequency_penalty, pr = p->presence_penalty;
    int rep = r > 0 && r != 1;
    if (!h || !h->n || (!rep && f == 0 && pr == 0)) return;
    for (int64_t j = 0; j < h->n; j++) {
        int64_t i = (int64_t)h->tokens[j] - v0;
        if (i < 0 || i >= nv) continue;
        seen[i] = 1;
        if (j >= h->n_prompt) count[i]++;
    }
    for (int64_t j = 0; j < h->n; j++) {
        int64_t i = (int64_t)h->tokens[j] - v0;
        if (i < 0 || i >= nv || !seen[i]) continue;
        if (rep) x[i] = x[i] > 0 ? x[i] / r : x[i] * r;
        if (count[i]) x[i] -= f * (float)count[i] + pr;
        seen[i] = 0, count[i] = 0;
    }
}

static void temper(const struct k3_sampling *p, float *x, int64_t nv)
{
    for (int64_t i = 0; i < nv; i++) x[i] /= p->temperature;
}

struct cand {
    float v;
    int32_t id;
};
_Static_assert(sizeof(struct cand) == sizeof(double), "a candidate record holds one double");

static int better(const struct cand *a, const struct cand *b)
{
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static void insert_best(struct cand *c, int *n, int k, struct cand x1)
{
    if (*n == k && !better(&x1, &c[*n - 1])) return;
    int j = *n < k ? (*n)++ : k - 1;
    while (j > 0 && better(&x1, &c[j - 1])) {
        c[j] = c[j - 1];
        j--;
    }
    c[j] = x1;
}

static int nranks(const struct k3_sampler *s) { return s->comm ? s->comm->size : 1; }

/* vals[nranks] <- every rank's v, in rank order. */
static void gather_d(struct k3_sampler *s, double v, double *vals, const char *what)
{
    if (s->comm) s->comm->ops->all_gather(s->comm, &v, vals, sizeof v, what);
    else vals[0] = v;
}

/* Group-wide sum over {x >= t} of exp(x - M) (mass) or of 1 (count). */
static double sum_ge(struct k3_sampler *s, const float *x, double t, double M, int mass)
{
    double loc = 0, all[GATHER_MAX], tot = 0;
    for (int64_t i = 0; i < s->nv; i++)
        if ((double)x[i] >= t) loc += mass ? exp((double)x[i] - M) : 1.0;
    gather_d(s, loc, all, "sample.sum");
    for (int r = 0; r < nranks(s); r++) tot += all[r];
    return tot;
}

static uint32_t fkey(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b >> 31 ? ~b : b | 0x80000000u;
}

static float keyf(uint32_t k)
{
    uint32_t b = k >> 31 ? k & 0x7fffffffu : ~k;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* The largest float t in [lo, hi] with sum_ge(t) >= target (sum_ge(lo) is). */
static double bisect(struct k3_sampler *s, const float *x, float lo, float hi, double M, int mass,
                     double target)
{
    uint32_t a = fkey(lo), b = fkey(hi);
    while (a < b) {
        uint32_t mid = a + (b - a + 1) / 2;
        if (sum_ge(s, x, keyf(mid), M, mass) >= target) a = mid;
        else b = mid - 1;
    }
    return keyf(a);
}

/* Group-wide log-softmax of the raw logits at `token`. */
static float raw_logprob(struct k3_sampler *s, int32_t token)
{
    struct {
        double max, sum, val;
    } mine = {-INFINITY, 0, -INFINITY}, all[GATHER_MAX];
    for (int64_t i = 0; i < s->nv; i++)
        if (s->raw[i] > mine.max) mine.max = s->raw[i];
    for (int64_t i = 0; i < s->nv && mine.max > -INFINITY; i++) mine.sum += exp((double)s->raw[i] - mine.max);
    if (token >= s->v0 && token < s->v0 + s->nv) mine.val = s->raw[token - s->v0];
    if (s->comm) s->comm->ops->all_gather(s->comm, &mine, all, sizeof mine, "sample.logprob");
    else all[0] = mine;
    double M = -INFINITY, S = 0, val = -INFINITY;
    for (int r = 0; r < nranks(s); r++) {
        if (all[r].max > M) M = all[r].max;
        if (all[r].val > -INFINITY) val = all[r].val;
    }
    for (int r = 0; r < nranks(s); r++)
        if (all[r].sum > 0) S += all[r].sum * exp(all[r].max - M);
    return (float)(val - (M + log(S)));
}

/* Inverse CDF over weights w[i] = exp(c[i].v - M) of c[0, n) (id order):
 * the first index whose running sum exceeds target; the last positive one
 * if rounding runs past the end. */
static int draw_list(const struct cand *c, int n, double M, double u)
{
    double tot = 0, cum = 0;
    int last = -1;
    for (int i = 0; i < n; i++) tot += exp((double)c[i].v - M);
    double target = u * tot;
    for (int i = 0; i < n; i++) {
        double w = exp((double)c[i].v - M);
        if (w > 0) last = i;
        cum += w;
        if (w > 0 && cum > target) return i;
    }
    return last;
}

static int32_t pick_dist(struct k3_sampler *s, const float *x, double tau, double M, double u)
{
    double m = 0, all[GATHER_MAX], tot = 0;
    for (int64_t i = 0; i < s->nv; i++)
        if ((double)x[i] >= tau) m += exp((double)x[i] - M);
    gather_d(s, m, all, "sample.mass");
    int n = nranks(s), owner = -1, me = s->comm ? s->comm->rank : 0;
    for (int r = 0; r < n; r++) tot += all[r];
    double target = u * tot, before = 0;
    for (int r = 0; r < n && owner < 0; r++) {
        if (all[r] > 0 && before + all[r] > target) owner = r;
        else before += all[r];
    }
    if (owner < 0) { /* rounding ran past the end: the last rank with mass, its last token */
        before = 0;
        for (int r = 0; r < n; r++)
            if (all[r] > 0) owner = r;
        for (int r = 0; r < owner; r++) before += all[r];
    }
    int32_t tok = -1, toks[GATHER_MAX];
    if (me == owner) {
        double cum = before;
        int64_t last = -1;
        for (int64_t i = 0; i < s->nv && tok < 0; i++) {
            if ((double)x[i] < tau) continue;
            double w = exp((double)x[i] - M);
            if (w > 0) last = i;
            cum += w;
            if (w > 0 && cum > target) tok = (int32_t)(s->v0 + i);
        }
        if (tok < 0 && last >= 0) tok = (int32_t)(s->v0 + last);
    }
    if (s->comm) s->comm->ops->all_gather(s->comm, &tok, toks, sizeof tok, "sample.token");
    else toks[0] = tok;
    K3_CHECK(owner >= 0 && toks[owner] >= 0, "sampling found no token (every logit masked?)");
    return toks[owner];
}

void k3_sampler_pick(struct k3_sampler *s, const struct k3_sampling *p, uint64_t seq_id, float *x,
                     const struct k3_sample_hist *hist, int64_t pos, struct k3_sample_out *out)
{
    memset(out, 0, sizeof *out);
    if (s->nv) memcpy(s->raw, x, sizeof *x * (size_t)s->nv);
    penalize(p, x, s->v0, s->nv, hist, s->count, s->seen);
    if (s->mask.apply) s->mask.apply(s->mask.ctx, seq_id, s->v0, s->nv, x);
    if (p->temperature <= 0) {
        /* argmax; ties: lowest id (the group's best of each rank's best) */
        struct cand mine = {-INFINITY, -1}, all[GATHER_MAX], best = {-INFINITY, -1};
        int nb = 0, nm = 0;
        for (int64_t i = 0; i < s->nv; i++) insert_best(&mine, &nm, 1, (struct cand){x[i], (int32_t)(s->v0 + i)});
        if (s->comm) s->comm->ops->all_gather(s->comm, &mine, all, sizeof mine, "sample.argmax");
        else all[0] = mine;
        for (int r = 0; r < nranks(s); r++)
            if (all[r].id >= 0) insert_best(&best, &nb, 1, all[r]);
        K3_CHECK(nb && best.v > -INFINITY, "sampling found no token (every logit masked?)");
        out->token = best.id;
    } else {
        temper(p, x, s->nv);
        /* softmax statistics and the group's best K3_SAMPLER_CAND */
        struct cand mine[K3_SAMPLER_CAND + 1], all[GATHER_MAX * (K3_SAMPLER_CAND + 1)], L[K3_SAMPLER_CAND];
        int nm = 0, nL = 0, n = nranks(s);
        for (int64_t i = 0; i < s->nv; i++)
            insert_best(mine, &nm, K3_SAMPLER_CAND, (struct cand){x[i], (int32_t)(s->v0 + i)});
        for (int j = nm; j < K3_SAMPLER_CAND; j++) mine[j] = (struct cand){-INFINITY, -1};
        double lsum = 0;
        for (int64_t i = 0; i < s->nv && nm && mine[0].v > -INFINITY; i++) lsum += exp((double)x[i] - mine[0].v);
        memcpy(&mine[K3_SAMPLER_CAND], &lsum, sizeof lsum); /* the last record carries the sum */
        if (s->comm) s->comm->ops->all_gather(s->comm, mine, all, sizeof mine, "sample.cand");
        else memcpy(all, mine, sizeof mine);
        double M = -INFINITY, S = 0;
        for (int r = 0; r < n; r++) {
            const struct cand *c = &all[r * (K3_SAMPLER_CAND + 1)];
            for (int j = 0; j < K3_SAMPLER_CAND; j++)
                if (c[j].id >= 0) insert_best(L, &nL, K3_SAMPLER_CAND, c[j]);
            if (c[0].id >= 0 && c[0].v > M) M = c[0].v;
        }
        K3_CHECK(M > -INFINITY, "sampling found no token (every logit masked?)");
        for (int r = 0; r < n; r++) {
            const struct cand *c = &all[r * (K3_SAMPLER_CAND + 1)];
            double rs;
            memcpy(&rs, &c[K3_SAMPLER_CAND], sizeof rs);
            if (rs > 0) S += rs * exp((double)c[0].v - M);
        }
        int complete = s->vocab <= K3_SAMPLER_CAND;
        float vC = L[nL - 1].v; /* every token outside L is <= vC */
        double tau = -INFINITY, tau_k = -INFINITY, S_k = S;
        if (p->top_k > 0 && p->top_k < s->vocab) {
            tau_k = p->top_k <= nL ? L[p->top_k - 1].v
                                   : bisect(s, x, -INFINITY, (float)M, M, 0, (double)p->top_k);
            if (complete || tau_k > vC) {
                S_k = 0;
                for (int j = 0; j < nL && L[j].v >= tau_k; j++) S_k += exp((double)L[j].v - M);
            } else {
                S_k = sum_ge(s, x, tau_k, M, 1);
            }
            tau = tau_k;
        }
        if (p->top_p > 0 && p->top_p < 1) {
            double target = (double)p->top_p * S_k, cum = 0, tau_p = -INFINITY;
            int found = 0;
            for (int j = 0; j < nL && !found && L[j].v >= tau_k;) {
                float v = L[j].v;
                for (; j < nL && L[j].v == v; j++) cum += exp((double)v - M);
                if (cum >= target) tau_p = v, found = 1;
            }
            if (!found && !complete)
                tau_p = bisect(s, x, tau_k > -INFINITY ? (float)tau_k : -INFINITY, (float)M, M, 1, target);
            if (tau_p > tau) tau = tau_p;
        }
        if (p->min_p > 0) {
            double tau_m = M + log((double)p->min_p);
            if (tau_m > tau) tau = tau_m;
        }
        double u = k3_sampler_uniform(p->seed, pos);
        if (complete || tau > vC) {
            struct cand kept[K3_SAMPLER_CAND];
            int nk = 0;
            for (int j = 0; j < nL; j++) /* id order */
                if ((double)L[j].v >= tau) {
                    int i = nk++;
                    while (i > 0 && kept[i - 1].id > L[j].id) kept[i] = kept[i - 1], i--;
                    kept[i] = L[j];
                }
            int at = draw_list(kept, nk, M, u);
            K3_CHECK(at >= 0, "sampling found no token (every logit masked?)");
            out->token = kept[at].id;
        } else {
            out->token = pick_dist(s, x, tau, M, u);
        }
    }
    out->logprob = raw_logprob(s, out->token);
    int nt = p->n_logprobs;
    if (nt > K3_SAMPLER_TOP_MAX) nt = K3_SAMPLER_TOP_MAX;
    if (nt > s->vocab) nt = (int)s->vocab;
    if (nt > 0) {
        k3_dist_topk(s->raw, s->nv, s->v0, nt, s->comm, out->top_ids, out->top_logprobs);
        out->n_top = nt;
    }
}

/* ---- reference on one rank ---- */

void k3_sampler_process_ref(const struct k3_sampling *p, float *x, int64_t V,
                            const struct k3_sample_hist *hist)
{
    int32_t *count = calloc((size_t)V, sizeof *count);
    uint8_t *seen = calloc((size_t)V, 1);
    K3_CHECK(count && seen, "out of memory");
    penalize(p, x, 0, V, hist, count, seen);
    free(count);
    free(seen);
}

static const float *sort_x;
static int by_value(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_x[i] != sort_x[j]) return sort_x[i] > sort_x[j] ? -1 : 1;
    return (i > j) - (i < j);
}

void k3_sampler_probs_ref(const struct k3_sampling *p, const float *x0, int64_t V, double *probs)
{
    float *x = malloc(sizeof *x * (size_t)V);
    int32_t *ord = malloc(sizeof *ord * (size_t)V);
    K3_CHECK(x && ord, "out of memory");
    for (int64_t i = 0; i < V; i++) x[i] = x0[i], ord[i] = (int32_t)i, probs[i] = 0;
    if (p->temperature <= 0) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (x[i] > x[best]) best = i;
        probs[best] = 1;
    } else {
        temper(p, x, V);
        sort_x = x;
        qsort(ord, (size_t)V, sizeof *ord, by_value);
        double M = x[ord[0]], tau = -INFINITY, tau_k = -INFINITY, S_k = 0, Z = 0;
        if (p->top_k > 0 && p->top_k < V) tau = tau_k = x[ord[p->top_k - 1]];
        for (int64_t i = 0; i < V; i++)
            if ((double)x[i] >= tau_k) S_k += exp((double)x[i] - M);
        if (p->top_p > 0 && p->top_p < 1) {
            double cum = 0, target = (double)p->top_p * S_k;
            for (int64_t j = 0; j < V && x[ord[j]] >= tau_k;) {
                float v = x[ord[j]];
                for (; j < V && x[ord[j]] == v; j++) cum += exp((double)v - M);
                if (cum >= target) {
                    if (v > tau) tau = v;
                    break;
                }
            }
        }
        if (p->min_p > 0 && M + log((double)p->min_p) > tau) tau = M + log((double)p->min_p);
        for (int64_t i = 0; i < V; i++)
            if ((double)x[i] >= tau) Z += probs[i] = exp((double)x[i] - M);
        for (int64_t i = 0; i < V; i++) probs[i] /= Z;
    }
    free(x);
    free(ord);
}

int32_t k3_sampler_draw_ref(const double *probs, int64_t V, double u)
{
    double cum = 0;
    int64_t last = -1;
    for (int64_t i = 0; i < V; i++) {
        if (probs[i] > 0) last = i;
        cum += probs[i];
        if (probs[i] > 0 && cum > u) return (int32_t)i;
    }
    return (int32_t)last;
}
