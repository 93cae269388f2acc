/* kda.c - the KDA gated delta rule over one sequence (see ops.h, struct
 * k3_kda_params; research/model-architecture.md §1.2 step 8 and §1.4).
 *
 * The pool splits heads; heads are independent. State S [K, V] per head is
 * fp32 between tokens (recurrent) or chunks (chunked); the math inside a step
 * or a chunk is fp64.
 *
 * Recurrent, per token:  S ← Diag(e^g) S;  δ = β (v − Sᵀk);  S += k δᵀ;  o = Sᵀq.
 *
 * Chunked, per chunk of C tokens with state S0 and Γ_r = Σ_{s≤r} g_s:
 *   δ_r = β_r (v_r − (k_r ⊙ e^{Γ_r})ᵀ S0) − Σ_{j<r} L[r,j] δ_j,
 *         L[r,j] = β_r Σ_i k_r[i] k_j[i] e^{Γ_r[i]−Γ_j[i]}
 *     (forward substitution with the unit lower-triangular I+L: the same as
 *      Δ = T V − T (K ⊙ e^Γ) S0 with T = (I+L)⁻¹ Diag(β) in §1.4),
 *   o_r = (q_r ⊙ e^{Γ_r})ᵀ S0 + Σ_{j≤r} M[r,j] δ_j,  M[r,j] = Σ_i q_r[i] k_j[i] e^{Γ_r[i]−Γ_j[i]},
 *   S_C = Diag(e^{Γ_{C−1}}) S0 + Σ_r (k_r ⊙ e^{Γ_{C−1}−Γ_r}) δ_rᵀ.
 * Every pairwise decay is one exp of a difference Γ_r − Γ_j ≤ 0; it is never
 * split into e^{Γ_r}·e^{−Γ_j}, whose second factor overflows (§1.4 numerics). */
#include "kernels/cpu/kda.h"

#include <math.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"

static void kda_recurrent_head(const struct k3_kda_params *p, int h, double *u)
{
    int K = p->dk, V = p->dv, H = p->n_head;
    float *S = p->state + (int64_t)h * K * V;
    for (int64_t t = 0; t < p->n; t++) {
        const float *q = p->q + (t * H + h) * K;
        const float *k = p->k + (t * H + h) * K;
        const float *v = p->v + (t * H + h) * V;
        const float *g = p->g + (t * H + h) * K;
        double beta = p->beta[t * H + h];
        float *o = p->o + (t * H + h) * V;
        for (int i = 0; i < K; i++) {
            float a = expf(g[i]);
            for (int j = 0; j < V; j++) S[i * V + j] *= a;
        }
        for (int j = 0; j < V; j++) u[j] = 0;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < V; j++) u[j] += (double)k[i] * S[i * V + j];
        for (int j = 0; j < V; j++) u[j] = beta * ((double)v[j] - u[j]);   /* δ */
        for (int i = 0; i < K; i++)
            for (int j = 0; j < V; j++) S[i * V + j] = (float)(S[i * V + j] + (double)k[i] * u[j]);
        for (int j = 0; j < V; j++) {
            double s = 0;
            for (int i = 0; i < K; i++) s += (double)q[i] * S[i * V + j];
            o[j] = (float)s;
        }
    }
}

struct chunk_scratch {
    double *gam;    /* [C, K] cumulative log decay */
    double *delta;  /* [C, V] */
    double *snew;   /* [K, V] */
};

