/* comm_staged.h - the MPI communicator for device buffers, staged through
 * pinned host memory: several ranks sharing one GPU (NCCL refuses two ranks
 * on one device), or GPU ranks without NCCL. Built with K3_CUDA. */
#ifndef K3_MPI_COMM_STAGED_H
#define K3_MPI_COMM_STAGED_H

#include <mpi.h>
#include <stddef.h>

#include "mpi/comm.h"

#ifdef K3_HAVE_NCCL
/* A `struct k3_comm` whose buffers are device (or host) pointers: each call
 * copies its input to pinned host staging on `stream` (a cudaStream_t, which
 * the caller keeps), runs the MPI collective, and copies the result back.
 * max_bytes bounds one collective's send and receive sizes (two pinned
 * buffers of that size are allocated here, nothing later); a larger call is
 * fatal, naming the collective and the size to raise. kind = "mpi-staged". */
void k3_comm_init_staged(struct k3_comm *c, MPI_Comm parent, void *stream, size_t max_bytes,
                         int timeout_s);
#endif

#endif
