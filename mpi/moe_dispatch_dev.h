/* moe_dispatch_dev.h - MoE dispatch and combine on DEVICE buffers, for the
 * NCCL and host-staged communicators, with the layout of moe_dispatch.h.
 *
 * The layout stays on the host: k3_moe_plan() runs over a HOST communicator
 * (the MPI one) on the router's top-k, which is small ([n_tok, 16] ids and
 * weights). The rows stay on the device: this file uploads the plan's row
 * order once per step and moves rows with the device communicator; packing
 * rows into send order and adding the partials that come back are device
 * kernels (kernels/cuda/moe_pack.cu). mpi/ may not include kernels/
 * (DESIGN §8), so those kernels come in as function pointers, wired by code
 * allowed to see both (validation/bench/bench_comm.c does it in two small
 * adapters; the engine will do the same). Rejected: a host round trip of the rows
 * (defeats NCCL), and cudaMemcpy2D batches for the packing (one call per
 * row for a gather by token index).
 *
 * Buffers are sized once at init for max_tok tokens (nothing is allocated
 * per step). Send buffer: [max_tok * world] rows at most (a token goes to a
 * rank at most once). */
#ifndef K3_MPI_MOE_DISPATCH_DEV_H
#define K3_MPI_MOE_DISPATCH_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "mpi/comm.h"
#include "mpi/moe_dispatch.h"

/* The device kernels, as function pointers (stream is a cudaStream_t). */
struct k3_moe_dev_kernels {
    /* dst[i, :] = src[idx[i], :], i < n_rows */
    void (*gather)(const void *src, const int32_t *idx, void *dst, int64_t n_rows,
                   size_t row_bytes, void *stream);
    /* out[t, :] = sum_k partial[tok_rows[k], :] for k in [tok_first[t], tok_first[t+1]) */
    void (*combine)(const void *partial, enum k3_dtype t, const int32_t *tok_first,
                    const int32_t *tok_rows, float *out, int64_t n_tok, int dim, void *stream);
};

struct k3_moe_dev {
    struct k3_moe_dev_kernels k;
    void *stream;                    /* cudaStream_t, the caller's */
    int world, max_tok;
    size_t max_row_bytes;
    /* host: per token, its send rows in rank order (a CSR of send_tok) */
    int32_t *h_send_tok;             /* [max_tok * world] */
    int32_t *h_tok_first;            /* [max_tok + 1] */
    int32_t *h_tok_rows;             /* [max_tok * world] */
    int32_t *h_cursor;               /* [max_tok] scratch */
    /* device copies, and the row buffers */
    int32_t *d_send_tok;             /* [max_tok * world] */
    int32_t *d_tok_first;            /* [max_tok + 1] */
    int32_t *d_tok_rows;             /* [max_tok * world] */
    void *d_send;                    /* [max_tok * world, max_row_bytes] packed rows, and the partials coming back */
};

void k3_moe_dev_init(struct k3_moe_dev *m, const struct k3_moe_dev_kernels *k, void *stream,
                     int world, int max_tok, size_t max_row_bytes);
void k3_moe_dev_free(struct k3_moe_dev *m);

/* After k3_moe_plan(l, host_comm, ...): copy the row order to the device
 * (on the stream; asynchronous). */
void k3_moe_dev_upload_plan(struct k3_moe_dev *m, const struct k3_moe_layout *l);

/* x: [n_tok, row_bytes] on the device -> recv: [l->n_recv, row_bytes] on the
 * device, grouped by source rank (moe_dispatch.h). c: device communicator. */
void k3_moe_dev_dispatch(struct k3_moe_dev *m, const struct k3_moe_layout *l, struct k3_comm *c,
                         const void *x, size_t row_bytes, void *recv, const char *what);

/* y_recv: [l->n_recv, dim] of t (F32 or BF16) on the device, each row this
 * rank's weighted expert sum -> out: [n_tok, dim] fp32 on the device, the sum
 * of every destination's partial in rank order. */
void k3_moe_dev_combine(struct k3_moe_dev *m, const struct k3_moe_layout *l, struct k3_comm *c,
                        const void *y_recv, enum k3_dtype t, int dim, float *out,
                        const char *what);

#endif
