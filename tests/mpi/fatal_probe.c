/* fatal_probe.c - a job whose rank 1 fails in a chosen way while the other
 * ranks wait in a collective that would hang forever without the fatal path.
 * The test script checks that the whole job ends, non-zero, naming rank 1.
 *   fatal_probe fatal | mpi | h5 | mismatch | ok
 * (mismatch: the last rank passes a different "config" to k3_job_check_same) */
#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "io/h5_check.h"
#include "mpi/bootstrap.h"
#include "mpi/mpi_check.h"

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    if (!strcmp(mode, "mismatch")) {
        const char *cfg = job.rank == job.world - 1 ? "tp = 2;" : "tp = 1;";
        k3_job_check_same(&job, cfg, strlen(cfg), "the deployment configuration");
    }
    if (job.rank == 1 || job.world == 1) {
        if (!strcmp(mode, "fatal")) K3_FATAL("injected failure in %s mode", mode);
        if (!strcmp(mode, "mpi")) {
            int x = 0; /* a rank that does not exist */
            K3_CHECK_MPI(MPI_Send(&x, 1, MPI_INT, job.world + 5, 0, job.world_comm));
        }
        if (!strcmp(mode, "h5")) {
            H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
            K3_CHECK_H5(H5Fopen("/nonexistent/k3-probe.h5", H5F_ACC_RDONLY, H5P_DEFAULT));
        }
    }
    /* Everyone else waits here; only MPI_Abort from the failing rank ends it. */
    K3_CHECK_MPI(MPI_Barrier(job.world_comm));
    if (job.rank == 0) printf("probe finished cleanly\n");
    k3_job_free(&job);
    return 0;
}
