/* comm_mpi.c - the MPI communicator (CPU ranks).
 *
 * Every collective is the non-blocking MPI variant followed by a wait loop
 * with a deadline, so a rank stuck in a collective (a peer died or never
 * arrived) aborts the job with a message instead of hanging until Slurm's
 * time limit. Polling spins briefly, then sleeps 50 us between tests, which
 * keeps an idle rank from burning a core on an oversubscribed test machine.
 * BF16 reductions use a user-defined MPI_Op that sums in fp32. */
#include "core/clock.h"
#include "mpi/comm.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "mpi/mpi_check.h"

struct comm_mpi {
    MPI_Comm comm;
    MPI_Datatype bf16_type;
    MPI_Op bf16_sum;
    int *counts, *displs, *rcounts, *rdispls; /* [size] scratch for alltoallv */
    char host[64];
};

static void wait_for(struct k3_comm *c, MPI_Request *req, const char *op, const char *what)
{
    struct comm_mpi *m = c->impl;
    double start = k3_now_s();
    for (long spin = 0;; spin++) {
        int done = 0;
        K3_CHECK_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (spin > 2000) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
            if (k3_now_s() - start > c->timeout_s)
                k3_fatal(__FILE__, __LINE__, op,
                         "rank %d of %d in an MPI communicator, on %s, waited %d s in %s for "
                         "\"%s\" without completing: a peer rank is dead, stuck, or running a "
                         "different step; aborting the job", c->rank, c->size, m->host,
                         c->timeout_s, op, what);
        }
    }
}

static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = k3_f32_to_bf16(k3_bf16_to_f32(a[i]) + k3_bf16_to_f32(b[i]));
}

static int as_int(size_t n, const char *what)
{
    K3_CHECK(n <= INT_MAX, "%s: %zu elements exceed MPI's int counts; split the message", what, n);
    return (int)n;
}

static void reduce_types(struct comm_mpi *m, enum k3_dtype t, MPI_Datatype *type, MPI_Op *op)
{
    K3_CHECK(t == K3_DTYPE_F32 || t == K3_DTYPE_BF16, "MPI reductions take F32 or BF16, not %s",
             k3_dtype_name(t));
    *type = t == K3_DTYPE_F32 ? MPI_FLOAT : m->bf16_type;
    *op = t == K3_DTYPE_F32 ? MPI_SUM : m->bf16_sum;
}

static void mpi_all_reduce(struct k3_comm *c, void *buf, size_t count, enum k3_dtype t,
                           const char *what)
{
    struct comm_mpi *m = c->impl;
    MPI_Datatype type;
    MPI_Op op;
    reduce_types(m, t, &type, &op);
    MPI_Request req;
    K3_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, as_int(count, what), type, op, m->comm, &req));
    wait_for(c, &req, "all_reduce", what);
}

static void mpi_reduce_scatter(struct k3_comm *c, const void *send, void *recv, size_t count,
                               enum k3_dtype t, const char *what)
{
    struct comm_mpi *m = c->impl;
    MPI_Datatype type;
    MPI_Op op;
    reduce_types(m, t, &type, &op);
    MPI_Request req;
    K3_CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, as_int(count, what), type, op, m->comm,
                                           &req));
    wait_for(c, &req, "reduce_scatter", what);
}

static void mpi_all_gather(struct k3_comm *c, const void *send, void *recv, size_t bytes,
                           const char *what)
{
    struct comm_mpi *m = c->impl;
    MPI_Request req;
    int n = as_int(bytes, what);
    K3_CHECK_MPI(MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, m->comm, &req));
    wait_for(c, &req, "all_gather", what);
}

static void mpi_all_to_all(struct k3_comm *c, const void *send, void *recv, size_t bytes,
                           const char *what)
{
    struct comm_mpi *m = c->impl;
    MPI_Request req;
    int n = as_int(bytes, what);
    K3_CHECK_MPI(MPI_Ialltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, m->comm, &req));
    wait_for(c, &req, "all_to_all", what);
}

static void mpi_all_to_all_v(struct k3_comm *c, const void *send, const size_t *send_bytes,
                             const size_t *send_off, void *recv, const size_t *recv_bytes,
                             const size_t *recv_off, const char *what)
{
    struct comm_mpi *m = c->impl;
    for (int r = 0; r < c->size; r++) {
        m->counts[r] = as_int(send_bytes[r], what);
        m->displs[r] = as_int(send_off[r], what);
        m->rcounts[r] = as_int(recv_bytes[r], what);
        m->rdispls[r] = as_int(recv_off[r], what);
    }
    MPI_Request req;
    K3_CHECK_MPI(MPI_Ialltoallv(send, m->counts, m->displs, MPI_BYTE, recv, m->rcounts,
                                m->rdispls, MPI_BYTE, m->comm, &req));
    wait_for(c, &req, "all_to_all_v", what);
}

static void mpi_barrier(struct k3_comm *c, const char *what)
{
    struct comm_mpi *m = c->impl;
    MPI_Request req;
    K3_CHECK_MPI(MPI_Ibarrier(m->comm, &req));
    wait_for(c, &req, "barrier", what);
}

static void mpi_free(struct k3_comm *c)
{
    struct comm_mpi *m = c->impl;
    if (!m) return;
    MPI_Op_free(&m->bf16_sum);
    MPI_Type_free(&m->bf16_type);
    MPI_Comm_free(&m->comm);
    free(m->counts);
    free(m);
    c->impl = NULL;
}

static const struct k3_comm_ops mpi_ops = {
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .all_to_all = mpi_all_to_all,
    .all_to_all_v = mpi_all_to_all_v,
    .barrier = mpi_barrier,
    .free = mpi_free,
};

void k3_comm_init_mpi(struct k3_comm *c, MPI_Comm parent, int timeout_s)
{
    memset(c, 0, sizeof *c);
    struct comm_mpi *m = calloc(1, sizeof *m);
    K3_CHECK(m, "out of memory");
    K3_CHECK_MPI(MPI_Comm_dup(parent, &m->comm));
    K3_CHECK_MPI(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN));
    K3_CHECK_MPI(MPI_Comm_rank(m->comm, &c->rank));
    K3_CHECK_MPI(MPI_Comm_size(m->comm, &c->size));
    K3_CHECK_MPI(MPI_Type_contiguous(2, MPI_BYTE, &m->bf16_type));
    K3_CHECK_MPI(MPI_Type_commit(&m->bf16_type));
    K3_CHECK_MPI(MPI_Op_create(bf16_sum_fn, 1, &m->bf16_sum));
    m->counts = calloc(4 * (size_t)c->size, sizeof(int));
    K3_CHECK(m->counts, "out of memory");
    m->displs = m->counts + c->size;
    m->rcounts = m->displs + c->size;
    m->rdispls = m->rcounts + c->size;
    if (gethostname(m->host, sizeof m->host - 1) != 0) strcpy(m->host, "?");
    c->ops = &mpi_ops;
    c->kind = "mpi";
    c->timeout_s = timeout_s > 0 ? timeout_s : 300;
    c->impl = m;
}
