/* groups.c - see groups.h. */
#include "mpi/groups.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "mpi/mpi_check.h"

struct place { int node, local_rank, world_rank; };

static int place_cmp(const void *a, const void *b)
{
    const struct place *x = a, *y = b;
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    if (x->local_rank != y->local_rank) return x->local_rank < y->local_rank ? -1 : 1;
    return x->world_rank < y->world_rank ? -1 : (x->world_rank > y->world_rank);
}

int k3_groups_init(struct k3_groups *g, const struct k3_job *job, int tp, int adp,
                   struct k3_err *err)
{
    memset(g, 0, sizeof *g);
    g->tp_comm = g->ep_comm = MPI_COMM_NULL;
    if (tp < 1 || adp < 1 || (long long)tp * adp != job->world)
        return k3_err_set(err, "tp (%d) * adp (%d) must equal the %d ranks of the job", tp, adp,
                          job->world);
    g->tp = tp;
    g->adp = adp;
    g->world = job->world;
    struct place mine = {job->node, job->local_rank, job->rank};
    struct place *all = malloc(sizeof *all * (size_t)job->world);
    g->group_of_rank = malloc(sizeof(int) * (size_t)job->world);
    g->tp_rank_of_rank = malloc(sizeof(int) * (size_t)job->world);
    g->world_of_group_rank = malloc(sizeof(int) * (size_t)job->world);
    K3_CHECK(all && g->group_of_rank && g->tp_rank_of_rank && g->world_of_group_rank,
             "out of memory for %d ranks", job->world);
    K3_CHECK_MPI(MPI_Allgather(&mine, 3, MPI_INT, all, 3, MPI_INT, job->world_comm));
    qsort(all, (size_t)job->world, sizeof *all, place_cmp);
    g->tp_in_one_node = 1;
    for (int p = 0; p < job->world; p++) {
        int r = all[p].world_rank;
        g->group_of_rank[r] = p / tp;
        g->tp_rank_of_rank[r] = p % tp;
        g->world_of_group_rank[p] = r;
        if (p % tp && all[p].node != all[p - 1].node) g->tp_in_one_node = 0;
    }
    free(all);
    g->group = g->group_of_rank[job->rank];
    g->tp_rank = g->tp_rank_of_rank[job->rank];
    g->ep_rank = job->rank;
    K3_CHECK_MPI(MPI_Comm_split(job->world_comm, g->group, g->tp_rank, &g->tp_comm));
    K3_CHECK_MPI(MPI_Comm_dup(job->world_comm, &g->ep_comm));
    if (!g->tp_in_one_node && job->rank == 0)
        K3_WARN("tp %d does not fit the ranks of one node: tensor-parallel all-reduces cross "
                "nodes", tp);
    return 0;
}

void k3_groups_free(struct k3_groups *g)
{
    if (g->tp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->tp_comm);
    if (g->ep_comm != MPI_COMM_NULL) MPI_Comm_free(&g->ep_comm);
    free(g->group_of_rank);
    free(g->tp_rank_of_rank);
    free(g->world_of_group_rank);
    memset(g, 0, sizeof *g);
    g->tp_comm = g->ep_comm = MPI_COMM_NULL;
}
