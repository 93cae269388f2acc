/* bootstrap.h - the MPI job: world, node topology, device choice, and the
 * abort path.
 *
 * Node-local ranks come from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), node
 * ids from the ranks' node leaders, and the GPU a rank uses is its local rank
 * (CUDA_VISIBLE_DEVICES narrows what that index means). k3_job_init also
 * registers the fatal-path hook that calls MPI_Abort on MPI_COMM_WORLD, so a
 * K3_FATAL on any rank ends every rank and mpirun/Slurm see a failed job. */
#ifndef K3_MPI_BOOTSTRAP_H
#define K3_MPI_BOOTSTRAP_H

#include <mpi.h>
#include <stddef.h>

struct k3_job {
    int rank, world;        /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* on this node */
    int node, n_nodes;      /* node id in [0, n_nodes), numbered by lowest world rank */
    MPI_Comm world_comm;    /* a duplicate of MPI_COMM_WORLD owned by the job */
    MPI_Comm node_comm;     /* ranks sharing this node's memory */
    char host[256];
    int owns_mpi;           /* k3_job_init called MPI_Init (and so finalizes it) */
};

/* Initialises MPI (thread level FUNNELED) unless already initialised. */
void k3_job_init(struct k3_job *job, int *argc, char ***argv);
void k3_job_free(struct k3_job *job);

/* Every rank has decided the same thing (a bad config file, --help): finalize
 * and exit with the same code everywhere. Only for collective decisions;
 * anything one rank notices alone goes through K3_FATAL. */
_Noreturn void k3_job_exit(struct k3_job *job, int code);

/* Rank 0 reads a file and every rank receives its bytes (NUL-terminated,
 * caller frees), so ranks on other nodes need not see rank 0's filesystem.
 * Returns NULL on every rank if rank 0 could not read it, with the reason in
 * errbuf on every rank. */
char *k3_job_bcast_file(struct k3_job *job, const char *path, char *errbuf, int errbuf_bytes);

/* Collective: every rank passes the bytes of something that must be equal
 * everywhere (the model config, the deployment config, the checkpoint's
 * identity). If any rank differs from rank 0, rank 0 aborts the job naming
 * every rank that differs, with its host, and `what`. */
void k3_job_check_same(struct k3_job *job, const void *bytes, size_t n, const char *what);

#endif
