/* dist_setup.h - what the sharded-model tests share: the tp x adp groups,
 * MPI communicators, and the checkpoint loaded and cut to this rank's shard.
 * Any failure is fatal (the job ends naming the rank). */
#ifndef K3_TESTS_DIST_SETUP_H
#define K3_TESTS_DIST_SETUP_H

#include "core/log.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/weights.h"
#include "mpi/bootstrap.h"
#include "mpi/comm.h"
#include "mpi/groups.h"

struct dist_setup {
    struct k3_groups g;
    struct k3_comm tp_comm, ep_comm;
    struct k3_model_par par;
    struct k3_model_config cfg;
    struct k3_checkpoint *ck;
    struct k3_weights w;       /* this rank's shard */
};

static inline void dist_setup_init(struct dist_setup *d, struct k3_job *job, const char *dir, int tp,
                                   int adp)
{
    struct k3_err err;
    if (k3_groups_init(&d->g, job, tp, adp, &err)) K3_FATAL("%s", err.msg);
    k3_comm_init_mpi(&d->tp_comm, d->g.tp_comm, 120);
    k3_comm_init_mpi(&d->ep_comm, d->g.ep_comm, 120);
    d->par = (struct k3_model_par){.shard = {.tp = tp, .tp_rank = d->g.tp_rank, .ep = job->world,
                                             .ep_rank = job->rank},
                                   .tp_comm = &d->tp_comm, .ep_comm = &d->ep_comm};
    if (k3_model_config_load(dir, &d->cfg, &err) || k3_checkpoint_open(dir, &d->ck, &err) ||
        k3_weights_load(&d->cfg, d->ck, &d->w, &err) || k3_weights_shard(&d->w, &d->par.shard, &err))
        K3_FATAL("%s", err.msg);
}

static inline void dist_setup_free(struct dist_setup *d)
{
    k3_weights_free(&d->w);
    k3_checkpoint_free(d->ck);
    k3_comm_free(&d->tp_comm);
    k3_comm_free(&d->ep_comm);
    k3_groups_free(&d->g);
}

#endif
