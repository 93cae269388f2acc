/* comm.h - the communicator interface: the collectives the forward pass
 * needs, behind one table of function pointers with two implementations.
 *
 *   MPI  (comm_mpi.c):  CPU ranks; host buffers.
 *   NCCL (comm_nccl.c): one rank per GPU; device buffers, one CUDA stream;
 *                       the unique id is broadcast over MPI.
 *
 * Every call names what it is doing (`what`, e.g. "L12.moe.dispatch"), so
 * that a collective that does not complete within the timeout aborts the job
 * with a message saying which rank, on which host, waited for what. Failures
 * are fatal: a half-finished collective leaves no state worth saving.
 * Counts are in elements for reductions and in bytes for data movement. */
#ifndef K3_MPI_COMM_H
#define K3_MPI_COMM_H

#include <mpi.h>
#include <stddef.h>

#include "core/dtype.h"

struct k3_comm;

struct k3_comm_ops {
    /* In place: buf[count] = sum over ranks. F32 or BF16 (summed in fp32). */
    void (*all_reduce)(struct k3_comm *c, void *buf, size_t count, enum k3_dtype t,
                       const char *what);
    /* send[size * count] -> recv[count]: this rank's slice of the sum. */
    void (*reduce_scatter)(struct k3_comm *c, const void *send, void *recv, size_t count,
                           enum k3_dtype t, const char *what);
    /* send[bytes] from every rank -> recv[size * bytes] in rank order. */
    void (*all_gather)(struct k3_comm *c, const void *send, void *recv, size_t bytes,
                       const char *what);
    /* send[bytes] to each rank -> recv[size * bytes]: block r came from rank r. */
    void (*all_to_all)(struct k3_comm *c, const void *send, void *recv, size_t bytes,
                       const char *what);
    /* Variable blocks: send_off[r]/send_bytes[r] go to rank r, and the block
     * from rank r lands at recv_off[r]. Offsets and sizes in bytes. */
    void (*all_to_all_v)(struct k3_comm *c, const void *send, const size_t *send_bytes,
                         const size_t *send_off, void *recv, const size_t *recv_bytes,
                         const size_t *recv_off, const char *what);
    void (*barrier)(struct k3_comm *c, const char *what);
    void (*free)(struct k3_comm *c);
};

struct k3_comm {
    const struct k3_comm_ops *ops;
    const char *kind;     /* "mpi" or "nccl" */
    int rank, size;
    int timeout_s;        /* a collective that takes longer aborts the job */
    void *impl;
};

/* MPI implementation over a duplicate of `parent` (the caller keeps parent). */
void k3_comm_init_mpi(struct k3_comm *c, MPI_Comm parent, int timeout_s);

#ifdef K3_HAVE_NCCL
/* NCCL implementation: collective over `parent` (rank 0 makes the unique id
 * and broadcasts it). `stream` is a cudaStream_t; the caller keeps it. Every
 * call waits for completion on the stream, polling for the timeout and for
 * asynchronous NCCL errors (a dead peer). */
void k3_comm_init_nccl(struct k3_comm *c, MPI_Comm parent, void *stream, int timeout_s);
#endif

static inline void k3_comm_free(struct k3_comm *c)
{
    if (c->ops) c->ops->free(c);
    c->ops = NULL;
}

#endif
