/* bootstrap.c - see bootstrap.h. */
#include "mpi/bootstrap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "mpi/mpi_check.h"

void k3_mpi_fail(int rc, const char *stmt, const char *file, int line)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    k3_fatal(file, line, stmt, "MPI error %d: %s", rc, msg);
}

static void abort_world(void *ctx)
{
    (void)ctx;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
}

void k3_job_init(struct k3_job *job, int *argc, char ***argv)
{
    memset(job, 0, sizeof *job);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            fprintf(stderr, "k3: MPI_Init_thread failed; is Open MPI installed and is this "
                            "run under mpirun or srun?\n");
            abort();
        }
        job->owns_mpi = 1;
    }
    k3_log_add_abort_hook(abort_world, NULL);
    /* Errors in MPI calls come back as return codes and go through K3_CHECK_MPI,
     * which prints where they happened before aborting. */
    K3_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    K3_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &job->world_comm));
    K3_CHECK_MPI(MPI_Comm_rank(job->world_comm, &job->rank));
    K3_CHECK_MPI(MPI_Comm_size(job->world_comm, &job->world));
    k3_log_set_rank(job->rank, job->world);

    K3_CHECK_MPI(MPI_Comm_split_type(job->world_comm, MPI_COMM_TYPE_SHARED, job->rank,
                                     MPI_INFO_NULL, &job->node_comm));
    K3_CHECK_MPI(MPI_Comm_rank(job->node_comm, &job->local_rank));
    K3_CHECK_MPI(MPI_Comm_size(job->node_comm, &job->local_size));

    /* Node ids: the leader (local rank 0) of each node counts the leaders with a
     * lower world rank; everyone on the node gets the leader's answer. */
    int is_leader = job->local_rank == 0;
    int node = 0;
    K3_CHECK_MPI(MPI_Exscan(&is_leader, &node, 1, MPI_INT, MPI_SUM, job->world_comm));
    if (job->rank == 0) node = 0; /* MPI_Exscan leaves rank 0's result undefined */
    K3_CHECK_MPI(MPI_Bcast(&node, 1, MPI_INT, 0, job->node_comm));
    job->node = node;
    K3_CHECK_MPI(MPI_Allreduce(&is_leader, &job->n_nodes, 1, MPI_INT, MPI_SUM,
                               job->world_comm));

    if (gethostname(job->host, sizeof job->host - 1) != 0) strcpy(job->host, "?");
}

void k3_job_free(struct k3_job *job)
{
    if (job->node_comm != MPI_COMM_NULL && job->node_comm) MPI_Comm_free(&job->node_comm);
    if (job->world_comm != MPI_COMM_NULL && job->world_comm) MPI_Comm_free(&job->world_comm);
    if (job->owns_mpi) MPI_Finalize();
    memset(job, 0, sizeof *job);
}

void k3_job_exit(struct k3_job *job, int code)
{
    fflush(stdout);
    fflush(stderr);
    k3_job_free(job);
    exit(code);
}

char *k3_job_bcast_file(struct k3_job *job, const char *path, char *errbuf, int errbuf_bytes)
{
    long long len = -1;
    char *buf = NULL;
    if (job->rank == 0) {
        FILE *f = fopen(path, "rb");
        struct stat st;
        if (!f) {
            snprintf(errbuf, (size_t)errbuf_bytes, "cannot read %s: %s", path, strerror(errno));
        } else if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
            snprintf(errbuf, (size_t)errbuf_bytes, "cannot read %s: not a regular file", path);
        } else {
            len = (long long)st.st_size;
            buf = malloc((size_t)len + 1);
            K3_CHECK(buf, "out of memory reading %s (%lld bytes)", path, len);
            if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
                snprintf(errbuf, (size_t)errbuf_bytes, "cannot read %s: %s", path,
                         ferror(f) ? strerror(errno) : "file shrank while reading");
                free(buf);
                buf = NULL;
                len = -1;
            }
        }
        if (f) fclose(f);
    }
    K3_CHECK_MPI(MPI_Bcast(&len, 1, MPI_LONG_LONG, 0, job->world_comm));
    if (len < 0) {
        K3_CHECK_MPI(MPI_Bcast(errbuf, errbuf_bytes, MPI_CHAR, 0, job->world_comm));
        return NULL;
    }
    if (job->rank != 0) {
        buf = malloc((size_t)len + 1);
        K3_CHECK(buf, "out of memory receiving %s", path);
    }
    for (long long off = 0; off < len;) {
        int n = len - off > (1 << 30) ? (1 << 30) : (int)(len - off);
        K3_CHECK_MPI(MPI_Bcast(buf + off, n, MPI_CHAR, 0, job->world_comm));
        off += n;
    }
    buf[len] = 0;
    return buf;
}

void k3_job_check_same(struct k3_job *job, const void *bytes, size_t n, const char *what)
{
    /* FNV-1a, 64 bits, plus the length: a digest, not a security measure. */
    unsigned long long h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)bytes)[i]) * 1099511628211ull;
    struct { unsigned long long hash, n; char host[sizeof job->host]; } mine, *all = NULL;
    memset(&mine, 0, sizeof mine);
    mine.hash = h;
    mine.n = n;
    memcpy(mine.host, job->host, sizeof mine.host);
    if (job->rank == 0) {
        all = malloc(sizeof *all * (size_t)job->world);
        K3_CHECK(all, "out of memory");
    }
    K3_CHECK_MPI(MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0,
                            job->world_comm));
    if (job->rank == 0) {
        char list[1024] = "";
        int n_bad = 0;
        for (int r = 1; r < job->world; r++) {
            if (all[r].hash == all[0].hash && all[r].n == all[0].n) continue;
            if (n_bad++ < 8) {
                size_t len = strlen(list);
                snprintf(list + len, sizeof list - len, "%srank %d on %s", len ? ", " : "", r,
                         all[r].host);
            }
        }
        free(all);
        if (n_bad)
            K3_FATAL("%d rank%s disagree%s with rank 0 about %s: %s%s; every rank must be "
                     "started with the same files and options", n_bad, n_bad == 1 ? "" : "s",
                     n_bad == 1 ? "s" : "", what, list, n_bad > 8 ? ", ..." : "");
    }
    /* Nobody goes on until rank 0 has judged (and maybe aborted). */
    K3_CHECK_MPI(MPI_Barrier(job->world_comm));
}
