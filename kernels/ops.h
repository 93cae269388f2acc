/* ops.h - the backend op interface: every op the K3 / Kimi Linear forward pass
 * calls, with its shapes and dtypes. The model code calls only through a
 * `struct k3_backend` (be->ops->matmul(be, &p)), so it never knows which
 * backend runs it. The CPU backend (kernels/cpu/) implements the table now, in
 * fp32 with fp64 where a reduction needs it; a CUDA backend implements the same
 * table later and is tested op by op against the CPU one.
 *
 * Conventions:
 * - Activations are fp32, row-major, one row per token; `ld*` are row strides in
 *   elements (so a head or column slice of a wider buffer can be passed as is).
 * - Weights are `struct k3_mat` views of the checkpoint as stored (f32, bf16 or
 *   MXFP4 = E2M1 nibbles + E8M0 scales per 32 along the input axis). Small
 *   per-channel vectors (norm weights, biases, A_log, conv taps) are passed as
 *   fp32 arrays: converting bf16 to fp32 is exact, so this changes no value.
 * - Ops write their outputs; only ops whose parameter says "accumulate" add.
 * - Params structs instead of long argument lists (STYLE.md, DeepEP habit). */
#ifndef K3_KERNELS_OPS_H
#define K3_KERNELS_OPS_H

#include <stdint.h>

enum k3_wfmt {
    K3_WFMT_F32 = 0,
    K3_WFMT_BF16,
    K3_WFMT_F16,
    K3_WFMT_F8_E4M3,
    K3_WFMT_MXFP4,  /* packed: byte j of a row holds elements 2j (low nibble), 2j+1 (high) */
};

/* A weight matrix [rows, cols] (rows = output features of a linear layer). */
struct k3_mat {
    enum k3_wfmt fmt;
    const void *data;       /* F32/BF16/F16/F8: elements; MXFP4: packed bytes, ld/2 per row */
    const uint8_t *scale;   /* MXFP4 only: E8M0 bytes, ld/32 per row */
    int64_t rows, cols;
    int64_t ld;             /* elements between consecutive rows (>= cols) */
};

/* y[n, w.rows] = x[n, w.cols] · wᵀ                 (trans = 0: a linear layer)
 * y[n, w.cols] = x[n, w.rows] · w                  (trans = 1: used by MLA weight
 *                                                   absorption, q·W_UK)
 * fp32 accumulation; accumulate = 1 adds to y instead of overwriting it. */
struct k3_matmul_params {
    const float *x;
    int64_t ldx;
    const struct k3_mat *w;
    float *y;
    int64_t ldy;
    int64_t n;
    int trans;
    int accumulate;
};

/* out[i, :] = row ids[i] of the embedding table, as fp32. out is [n, w.cols]. */
struct k3_embed_params {
    const struct k3_mat *w;
    const int32_t *ids;
    int64_t n;
    float *out;
};

/* RMSNorm over rows of d: y = x · rsqrt(mean(x²) + eps) · w  [· sigmoid(gate)]
 * w may be NULL (no weight); w has d entries and is shared by all rows, so a
 * per-head norm is n_rows = n_tok·H, d = head_dim. gate (optional, same shape
 * as x) makes it FLA's FusedRMSNormGated with activation sigmoid (KDA output).
 * The sum of squares is taken in fp64. y may alias x. */
struct k3_rmsnorm_params {
    const float *x;
    int64_t ldx;
    const float *w;
    const float *gate;
    int64_t ldg;
    float *y;
    int64_t ldy;
    int64_t n_rows, d;
    double eps;
};

/* L2 norm over rows of d, eps inside the sqrt: y = x / sqrt(Σx² + eps) · scale.
 * (research/model-architecture.md §1.2 step 4-5.) y may alias x. */
struct k3_l2norm_params {
    const float *x;
    float *y;
    int64_t n_rows, d;
    double eps;
    double scale;
};

/* KDA short causal depthwise conv + SiLU, one of q/k/v (§1.2 step 2):
 *   c_t[ch] = Σ_j w[ch, j] · x_{t-W+1+j}[ch],  y = SiLU(c)
 * x [n, D] (ldx), w [D, W] fp32, y [n, D].
 * tail [W-1, D]: the W-1 inputs before x[0] (oldest first). NULL means zeros and
 * nothing is kept; otherwise it is read, then overwritten with the last W-1
 * inputs, so prefill then decode continues the sequence. */
struct k3_conv_params {
    const float *x;
    int64_t ldx;
    const float *w;
    float *tail;
    float *y;
    int64_t n, d;
    int width;
};

enum k3_kda_gate_form {
    K3_KDA_GATE_SOFTPLUS = 0,   /* Kimi Linear: g = -exp(A_log[h]) · softplus(f + dt_bias) */
    K3_KDA_GATE_LOWER_BOUND,    /* K3: g = lb · sigmoid(exp(A_log[h]) · (f + dt_bias)) */
};

/* KDA decay gate in log space (§1.2 step 6). f [n, H·K] (ldf), dt_bias [H·K],
 * a_log [H] (first H entries only), g [n, H·K]. */
struct k3_kda_gate_params {
    const float *f;
    int64_t ldf;
    const float *dt_bias;
    const float *a_log;
    float *g;
    int64_t n;
    int n_head, head_dim;
    enum k3_kda_gate_form form;
    double lower_bound;
};

