/* groups.h - the parallel layout of a job: `adp` attention groups of `tp`
 * ranks each (world = tp * adp), and the expert-parallel group of all ranks.
 *
 * Ranks are ordered by (node, node-local rank) and cut into consecutive runs
 * of `tp`, so a TP group stays inside one node whenever tp divides the ranks
 * of a node (the chatty all-reduces of attention then never cross the
 * network); the expert-parallel all-to-all spans everything anyway. */
#ifndef K3_MPI_GROUPS_H
#define K3_MPI_GROUPS_H

#include <mpi.h>

#include "core/err.h"
#include "mpi/bootstrap.h"

struct k3_groups {
    int tp, adp, world;
    int group;            /* this rank's attention group, 0..adp-1 */
    int tp_rank;          /* position inside the group, 0..tp-1 */
    int ep_rank;          /* position in the expert-parallel group (== world rank) */
    int tp_in_one_node;   /* every TP group sits inside one node */
    MPI_Comm tp_comm;     /* this rank's attention group, ordered by tp_rank */
    MPI_Comm ep_comm;     /* all ranks, ordered by ep_rank */
    int *group_of_rank;   /* [world] attention group of each world rank */
    int *tp_rank_of_rank; /* [world] */
    int *world_of_group_rank; /* [adp * tp]: world rank of (group, tp_rank) */
};

/* Collective over job->world_comm. Fails (same verdict on every rank) if
 * tp * adp != world. */
int k3_groups_init(struct k3_groups *g, const struct k3_job *job, int tp, int adp,
                   struct k3_err *err);
void k3_groups_free(struct k3_groups *g);

/* Rank 0 of group `group`'s TP communicator, as a world rank. */
static inline int k3_groups_leader(const struct k3_groups *g, int group)
{
    return g->world_of_group_rank[group * g->tp];
}

#endif
