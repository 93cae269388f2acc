/* model_job.h - what every subcommand that runs the model sets up, on every
 * rank: the parallel layout (tp x adp = world), the communicators, the
 * checkpoint cut to this rank's shard, the backend. Shared so that logits,
 * generate, dump and serve start the same way and fail the same way. */
#ifndef K3_CLI_MODEL_JOB_H
#define K3_CLI_MODEL_JOB_H

#include "cli/cli.h"
#include "kernels/ops.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/parallel.h"
#include "model/weights.h"
#include "mpi/comm.h"
#include "mpi/groups.h"

struct k3_model_job {
    struct k3_job *job;
    struct k3_groups groups;
    struct k3_comm tp_comm, ep_comm;
    struct k3_model_par par;
    int sharded;                  /* world > 1: pass &par to the forward */
    struct k3_model_config cfg;
    struct k3_checkpoint *ck;
    struct k3_weights w;
    struct k3_backend be;
};

/* Loads cli->deploy first (k3_cli_load_deploy). Returns 0, or an exit code
 * that every rank returns alike (bad layout, bad flags). A rank that cannot
 * load its shard, or that disagrees with rank 0 about the model or the
 * deployment, aborts the whole job naming itself (K3_FATAL). */
int k3_model_job_init(struct k3_model_job *mj, struct k3_cli *cli, const char *cmd);
void k3_model_job_free(struct k3_model_job *mj);

/* The forward options of this job: par set when sharded. */
const struct k3_model_par *k3_model_job_par(const struct k3_model_job *mj);

#endif
