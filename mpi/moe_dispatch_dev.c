/* moe_dispatch_dev.c - see moe_dispatch_dev.h. The same byte offsets as
 * moe_dispatch.c, computed from the same layout; only the buffers differ. */
#include "mpi/moe_dispatch_dev.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* mpi/ may not include kernels/ (DESIGN §8): a local check, as in comm_staged.c. */
#define CHECK_CUDA_RT(call)                                                    \
    do {                                                                       \
        cudaError_t rc_ = (call);                                              \
        if (rc_ != cudaSuccess)                                                \
            k3_fatal(__FILE__, __LINE__, #call, "CUDA error %d (%s)", (int)rc_, \
                     cudaGetErrorString(rc_));                                 \
    } while (0)

void k3_moe_dev_init(struct k3_moe_dev *m, const struct k3_moe_dev_kernels *k, void *stream,
                     int world, int max_tok, size_t max_row_bytes)
{
    memset(m, 0, sizeof *m);
    K3_CHECK(k && k->gather && k->combine, "MoE device dispatch needs its gather and combine kernels");
    K3_CHECK(world >= 1 && max_tok >= 1, "MoE device dispatch: world %d, max_tok %d", world, max_tok);
    m->k = *k;
    m->stream = stream;
    m->world = world;
    m->max_tok = max_tok;
    m->max_row_bytes = max_row_bytes;
    size_t rows = (size_t)max_tok * (size_t)world;
    /* one host block: send_tok [rows] | tok_rows [rows] | tok_first [max_tok + 1] | cursor [max_tok] */
    m->h_send_tok = malloc(sizeof(int32_t) * (2 * rows + 2 * (size_t)max_tok + 1));
    K3_CHECK(m->h_send_tok, "out of memory");
    m->h_tok_rows = m->h_send_tok + rows;
    m->h_tok_first = m->h_tok_rows + rows;
    m->h_cursor = m->h_tok_first + max_tok + 1;
    CHECK_CUDA_RT(cudaMalloc((void **)&m->d_send_tok, sizeof(int32_t) * rows));
    CHECK_CUDA_RT(cudaMalloc((void **)&m->d_tok_first, sizeof(int32_t) * ((size_t)max_tok + 1)));
    CHECK_CUDA_RT(cudaMalloc((void **)&m->d_tok_rows, sizeof(int32_t) * rows));
    CHECK_CUDA_RT(cudaMalloc(&m->d_send, rows * max_row_bytes));
}

void k3_moe_dev_free(struct k3_moe_dev *m)
{
    if (m->h_send_tok) {
        CHECK_CUDA_RT(cudaFree(m->d_send_tok));
        CHECK_CUDA_RT(cudaFree(m->d_tok_first));
        CHECK_CUDA_RT(cudaFree(m->d_tok_rows));
        CHECK_CUDA_RT(cudaFree(m->d_send));
    }
    free(m->h_send_tok);
    memset(m, 0, sizeof *m);
}

void k3_moe_dev_upload_plan(struct k3_moe_dev *m, const struct k3_moe_layout *l)
{
    K3_CHECK(l->n_tok <= m->max_tok && l->world == m->world,
             "MoE device dispatch sized for %d tokens on %d ranks, the plan has %d on %d",
             m->max_tok, m->world, l->n_tok, l->world);
    /* the host arrays may still feed the previous step's copies */
    CHECK_CUDA_RT(cudaStreamSynchronize((cudaStream_t)m->stream));
    int32_t *first = m->h_tok_first;
    memset(first, 0, sizeof(int32_t) * ((size_t)l->n_tok + 1));
    for (size_t i = 0; i < l->n_send; i++) {
        m->h_send_tok[i] = l->send_tok[i];
        first[l->send_tok[i] + 1]++;
    }
    for (int t = 0; t < l->n_tok; t++) first[t + 1] += first[t];
    /* Send rows are rank-major, token order inside a rank: walking them in
     * order lists each token's rows in rank order. */
    memcpy(m->h_cursor, first, sizeof(int32_t) * (size_t)l->n_tok);
    for (size_t i = 0; i < l->n_send; i++) m->h_tok_rows[m->h_cursor[l->send_tok[i]]++] = (int32_t)i;
    cudaStream_t s = (cudaStream_t)m->stream;
    CHECK_CUDA_RT(cudaMemcpyAsync(m->d_send_tok, m->h_send_tok, sizeof(int32_t) * l->n_send,
                                  cudaMemcpyHostToDevice, s));
    CHECK_CUDA_RT(cudaMemcpyAsync(m->d_tok_first, first, sizeof(int32_t) * ((size_t)l->n_tok + 1),
                                  cudaMemcpyHostToDevice, s));
    CHECK_CUDA_RT(cudaMemcpyAsync(m->d_tok_rows, m->h_tok_rows, sizeof(int32_t) * l->n_send,
                                  cudaMemcpyHostToDevice, s));
}

/* Byte blocks per rank for rows of row_bytes; `back` swaps the directions. */
static void blocks(const struct k3_moe_layout *l, size_t row_bytes, int back, size_t *sb,
                   size_t *so, size_t *rb, size_t *ro)
{
    for (int r = 0; r < l->world; r++) {
        size_t s_rows = back ? l->recv_rows[r] : l->send_rows[r];
        size_t s_first = back ? l->recv_first[r] : l->send_first[r];
        size_t r_rows = back ? l->send_rows[r] : l->recv_rows[r];
        size_t r_first = back ? l->send_first[r] : l->recv_first[r];
        sb[r] = s_rows * row_bytes;
        so[r] = s_first * row_bytes;
        rb[r] = r_rows * row_bytes;
        ro[r] = r_first * row_bytes;
    }
}

void k3_moe_dev_dispatch(struct k3_moe_dev *m, const struct k3_moe_layout *l, struct k3_comm *c,
                         const void *x, size_t row_bytes, void *recv, const char *what)
{
    K3_CHECK(row_bytes <= m->max_row_bytes, "%s: rows of %zu bytes, sized for %zu", what,
             row_bytes, m->max_row_bytes);
    /* [n_send, row_bytes]: x's rows in send order */
    m->k.gather(x, m->d_send_tok, m->d_send, (int64_t)l->n_send, row_bytes, m->stream);
    size_t *sb = l->bytes_scratch, *so = sb + l->world, *rb = so + l->world, *ro = rb + l->world;
    blocks(l, row_bytes, 0, sb, so, rb, ro);
    c->ops->all_to_all_v(c, m->d_send, sb, so, recv, rb, ro, what);
}

void k3_moe_dev_combine(struct k3_moe_dev *m, const struct k3_moe_layout *l, struct k3_comm *c,
                        const void *y_recv, enum k3_dtype t, int dim, float *out,
                        const char *what)
{
    size_t row_bytes = k3_dtype_bytes(t) * (size_t)dim;
    K3_CHECK(row_bytes <= m->max_row_bytes, "%s: partials of %zu bytes, sized for %zu", what,
             row_bytes, m->max_row_bytes);
    size_t *sb = l->bytes_scratch, *so = sb + l->world, *rb = so + l->world, *ro = rb + l->world;
    blocks(l, row_bytes, 1, sb, so, rb, ro);
    /* [n_send, dim]: the partials back in send order, into the send buffer */
    c->ops->all_to_all_v(c, y_recv, sb, so, m->d_send, rb, ro, what);
    /* [n_tok, dim] fp32 */
    m->k.combine(m->d_send, t, m->d_tok_first, m->d_tok_rows, out, l->n_tok, dim, m->stream);
}
