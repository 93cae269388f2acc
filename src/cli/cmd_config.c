/* cmd_config.c - `k3 config`: the effective deployment configuration.
 *
 * Prints the configuration (defaults, then the --config file, then flags and
 * --set) to stdout in libconfig syntax, so the output is itself a valid
 * config file, and logs the job's topology from every rank. Under mpirun it
 * checks the layout against the world size, as every job command will. */
#include <stdio.h>

#include "cli/cli.h"
#include "core/log.h"
#include "mpi/bootstrap.h"
#include "mpi/mpi_check.h"

int k3_cmd_config(struct k3_cli *cli)
{
    struct k3_job *job = cli->job;
    if (k3_arg_flag(&cli->args, "schema")) {
        if (job->rank == 0) k3_deploy_schema_markdown(stdout);
        return K3_EXIT_OK;
    }
    int rc = k3_cli_load_deploy(cli, 0); /* printed below instead */
    if (rc) return rc;
    struct k3_err err;
    const struct k3_deploy *d = &cli->deploy;
    if (job->world > 1 && k3_deploy_check_world(d, job->world, &err)) {
        if (job->rank == 0) fprintf(stderr, "k3 config: %s\n", err.msg);
        return K3_EXIT_USAGE;
    }
    /* Every rank reports where it runs; rank 0 gathers so the lines come in order. */
    int mine[4] = {job->rank, job->node, job->local_rank, job->local_size};
    int all[4 * 1024];
    int n = job->world <= 1024 ? job->world : 1024;
    if (job->world <= 1024) {
        K3_CHECK_MPI(MPI_Gather(mine, 4, MPI_INT, all, 4, MPI_INT, 0, job->world_comm));
    }
    if (job->rank == 0) {
        K3_INFO("job: %d rank%s on %d node%s; tp %d x adp %d", job->world,
                job->world == 1 ? "" : "s", job->n_nodes, job->n_nodes == 1 ? "" : "s",
                d->parallel.tp, d->parallel.adp);
        for (int i = 0; i < n; i++)
            K3_INFO("rank %d: node %d, local rank %d of %d (device index %d)", all[4 * i],
                    all[4 * i + 1], all[4 * i + 2], all[4 * i + 3], all[4 * i + 2]);
        k3_deploy_print(d, stdout);
        fflush(stdout);
    }
    return K3_EXIT_OK;
}