static void kda_chunk_head(const struct k3_kda_params *p, int h, struct chunk_scratch *sc)
{
    int K = p->dk, V = p->dv, H = p->n_head, C = p->chunk;
    float *S = p->state + (int64_t)h * K * V;
#define Q(t, i) ((double)p->q[((t) * H + h) * K + (i)])
#define KK(t, i) ((double)p->k[((t) * H + h) * K + (i)])
#define VV(t, j) ((double)p->v[((t) * H + h) * V + (j)])
    for (int64_t t0 = 0; t0 < p->n; t0 += C) {
        int c = (int)(p->n - t0 < C ? p->n - t0 : C);
        /* Γ: within-chunk cumulative sum of g. */
        for (int r = 0; r < c; r++)
            for (int i = 0; i < K; i++)
                sc->gam[r * K + i] = (r ? sc->gam[(r - 1) * K + i] : 0.0) +
                                     (double)p->g[((t0 + r) * H + h) * K + i];
        /* δ by forward substitution. */
        for (int r = 0; r < c; r++) {
            double beta = p->beta[(t0 + r) * H + h];
            double *d = sc->delta + r * V;
            for (int j = 0; j < V; j++) d[j] = VV(t0 + r, j);
            for (int i = 0; i < K; i++) {
                double ke = KK(t0 + r, i) * exp(sc->gam[r * K + i]);
                for (int j = 0; j < V; j++) d[j] -= ke * S[i * V + j];
            }
            for (int j = 0; j < V; j++) d[j] *= beta;
            for (int jr = 0; jr < r; jr++) {
                double l = 0;
                for (int i = 0; i < K; i++)
                    l += KK(t0 + r, i) * KK(t0 + jr, i) * exp(sc->gam[r * K + i] - sc->gam[jr * K + i]);
                l *= beta;
                for (int j = 0; j < V; j++) d[j] -= l * sc->delta[jr * V + j];
            }
        }
        /* Outputs. */
        for (int r = 0; r < c; r++) {
            float *o = p->o + ((t0 + r) * H + h) * V;
            double *acc = sc->snew;   /* borrowed as a [V] accumulator; snew is rebuilt below */
            for (int j = 0; j < V; j++) acc[j] = 0;
            for (int i = 0; i < K; i++) {
                double qe = Q(t0 + r, i) * exp(sc->gam[r * K + i]);
                for (int j = 0; j < V; j++) acc[j] += qe * S[i * V + j];
            }
            for (int jr = 0; jr <= r; jr++) {
                double m = 0;
                for (int i = 0; i < K; i++)
                    m += Q(t0 + r, i) * KK(t0 + jr, i) * exp(sc->gam[r * K + i] - sc->gam[jr * K + i]);
                for (int j = 0; j < V; j++) acc[j] += m * sc->delta[jr * V + j];
            }
            for (int j = 0; j < V; j++) o[j] = (float)acc[j];
        }
        /* Next state. */
        const double *glast = sc->gam + (c - 1) * K;
        for (int i = 0; i < K; i++) {
            double a = exp(glast[i]);
            for (int j = 0; j < V; j++) sc->snew[i * V + j] = a * S[i * V + j];
        }
        for (int r = 0; r < c; r++)
            for (int i = 0; i < K; i++) {
                double ke = KK(t0 + r, i) * exp(glast[i] - sc->gam[r * K + i]);
                for (int j = 0; j < V; j++) sc->snew[i * V + j] += ke * sc->delta[r * V + j];
            }
        for (int64_t e = 0; e < (int64_t)K * V; e++) S[e] = (float)sc->snew[e];
    }
#undef Q
#undef KK
#undef VV
}

struct kda_job {
    const struct k3_kda_params *p;
    struct k3_backend *be;
};

static void kda_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct kda_job *job = ctx;
    const struct k3_kda_params *p = job->p;
    if (p->chunk <= 0) {
        double *u = k3_cpu_scratch(job->be, worker, K3_CPU_SLOT_RANGE, sizeof(double) * (size_t)p->dv);
        for (int64_t h = begin; h < end; h++) kda_recurrent_head(p, (int)h, u);
        return;
    }
    size_t C = (size_t)p->chunk, K = (size_t)p->dk, V = (size_t)p->dv;
    double *buf = k3_cpu_scratch(job->be, worker, K3_CPU_SLOT_RANGE, sizeof(double) * (C * K + C * V + K * V));
    struct chunk_scratch sc = {.gam = buf, .delta = buf + C * K, .snew = buf + C * K + C * V};
    for (int64_t h = begin; h < end; h++) kda_chunk_head(p, (int)h, &sc);
}

void k3_cpu_kda(struct k3_backend *be, const struct k3_kda_params *p)
{
    if (p->n <= 0) return;
    struct kda_job job = {p, be};
    k3_pool_for(k3_cpu_pool(be), p->n_head, kda_range, &job);
}
