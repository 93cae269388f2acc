/* parallel.h - how one rank takes part in a sharded forward pass.
 *
 * Attention (KDA, MLA), the dense MLP, the shared experts and lm_head are
 * tensor-parallel over the `tp` ranks of an attention group: heads, hidden
 * units and vocabulary rows are split in contiguous ranges, and the partial
 * sums of the row-parallel output projections are all-reduced over `tp_comm`.
 * Routed experts are expert-parallel over all `ep` ranks (rank r owns experts
 * [r·per, (r+1)·per), per = ceil(E / ep)), reached through MoE dispatch and
 * combine over `ep_comm`. Inside a group every rank holds the same tokens, so
 * for the MoE each TP rank routes and dispatches only its share of them
 * (tokens [n·r/tp, n·(r+1)/tp)), and the group's all-reduce puts the rows
 * back together with the shared experts' partial sums.
 *
 * A forward call on one rank implies MoE collectives on all ranks: every rank
 * must make the same sequence of calls (a group with nothing to do calls
 * k3_forward_idle), and k3_forward_run agrees on its slice count with the
 * other ranks first. */
#ifndef K3_MODEL_PARALLEL_H
#define K3_MODEL_PARALLEL_H

#include "mpi/comm.h"

struct k3_shard {
    int tp, tp_rank;       /* attention group size and position */
    int ep, ep_rank;       /* expert-parallel size and position (all ranks) */
};

struct k3_model_par {
    struct k3_shard shard;
    struct k3_comm *tp_comm;   /* the attention group (size tp) */
    struct k3_comm *ep_comm;   /* every rank (size ep) */
};

/* [begin, end) of n items split evenly over parts (the first n % parts get one more). */
static inline void k3_split(long long n, int parts, int part, long long *begin, long long *end)
{
    long long per = n / parts, extra = n % parts;
    *begin = part * per + (part < extra ? part : extra);
    *end = *begin + per + (part < extra ? 1 : 0);
}

#endif
