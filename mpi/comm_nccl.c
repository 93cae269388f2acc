/* comm_nccl.c - the NCCL communicator (one rank per GPU; device buffers).
 *
 * Bootstrap: rank 0 of `parent` calls ncclGetUniqueId and broadcasts it with
 * MPI; every rank then calls ncclCommInitRank on its current CUDA device.
 * Each collective is enqueued on the caller's stream and then waited for by
 * polling cudaStreamQuery and ncclCommGetAsyncError against a deadline: a
 * dead peer shows up as an asynchronous error or as a timeout, and both end
 * in ncclCommAbort and k3_fatal naming this rank, its host and the work.
 * All-to-all-v is a grouped ncclSend/ncclRecv to every peer. */
#include "core/clock.h"
#include "mpi/comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "mpi/mpi_check.h"
#include "mpi/nccl_check.h"

/* mpi/ may not include kernels/ (DESIGN §8): a local check for the few
 * runtime calls made here. */
#define CHECK_CUDA_RT(call)                                                    \
    do {                                                                       \
        cudaError_t rc_ = (call);                                              \
        if (rc_ != cudaSuccess)                                                \
            k3_fatal(__FILE__, __LINE__, #call, "CUDA error %d (%s)", (int)rc_, \
                     cudaGetErrorString(rc_));                                 \
    } while (0)

struct comm_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    float *barrier_word;    /* device scratch of the barrier, made once */
    char host[64];
};

static void wait_for(struct k3_comm *c, const char *op, const char *what)
{
    struct comm_nccl *n = c->impl;
    double start = k3_now_s();
    for (long spin = 0;; spin++) {
        cudaError_t q = cudaStreamQuery(n->stream);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) CHECK_CUDA_RT(q);
        ncclResult_t async = ncclSuccess;
        K3_CHECK_NCCL(ncclCommGetAsyncError(n->comm, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            ncclCommAbort(n->comm);
            k3_fatal(__FILE__, __LINE__, op,
                     "rank %d of %d (NCCL), on %s: asynchronous NCCL error in %s for \"%s\": %s",
                     c->rank, c->size, n->host, op, what, ncclGetErrorString(async));
        }
        if (spin > 2000) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            if (k3_now_s() - start > c->timeout_s) {
                ncclCommAbort(n->comm);
                k3_fatal(__FILE__, __LINE__, op,
                         "rank %d of %d (NCCL), on %s, waited %d s in %s for \"%s\" without "
                         "completing: a peer rank is dead, stuck, or running a different step; "
                         "aborting the job", c->rank, c->size, n->host, c->timeout_s, op, what);
            }
        }
    }
}

static ncclDataType_t nccl_type(enum k3_dtype t)
{
    switch (t) {
    case K3_DTYPE_F32: return ncclFloat32;
    case K3_DTYPE_BF16: return ncclBfloat16;
    case K3_DTYPE_F16: return ncclFloat16;
    default: K3_FATAL("NCCL reductions take F32, BF16 or F16, not %s", k3_dtype_name(t));
    }
}

static void nccl_all_reduce(struct k3_comm *c, void *buf, size_t count, enum k3_dtype t,
                            const char *what)
{
    struct comm_nccl *n = c->impl;
    K3_CHECK_NCCL(ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, n->comm, n->stream));
    wait_for(c, "all_reduce", what);
}

static void nccl_reduce_scatter(struct k3_comm *c, const void *send, void *recv, size_t count,
                                enum k3_dtype t, const char *what)
{
    struct comm_nccl *n = c->impl;
    K3_CHECK_NCCL(ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, n->comm,
                                    n->stream));
    wait_for(c, "reduce_scatter", what);
}

static void nccl_all_gather(struct k3_comm *c, const void *send, void *recv, size_t bytes,
                            const char *what)
{
    struct comm_nccl *n = c->impl;
    K3_CHECK_NCCL(ncclAllGather(send, recv, bytes, ncclUint8, n->comm, n->stream));
    wait_for(c, "all_gather", what);
}

static void nccl_all_to_all_v(struct k3_comm *c, const void *send, const size_t *send_bytes,
                              const size_t *send_off, void *recv, const size_t *recv_bytes,
                              const size_t *recv_off, const char *what)
{
    struct comm_nccl *n = c->impl;
    K3_CHECK_NCCL(ncclGroupStart());
    for (int r = 0; r < c->size; r++) {
        if (send_bytes[r])
            K3_CHECK_NCCL(ncclSend((const char *)send + send_off[r], send_bytes[r], ncclUint8, r,
                                   n->comm, n->stream));
        if (recv_bytes[r])
            K3_CHECK_NCCL(ncclRecv((char *)recv + recv_off[r], recv_bytes[r], ncclUint8, r,
                                   n->comm, n->stream));
    }
    K3_CHECK_NCCL(ncclGroupEnd());
    wait_for(c, "all_to_all_v", what);
}

static void nccl_all_to_all(struct k3_comm *c, const void *send, void *recv, size_t bytes,
                            const char *what)
{
    size_t *v = malloc(sizeof *v * 2 * (size_t)c->size);
    K3_CHECK(v, "out of memory");
    for (int r = 0; r < c->size; r++) {
        v[r] = bytes;
        v[c->size + r] = (size_t)r * bytes;
    }
    nccl_all_to_all_v(c, send, v, v + c->size, recv, v, v + c->size, what);
    free(v);
}

static void nccl_barrier(struct k3_comm *c, const char *what)
{
    /* A one-float all-reduce on a scratch device word is NCCL's barrier. */
    struct comm_nccl *n = c->impl;
    nccl_all_reduce(c, n->barrier_word, 1, K3_DTYPE_F32, what);
}

static void nccl_free(struct k3_comm *c)
{
    struct comm_nccl *n = c->impl;
    if (!n) return;
    ncclCommDestroy(n->comm);
    cudaFree(n->barrier_word);
    free(n);
    c->impl = NULL;
}

static const struct k3_comm_ops nccl_ops = {
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .all_to_all = nccl_all_to_all,
    .all_to_all_v = nccl_all_to_all_v,
    .barrier = nccl_barrier,
    .free = nccl_free,
};

void k3_comm_init_nccl(struct k3_comm *c, MPI_Comm parent, void *stream, int timeout_s)
{
    memset(c, 0, sizeof *c);
    struct comm_nccl *n = calloc(1, sizeof *n);
    K3_CHECK(n, "out of memory");
    K3_CHECK_MPI(MPI_Comm_rank(parent, &c->rank));
    K3_CHECK_MPI(MPI_Comm_size(parent, &c->size));
    ncclUniqueId id;
    if (c->rank == 0) K3_CHECK_NCCL(ncclGetUniqueId(&id));
    K3_CHECK_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, parent));
    K3_CHECK_NCCL(ncclCommInitRank(&n->comm, c->size, id, c->rank));
    n->stream = (cudaStream_t)stream;
    CHECK_CUDA_RT(cudaMalloc((void **)&n->barrier_word, sizeof *n->barrier_word));
    CHECK_CUDA_RT(cudaMemset(n->barrier_word, 0, sizeof *n->barrier_word));
    if (gethostname(n->host, sizeof n->host - 1) != 0) strcpy(n->host, "?");
    c->ops = &nccl_ops;
    c->kind = "nccl";
    c->timeout_s = timeout_s > 0 ? timeout_s : 300;
    c->impl = n;
}
