/* nccl_check.c - see nccl_check.h. */
#include "mpi/nccl_check.h"

void k3_nccl_fail(ncclResult_t rc, const char *stmt, const char *file, int line)
{
    k3_fatal(file, line, stmt, "NCCL error %d: %s (last NCCL message: %s)", (int)rc,
             ncclGetErrorString(rc), ncclGetLastError(NULL));
}
