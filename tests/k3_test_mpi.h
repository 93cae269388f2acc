/* k3_test_mpi.h - the summary line of a test that runs on every rank: the
 * CHECK counts of all ranks summed on rank 0, which prints "N passed, N
 * failed"; every rank returns the same exit code. */
#ifndef K3_TESTS_K3_TEST_MPI_H
#define K3_TESTS_K3_TEST_MPI_H

#include <mpi.h>

#include "k3_test.h"
#include "mpi/mpi_check.h"

static inline int k3_test_summary_all(MPI_Comm comm)
{
    int rank, mine[2] = {k3_test_passed, k3_test_failed}, sum[2], rc = 0;
    K3_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    K3_CHECK_MPI(MPI_Reduce(mine, sum, 2, MPI_INT, MPI_SUM, 0, comm));
    if (rank == 0) {
        k3_test_passed = sum[0];
        k3_test_failed = sum[1];
        rc = k3_test_summary();
    }
    K3_CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, comm));
    return rc;
}

#endif