/* The gated delta rule over n tokens of one sequence (§1.2 step 8, §1.4).
 * q [n, H, K] already L2-normalised and scaled; k [n, H, K] L2-normalised;
 * v [n, H, V]; g [n, H, K] log decay; beta [n, H] (after the sigmoid);
 * state [H, K, V] fp32, read and updated in place; o [n, H, V].
 * chunk = 0: the recurrent form token by token; chunk = C > 0: the chunked
 * (WY/UT) form in chunks of C tokens. Both give the same result. */
struct k3_kda_params {
    const float *q, *k, *v, *g, *beta;
    float *state;
    float *o;
    int64_t n;
    int n_head, dk, dv;
    int chunk;
};

/* Causal softmax attention of n queries against T keys.
 * q: token i, head h at q[i*q_ts + h*q_hs], dqk values; k likewise (k_hs = 0:
 * one head shared by all, as MLA's absorbed latent); v: dv values; o [n, H, dv]
 * at o[i*o_ts + h*o_hs]. Query i is at position pos0 + i and sees keys
 * 0..pos0+i. Scores, softmax (online, max-subtracted) and sums in fp64. */
struct k3_attn_params {
    const float *q, *k, *v;
    float *o;
    int64_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs;
    int64_t n, n_kv, pos0;
    int n_head, dqk, dv;
    double scale;
};

enum k3_glu_act {
    K3_GLU_SILU = 0,  /* SiLU-GLU: silu(g) · u */
    K3_GLU_SITU,      /* SiTU-GLU: β·tanh(g/β)·σ(g) · β_lin·tanh(u/β_lin)  (§4.2) */
};

/* y = act(gate, up) elementwise over [n, m]. */
struct k3_glu_params {
    const float *gate, *up;
    int64_t ldg, ldu;
    float *y;
    int64_t ldy;
    int64_t n, m;
    enum k3_glu_act act;
    double beta, beta_lin;
};

/* Router (§2.5): s = sigmoid(logits); choose top-k of s + bias (bias may be
 * NULL; selection only); w = s of the chosen, renormalised (w / (Σw + 1e-20))
 * if renorm, times scale. logits [n, E]; idx, w [n, k] (descending score). */
struct k3_router_params {
    const float *logits;
    const float *bias;
    int32_t *idx;
    float *w;
    int64_t n;
    int n_expert, k;
    int renorm;
    double scale;
};

/* Routed experts: y[i] = Σ_j w[i,j] · E_{idx[i,j]}(x[i]),
 * E(x) = w2 · act(w1 x, w3 x). x [n, d_in], y [n, d_out] (overwritten),
 * w1/w3/w2: arrays of n_expert matrices ([m, d_in], [m, d_in], [d_out, m]);
 * an expert with w1[e].data == NULL must not be selected. Weighted sum in fp32. */
struct k3_moe_params {
    const float *x;
    float *y;
    const int32_t *idx;
    const float *w;
    int64_t n;
    int k, n_expert;
    const struct k3_mat *w1, *w3, *w2;
    enum k3_glu_act act;
    double beta, beta_lin;
};

/* Block AttnRes mixing (§3.3) for n tokens: candidates V_j (j < n_cand) each
 * [n, d]; per token s_j = (V_j / sqrt(mean(V_j²) + eps)) · q, α = softmax(s),
 * out = Σ α_j V_j. q = norm.weight ⊙ proj.weight [d]. fp64 scores and sums. */
struct k3_attn_res_params {
    const float *const *cand;
    int n_cand;
    const float *q;
    float *out;
    int64_t n, d;
    double eps;
};

enum k3_ew_op {
    K3_EW_ADD = 0,      /* y = a + b */
    K3_EW_SIGMOID,      /* y = sigmoid(a) */
    K3_EW_MUL_SIGMOID,  /* y = a · sigmoid(b) */
    K3_EW_COPY,         /* y = a (a strided 2-D copy: residual stream, caches, head slices) */
};

/* Elementwise over [n, m] with row strides. b unused for K3_EW_SIGMOID and
 * K3_EW_COPY. The model moves and adds activations only through this op, so
 * it never touches backend memory itself. */
struct k3_ew_params {
    enum k3_ew_op op;
    const float *a, *b;
    int64_t lda, ldb;
    float *y;
    int64_t ldy;
    int64_t n, m;
};

struct k3_backend;

struct k3_ops {
    const char *name;
    void (*matmul)(struct k3_backend *be, const struct k3_matmul_params *p);
    void (*embed)(struct k3_backend *be, const struct k3_embed_params *p);
    void (*rmsnorm)(struct k3_backend *be, const struct k3_rmsnorm_params *p);
    void (*l2norm)(struct k3_backend *be, const struct k3_l2norm_params *p);
    void (*conv)(struct k3_backend *be, const struct k3_conv_params *p);
    void (*kda_gate)(struct k3_backend *be, const struct k3_kda_gate_params *p);
    void (*kda)(struct k3_backend *be, const struct k3_kda_params *p);
    void (*attn)(struct k3_backend *be, const struct k3_attn_params *p);
    void (*glu)(struct k3_backend *be, const struct k3_glu_params *p);
    void (*router)(struct k3_backend *be, const struct k3_router_params *p);
    void (*moe)(struct k3_backend *be, const struct k3_moe_params *p);
    void (*attn_res)(struct k3_backend *be, const struct k3_attn_res_params *p);
    void (*ew)(struct k3_backend *be, const struct k3_ew_params *p);
};

/* A backend instance: its op table and its private state (thread pool,
 * streams, ...). */
struct k3_backend {
    const struct k3_ops *ops;
    void *impl;
    int n_threads;
};

#endif
