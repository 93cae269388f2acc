/* nccl_check.h - K3_CHECK_NCCL: a failed NCCL call is fatal for the whole job.
 * Asynchronous NCCL errors (a peer died) are polled by the communicator's
 * watchdog with ncclCommGetAsyncError and end up in the same place. */
#ifndef K3_MPI_NCCL_CHECK_H
#define K3_MPI_NCCL_CHECK_H

#include <nccl.h>

#include "core/log.h"

void k3_nccl_fail(ncclResult_t rc, const char *stmt, const char *file, int line)
    __attribute__((noreturn));

#define K3_CHECK_NCCL(call)                                                    \
    do {                                                                       \
        ncclResult_t k3_nccl_rc_ = (call);                                     \
        if (k3_nccl_rc_ != ncclSuccess && k3_nccl_rc_ != ncclInProgress)       \
            k3_nccl_fail(k3_nccl_rc_, #call, __FILE__, __LINE__);              \
    } while (0)

#endif
