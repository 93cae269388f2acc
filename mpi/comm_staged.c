/* comm_staged.c - see comm_staged.h. A thin wrapper: the MPI communicator
 * (comm_mpi.c, with its timeouts) does the collective on host buffers; this
 * file only moves bytes between the device and two pinned staging buffers on
 * the caller's stream (so the copies are ordered after the kernels that
 * produced the data) and synchronises before and after the MPI call.
 * cudaMemcpyDefault lets the same code take host pointers too (UVA), so the
 * MoE dispatch layer, which exchanges host-side counts, works unchanged.
 * All-to-all-v copies block by block: a receive buffer may have gaps between
 * blocks that hold someone else's data. Not a fast path (two PCIe hops per
 * collective); it exists for tests with several ranks on one GPU. */
#include "mpi/comm_staged.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* mpi/ may not include kernels/ (DESIGN §8): a local check, as in comm_nccl.c. */
#define CHECK_CUDA_RT(call)                                                    \
    do {                                                                       \
        cudaError_t rc_ = (call);                                              \
        if (rc_ != cudaSuccess)                                                \
            k3_fatal(__FILE__, __LINE__, #call, "CUDA error %d (%s)", (int)rc_, \
                     cudaGetErrorString(rc_));                                 \
    } while (0)

struct comm_staged {
    struct k3_comm inner;       /* the MPI communicator, host buffers */
    cudaStream_t stream;
    char *hsend, *hrecv;        /* pinned, max_bytes each */
    size_t max_bytes;
};

static struct comm_staged *impl(struct k3_comm *c) { return (struct comm_staged *)c->impl; }

static void fits(struct k3_comm *c, size_t bytes, const char *op, const char *what)
{
    if (bytes > impl(c)->max_bytes)
        K3_FATAL("%s for \"%s\" moves %zu bytes; the staged communicator was sized for %zu "
                 "(raise max_bytes at k3_comm_init_staged)", op, what, bytes,
                 impl(c)->max_bytes);
}

static void copy(struct k3_comm *c, void *dst, const void *src, size_t bytes)
{
    if (bytes) CHECK_CUDA_RT(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl(c)->stream));
}

static void sync(struct k3_comm *c) { CHECK_CUDA_RT(cudaStreamSynchronize(impl(c)->stream)); }

static void staged_all_reduce(struct k3_comm *c, void *buf, size_t count, enum k3_dtype t,
                              const char *what)
{
    struct comm_staged *s = impl(c);
    size_t bytes = count * k3_dtype_bytes(t);
    fits(c, bytes, "all_reduce", what);
    copy(c, s->hsend, buf, bytes);
    sync(c);
    s->inner.ops->all_reduce(&s->inner, s->hsend, count, t, what);
    copy(c, buf, s->hsend, bytes);
    sync(c);
}

static void staged_reduce_scatter(struct k3_comm *c, const void *send, void *recv, size_t count,
                                  enum k3_dtype t, const char *what)
{
    struct comm_staged *s = impl(c);
    size_t bytes = count * k3_dtype_bytes(t);
    fits(c, bytes * (size_t)c->size, "reduce_scatter", what);
    copy(c, s->hsend, send, bytes * (size_t)c->size);
    sync(c);
    s->inner.ops->reduce_scatter(&s->inner, s->hsend, s->hrecv, count, t, what);
    copy(c, recv, s->hrecv, bytes);
    sync(c);
}

static void staged_all_gather(struct k3_comm *c, const void *send, void *recv, size_t bytes,
                              const char *what)
{
    struct comm_staged *s = impl(c);
    fits(c, bytes * (size_t)c->size, "all_gather", what);
    copy(c, s->hsend, send, bytes);
    sync(c);
    s->inner.ops->all_gather(&s->inner, s->hsend, s->hrecv, bytes, what);
    copy(c, recv, s->hrecv, bytes * (size_t)c->size);
    sync(c);
}

static void staged_all_to_all(struct k3_comm *c, const void *send, void *recv, size_t bytes,
                              const char *what)
{
    struct comm_staged *s = impl(c);
    fits(c, bytes * (size_t)c->size, "all_to_all", what);
    copy(c, s->hsend, send, bytes * (size_t)c->size);
    sync(c);
    s->inner.ops->all_to_all(&s->inner, s->hsend, s->hrecv, bytes, what);
    copy(c, recv, s->hrecv, bytes * (size_t)c->size);
    sync(c);
}

static void staged_all_to_all_v(struct k3_comm *c, const void *send, const size_t *send_bytes,
                                const size_t *send_off, void *recv, const size_t *recv_bytes,
                                const size_t *recv_off, const char *what)
{
    struct comm_staged *s = impl(c);
    size_t send_end = 0, recv_end = 0;
    for (int r = 0; r < c->size; r++) {
        if (send_bytes[r] && send_off[r] + send_bytes[r] > send_end)
            send_end = send_off[r] + send_bytes[r];
        if (recv_bytes[r] && recv_off[r] + recv_bytes[r] > recv_end)
            recv_end = recv_off[r] + recv_bytes[r];
    }
    fits(c, send_end, "all_to_all_v (send)", what);
    fits(c, recv_end, "all_to_all_v (receive)", what);
    for (int r = 0; r < c->size; r++)
        copy(c, s->hsend + send_off[r], (const char *)send + send_off[r], send_bytes[r]);
    sync(c);
    s->inner.ops->all_to_all_v(&s->inner, s->hsend, send_bytes, send_off, s->hrecv, recv_bytes,
                               recv_off, what);
    for (int r = 0; r < c->size; r++)
        copy(c, (char *)recv + recv_off[r], s->hrecv + recv_off[r], recv_bytes[r]);
    sync(c);
}

static void staged_barrier(struct k3_comm *c, const char *what)
{
    sync(c);   /* work enqueued before the barrier is done when it returns */
    impl(c)->inner.ops->barrier(&impl(c)->inner, what);
}

static void staged_free(struct k3_comm *c)
{
    struct comm_staged *s = impl(c);
    if (!s) return;
    k3_comm_free(&s->inner);
    CHECK_CUDA_RT(cudaFreeHost(s->hsend));
    CHECK_CUDA_RT(cudaFreeHost(s->hrecv));
    free(s);
    c->impl = NULL;
}

static const struct k3_comm_ops staged_ops = {
    .all_reduce = staged_all_reduce,
    .reduce_scatter = staged_reduce_scatter,
    .all_gather = staged_all_gather,
    .all_to_all = staged_all_to_all,
    .all_to_all_v = staged_all_to_all_v,
    .barrier = staged_barrier,
    .free = staged_free,
};

void k3_comm_init_staged(struct k3_comm *c, MPI_Comm parent, void *stream, size_t max_bytes,
                         int timeout_s)
{
    memset(c, 0, sizeof *c);
    struct comm_staged *s = calloc(1, sizeof *s);
    K3_CHECK(s, "out of memory");
    k3_comm_init_mpi(&s->inner, parent, timeout_s);
    s->stream = (cudaStream_t)stream;
    s->max_bytes = max_bytes;
    CHECK_CUDA_RT(cudaMallocHost((void **)&s->hsend, max_bytes ? max_bytes : 1));
    CHECK_CUDA_RT(cudaMallocHost((void **)&s->hrecv, max_bytes ? max_bytes : 1));
    c->ops = &staged_ops;
    c->kind = "mpi-staged";
    c->rank = s->inner.rank;
    c->size = s->inner.size;
    c->timeout_s = s->inner.timeout_s;
    c->impl = s;
}
