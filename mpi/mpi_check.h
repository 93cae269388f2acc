/* mpi_check.h - K3_CHECK_MPI: a failed MPI call is fatal for the whole job. */
#ifndef K3_MPI_CHECK_H
#define K3_MPI_CHECK_H

#include <mpi.h>

#include "core/log.h"

void k3_mpi_fail(int rc, const char *stmt, const char *file, int line) __attribute__((noreturn));

#define K3_CHECK_MPI(call)                                                     \
    do {                                                                       \
        int k3_mpi_rc_ = (call);                                               \
        if (k3_mpi_rc_ != MPI_SUCCESS) k3_mpi_fail(k3_mpi_rc_, #call, __FILE__, __LINE__); \
    } while (0)

#endif
