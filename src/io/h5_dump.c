/* h5_dump.c - the hidden-state dump writer (h5_dump.h).
 *
 * Crash safety. HDF5 1.10 files are not crash-safe: a process killed while
 * the library updates metadata (chunk index, object headers, free space) can
 * leave a file nobody can open. So every piece of metadata is written once,
 * at creation: the input's sample lengths are known before the first forward
 * pass, so the datasets are created at their final size [N, D], chunked,
 * with early allocation (every chunk has its address from the start) and no
 * fill values; tokens, loss mask and offsets are written then too, the file
 * is flushed and only then does the journal say "created". After that the
 * run writes raw chunk bytes only, which cannot damage the file. The journal
 * (dump_journal.h) records after every flush, fsync'd, how many samples are
 * entirely on disk; a re-run reopens the file and recomputes the samples
 * after that point, rewriting their rows with the same values. Rejected:
 * growing datasets with H5Dset_extent (metadata changes on every flush) and
 * SWMR (needs the 1.10 latest format, whose superblock marks a killed file
 * as still open until h5clear runs).
 *
 * Layout of a flush (who writes what). The token axis is cut into chunks of
 * C rows; chunk k is rows [kC, kC+C). A flush writes the rows [W, E): W is
 * what is already written, E is the end of the completed samples rounded
 * down to a chunk boundary (or N once every sample is done), so a partial
 * chunk at the end waits for the next flush (it is carried over, not
 * written twice). Each chunk in [W, E) gets exactly one owner rank, which
 * writes all of that chunk's rows in this flush: no chunk is ever written by
 * two ranks, which is what parallel HDF5 asks for (serving.md §9.1), and
 * after a resume the chunk holding W is completed by one owner too.
 *   shared file (MPI-IO): the owner is the rank that holds most of the
 *     chunk's rows (ties: lowest rank), so rows rarely move;
 *   per-rank files: chunk k belongs to rank k mod W_ranks and is stored in
 *     that rank's file at local rows [(k div W_ranks)·C, ...), so the main
 *     file's virtual datasets need one strided mapping per rank (plus one for
 *     a final partial chunk), whatever N is.
 * Rows move from the rank that holds them (an attention group's leader) to
 * the chunk's owner in one MPI_Alltoallv per dataset; every rank walks the
 * same list of segments (sample ∩ chunk, in row order), so senders pack and
 * owners unpack without sending any row index.
 *
 * How an owner writes (opts.hdf5_io). The reference path hands its rows to
 * H5Dwrite (collective in the shared file). The default path writes the
 * chunk bytes itself with pwrite at the chunk's file address, which HDF5
 * fixed at creation (H5Dget_chunk_info_by_coord): unfiltered chunk storage is
 * the rows verbatim, so the file is the same byte for byte (tests compare the
 * two). A whole chunk whose address and size are 4 KiB multiples goes through
 * an O_DIRECT descriptor: on the machines measured, page-cache writeback ran
 * at a sixth of the disk's direct bandwidth (bench_h5_dump prints both), and a
 * dump is written once and not read back soon. Partial chunks (the last one,
 * the first one after a resume) and file systems without O_DIRECT (tmpfs) use
 * a plain descriptor. HDF5 never sees these writes, and needs not: they touch
 * no metadata. */
#include "io/h5_dump.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "core/dtype.h"
#include "core/log.h"
#include "io/dump_journal.h"
#include "io/h5_check.h"
#include "mpi/mpi_check.h"

#define DUMP_FORMAT "k3-hidden-states 1"

struct held {                   /* one sample whose rows this rank holds */
    int64_t sample;
    int done, announced;
    int64_t rows_put[K3_H5_DUMP_MAX_DATASETS];
    unsigned char *data;        /* [n_ds][len][row_bytes] */
};

struct segment {                /* rows [a, b) of one sample inside one chunk */
    int64_t a, b, sample;
    int holder, owner;
};

struct k3_h5_dump {
    struct k3_h5_dump_opts opts;
    MPI_Comm comm;
    int rank, world;
    char *path, *journal, *rank_path;
    int64_t S, N, C, D;
    int64_t *off;               /* [S+1] */
    size_t elem_bytes, row_bytes;
    int n_ds;
    hid_t file;                 /* the shared file, or this rank's file */
    hid_t ds[K3_H5_DUMP_MAX_DATASETS];
    hid_t dxpl;
    int fd_direct, fd_plain;    /* raw chunk writes (opts.hdf5_io == 0); -1 = none */
    unsigned char *bounce;      /* one chunk, 4 KiB aligned, for O_DIRECT */
    int64_t n_direct_chunks, n_plain_writes;
    /* Buffers kept across flushes: fresh multi-MiB allocations are mmapped, and
     * faulting their pages in again every flush cost as much as the disk. */
    struct buf { unsigned char *p; size_t cap; } own, sbuf, rbuf;
    struct buf pool[8];         /* sample buffers of written samples, for reuse */
    int64_t n_local_rows;       /* per-rank files: rows of this rank's datasets */
    int64_t W;                  /* rows [0, W) are written */
    int64_t S_committed;        /* samples [0, S_committed) are entirely written */
    int *holder;                /* [S]: rank holding each completed sample, -1 = not yet */
    struct held *held;
    int n_held, cap_held;
    uint64_t identity;
    int finished;
};

/* ----------------------------------------------------------------- helpers */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* b->p with room for n bytes, 4 KiB aligned (O_DIRECT); old contents dropped. */
static unsigned char *buf_need(struct buf *b, size_t n)
{
    if (n <= b->cap && b->p) return b->p;
    free(b->p);
    b->cap = n + n / 4 + 4096;
    if (posix_memalign((void **)&b->p, 4096, b->cap)) b->p = NULL;
    K3_CHECK(b->p, "out of memory (%zu bytes)", b->cap);
    return b->p;
}

/* A sample buffer of n bytes from the pool, or a new one. */
static unsigned char *pool_take(struct k3_h5_dump *w, size_t n)
{
    for (int i = 0; i < 8; i++)
        if (w->pool[i].p && w->pool[i].cap >= n) {
            unsigned char *p = w->pool[i].p;
            w->pool[i].p = NULL;
            w->pool[i].cap = 0;
            return p;
        }
    return malloc(n);
}

static void pool_give(struct k3_h5_dump *w, unsigned char *p, size_t n)
{
    int slot = 0;
    for (int i = 0; i < 8; i++) {
        if (!w->pool[i].p) {
            slot = i;
            break;
        }
        if (w->pool[i].cap < w->pool[slot].cap) slot = i;
    }
    if (w->pool[slot].p && w->pool[slot].cap >= n) {
        free(p);
        return;
    }
    free(w->pool[slot].p);
    w->pool[slot].p = p;
    w->pool[slot].cap = n;
}

/* The innermost message of HDF5's error stack (where the failure happened,
 * e.g. "... errno = 28, error message = 'No space left on device'"). */
static herr_t h5_err_walk(unsigned n, const H5E_error2_t *e, void *ctx)
{
    char *buf = ctx;
    if (n == 0 && e->desc) snprintf(buf, 512, "%s", e->desc);
    return 0;
}

static void h5_err_text(char *buf)
{
    buf[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_err_walk, buf);
    if (!buf[0]) snprintf(buf, 512, "unknown HDF5 error");
}

/* One verdict for every rank: if any rank failed, every rank returns -1 with
 * the message of the lowest failing rank. */
static int agree(struct k3_h5_dump *w, MPI_Comm comm, int rc, struct k3_err *err)
{
    int world, rank;
    K3_CHECK_MPI(MPI_Comm_size(comm, &world));
    K3_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    int mine = rc ? rank : world, first;
    K3_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first == world) return 0;
    char msg[K3_ERR_MSG_BYTES];
    if (rank == first) snprintf(msg, sizeof msg, "%s", err->msg);
    K3_CHECK_MPI(MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, comm));
    (void)w;
    if (world > 1 && rank != first) return k3_err_set(err, "rank %d: %s", first, msg);
    if (world > 1) return k3_err_prefix(err, "rank %d", first);
    return -1;
}

static int64_t sample_of_row(const struct k3_h5_dump *w, int64_t row)
{
    int64_t lo = 0, hi = w->S;   /* largest s with off[s] <= row */
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (w->off[mid] <= row) lo = mid;
        else hi = mid;
    }
    return lo;
}

static struct held *held_find(struct k3_h5_dump *w, int64_t sample)
{
    for (int i = 0; i < w->n_held; i++)
        if (w->held[i].sample == sample) return &w->held[i];
    return NULL;
}

static unsigned char *held_rows(const struct k3_h5_dump *w, const struct held *h, int ds, int64_t row)
{
    int64_t len = w->off[h->sample + 1] - w->off[h->sample];
    return h->data + ((size_t)ds * (size_t)len + (size_t)row) * w->row_bytes;
}

/* Variable-length UTF-8 strings: h5py reads them as str (fixed-length ones come back as bytes). */
static int write_str_attr(hid_t obj, const char *name, const char *value)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type < 0) return -1;
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, type, &value);
    if (a >= 0) H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    return rc < 0 ? -1 : 0;
}

static int read_str_attr(hid_t obj, const char *name, char *buf, size_t n)
{
    buf[0] = 0;
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    char *v = NULL;
    herr_t rc = a < 0 ? -1 : H5Aread(a, type, &v);
    if (rc >= 0 && v) snprintf(buf, n, "%s", v);
    if (v) H5free_memory(v);
    H5Tclose(type);
    if (a >= 0) H5Aclose(a);
    return rc < 0 ? -1 : 0;
}

static int write_i64_attr(hid_t obj, const char *name, int64_t v, int create)
{
    hid_t a;
    if (create) {
        hid_t space = H5Screate(H5S_SCALAR);
        a = H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
        H5Sclose(space);
    } else {
        a = H5Aopen(obj, name, H5P_DEFAULT);
    }
    if (a < 0) return -1;
    herr_t rc = H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    return rc < 0 ? -1 : 0;
}

static int read_i64_attr(hid_t obj, const char *name, int64_t *v)
{
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t rc = H5Aread(a, H5T_NATIVE_INT64, v);
    H5Aclose(a);
    return rc < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ layout */

/* Per-rank files: chunk k lives in rank k % world's file. */
static int64_t local_full_chunks(const struct k3_h5_dump *w, int r)
{
    int64_t k_full = w->N / w->C;
    return r < k_full ? (k_full - r + w->world - 1) / w->world : 0;
}

static int partial_owner(const struct k3_h5_dump *w)
{
    int64_t k_all = (w->N + w->C - 1) / w->C;
    return w->N % w->C ? (int)((k_all - 1) % w->world) : -1;
}

static int64_t local_rows_of(const struct k3_h5_dump *w, int r)
{
    return local_full_chunks(w, r) * w->C + (partial_owner(w) == r ? w->N % w->C : 0);
}

static int64_t local_row(const struct k3_h5_dump *w, int64_t g)
{
    int64_t k = g / w->C;
    return (k / w->world) * w->C + (g - k * w->C);
}

static char *rank_file_name(const char *path, int rank, int world)
{
    size_t n = strlen(path) + 48;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s.r%d-of-%d.h5", path, rank, world);
    return s;
}

static hid_t hidden_type(const struct k3_h5_dump *w, int mem)
{
    if (w->opts.dtype == K3_H5_DUMP_F32) return mem ? H5T_NATIVE_FLOAT : H5T_IEEE_F32LE;
    return mem ? H5T_NATIVE_UINT16 : H5T_STD_U16LE;
}

/* Dataset creation property list: chunks of C rows, every chunk allocated at
 * creation, never filled (the run writes every row). */
static hid_t hidden_dcpl(const struct k3_h5_dump *w)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[2] = {(hsize_t)w->C, (hsize_t)w->D};
    K3_CHECK_H5(H5Pset_chunk(dcpl, 2, chunk));
    K3_CHECK_H5(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    K3_CHECK_H5(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    return dcpl;
}

static hid_t make_fapl(const struct k3_h5_dump *w, int parallel)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if K3_HDF5_PARALLEL
    if (parallel) {
        K3_CHECK_H5(H5Pset_fapl_mpio(fapl, w->comm, MPI_INFO_NULL));
        /* Metadata reads stay independent: an owner looks up only its chunks' addresses. */
        K3_CHECK_H5(H5Pset_all_coll_metadata_ops(fapl, 0));
        K3_CHECK_H5(H5Pset_coll_metadata_write(fapl, 1));
    }
#else
    (void)parallel;
#endif
    /* Chunks start on 1 MiB boundaries when they are that large (file-system
     * stripes, serving.md §9.1), on 4 KiB ones otherwise (O_DIRECT). */
    size_t chunk_bytes = (size_t)w->C * w->row_bytes;
    if (chunk_bytes >= (1u << 20)) K3_CHECK_H5(H5Pset_alignment(fapl, 1 << 20, 1 << 20));
    else K3_CHECK_H5(H5Pset_alignment(fapl, 4096, 4096));
    return fapl;
}

/* The 1-D metadata datasets (tokens, loss mask, offsets), written whole by
 * rank 0 (the others join the collective call with nothing selected). */
static int write_1d(hid_t file, const char *name, hid_t ftype, hid_t mtype, int64_t n,
                    const void *data, int mine, hid_t dxpl)
{
    hsize_t dims[1] = {(hsize_t)n};
    hsize_t chunk[1] = {(hsize_t)min64(n, 1 << 20)};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    hid_t ds = H5Dcreate2(file, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    herr_t rc = ds < 0 ? -1 : 0;
    if (!rc) {
        hid_t fsel = H5Scopy(space), msel = H5Scopy(space);
        if (!mine) {
            H5Sselect_none(fsel);
            H5Sselect_none(msel);
        }
        rc = H5Dwrite(ds, mtype, msel, fsel, dxpl, data);
        H5Sclose(fsel);
        H5Sclose(msel);
        H5Dclose(ds);
    }
    H5Pclose(dcpl);
    H5Sclose(space);
    return rc < 0 ? -1 : 0;
}

static int write_root_attrs(const struct k3_h5_dump *w, hid_t file)
{
    char buf[64];
    int rc = write_str_attr(file, "format", DUMP_FORMAT);
    rc |= write_str_attr(file, "dtype", w->opts.dtype == K3_H5_DUMP_BF16 ? "bfloat16" : "float32");
    rc |= write_i64_attr(file, "hidden_size", w->D, 1);
    rc |= write_i64_attr(file, "chunk_tokens", w->C, 1);
    rc |= write_i64_attr(file, "n_samples", w->S, 1);
    rc |= write_i64_attr(file, "n_tokens", w->N, 1);
    rc |= write_i64_attr(file, "complete", 0, 1);
    snprintf(buf, sizeof buf, "%016" PRIx64, w->identity);
    rc |= write_str_attr(file, "k3_identity", buf);
    rc |= write_str_attr(file, "writer", w->opts.per_rank_files ? "per-rank files + virtual datasets"
                                                                : "one file, collective MPI-IO");
    for (int i = 0; i < w->opts.n_attrs; i++)
        rc |= write_str_attr(file, w->opts.attrs[i].name, w->opts.attrs[i].value);
    return rc ? -1 : 0;
}

/* The main file's metadata: attributes, /tokens, /loss_mask, /sample_offsets,
 * the /hidden group, and (shared file) the hidden datasets themselves or
 * (per-rank files) virtual datasets over the rank files. */
static int create_main(struct k3_h5_dump *w, hid_t file, const struct k3_h5_dump_input *in, int mine,
                       hid_t dxpl)
{
    int rc = write_root_attrs(w, file);
    rc |= write_1d(file, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, w->N, in->tokens, mine, dxpl);
    rc |= write_1d(file, "loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, w->N, in->loss_mask, mine, dxpl);
    rc |= write_1d(file, "sample_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, w->S + 1, w->off, mine, dxpl);
    if (in->id_bytes > 0) {
        hid_t st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, (size_t)in->id_bytes);
        H5Tset_strpad(st, H5T_STR_NULLPAD);
        rc |= write_1d(file, "sample_ids", st, st, w->S, in->sample_ids, mine, dxpl);
        H5Tclose(st);
    }
    if (rc) return -1;
    hid_t grp = H5Gcreate2(file, "hidden", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (grp < 0) return -1;
    hsize_t dims[2] = {(hsize_t)w->N, (hsize_t)w->D};
    hid_t space = H5Screate_simple(2, dims, NULL);
    for (int d = 0; d < w->n_ds && !rc; d++) {
        hid_t dcpl;
        if (!w->opts.per_rank_files) {
            dcpl = hidden_dcpl(w);
        } else {
            dcpl = H5Pcreate(H5P_DATASET_CREATE);
            char dset[160];
            snprintf(dset, sizeof dset, "/hidden/%s", w->opts.datasets[d]);
            for (int r = 0; r < w->world; r++) {
                int64_t n_loc = local_rows_of(w, r), full = local_full_chunks(w, r);
                if (!n_loc) continue;
                char *rf = rank_file_name(w->path, r, w->world);
                char *base = rf ? strdup(basename(rf)) : NULL;  /* relative: found next to the main file */
                hsize_t sdims[2] = {(hsize_t)n_loc, (hsize_t)w->D};
                hid_t src = H5Screate_simple(2, sdims, NULL);
                hid_t vsel = H5Scopy(space);
                if (full) {
                    hsize_t vstart[2] = {(hsize_t)(r * w->C), 0}, vstride[2] = {(hsize_t)(w->world * w->C), 1};
                    hsize_t cnt[2] = {(hsize_t)full, 1}, blk[2] = {(hsize_t)w->C, (hsize_t)w->D};
                    hsize_t sstart[2] = {0, 0}, sstride[2] = {(hsize_t)w->C, 1};
                    H5Sselect_hyperslab(vsel, H5S_SELECT_SET, vstart, vstride, cnt, blk);
                    H5Sselect_hyperslab(src, H5S_SELECT_SET, sstart, sstride, cnt, blk);
                    rc |= H5Pset_virtual(dcpl, vsel, base, dset, src) < 0;
                }
                if (partial_owner(w) == r) {
                    int64_t k_last = w->N / w->C;
                    hsize_t vstart[2] = {(hsize_t)(k_last * w->C), 0}, sstart[2] = {(hsize_t)(full * w->C), 0};
                    hsize_t cnt[2] = {1, 1}, blk[2] = {(hsize_t)(w->N % w->C), (hsize_t)w->D};
                    H5Sselect_hyperslab(vsel, H5S_SELECT_SET, vstart, NULL, cnt, blk);
                    H5Sselect_hyperslab(src, H5S_SELECT_SET, sstart, NULL, cnt, blk);
                    rc |= H5Pset_virtual(dcpl, vsel, base, dset, src) < 0;
                }
                H5Sclose(vsel);
                H5Sclose(src);
                free(base);
                free(rf);
            }
        }
        hid_t ds = H5Dcreate2(grp, w->opts.datasets[d], hidden_type(w, 0), space, H5P_DEFAULT, dcpl,
                              H5P_DEFAULT);
        H5Pclose(dcpl);
        if (ds < 0) {
            rc = -1;
            break;
        }
        rc |= write_str_attr(ds, "dtype", w->opts.dtype == K3_H5_DUMP_BF16 ? "bfloat16" : "float32");
        if (w->opts.per_rank_files) H5Dclose(ds);
        else w->ds[d] = ds;
    }
    H5Sclose(space);
    H5Gclose(grp);
    return rc ? -1 : 0;
}

/* This rank's file (per-rank mode): /hidden/<name> [n_local_rows, D]. */
static int create_rank_file(struct k3_h5_dump *w)
{
    hid_t fapl = make_fapl(w, 0);
    w->file = H5Fcreate(w->rank_path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (w->file < 0) return -1;
    hid_t grp = H5Gcreate2(w->file, "hidden", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (grp < 0) return -1;
    hsize_t dims[2] = {(hsize_t)w->n_local_rows, (hsize_t)w->D};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = hidden_dcpl(w);
    int rc = 0;
    for (int d = 0; d < w->n_ds && !rc; d++) {
        w->ds[d] = H5Dcreate2(grp, w->opts.datasets[d], hidden_type(w, 0), space, H5P_DEFAULT, dcpl,
                              H5P_DEFAULT);
        rc = w->ds[d] < 0 ? -1 : 0;
    }
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Gclose(grp);
    return rc;
}

static int open_datasets(struct k3_h5_dump *w)
{
    for (int d = 0; d < w->n_ds; d++) {
        char name[160];
        snprintf(name, sizeof name, "/hidden/%s", w->opts.datasets[d]);
        w->ds[d] = H5Dopen2(w->file, name, H5P_DEFAULT);
        if (w->ds[d] < 0) return -1;
    }
    return 0;
}

static void close_files(struct k3_h5_dump *w)
{
    if (w->fd_direct >= 0) close(w->fd_direct);
    if (w->fd_plain >= 0) close(w->fd_plain);
    w->fd_direct = w->fd_plain = -1;
    for (int d = 0; d < w->n_ds; d++)
        if (w->ds[d] > 0) H5Dclose(w->ds[d]);
    memset(w->ds, 0, sizeof w->ds);
    if (w->file > 0) H5Fclose(w->file);
    w->file = 0;
}

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

/* A file without a journal: fine only if it is this very dump, complete. */
static int check_complete_file(struct k3_h5_dump *w, struct k3_err *err)
{
    hid_t f = H5Fopen(w->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int64_t complete = 0;
    char id[32] = "";
    if (f >= 0) {
        read_i64_attr(f, "complete", &complete);
        read_str_attr(f, "k3_identity", id, sizeof id);
        H5Fclose(f);
    }
    char want[32];
    snprintf(want, sizeof want, "%016" PRIx64, w->identity);
    if (f < 0 || strcmp(id, want) != 0)
        return k3_err_set(err, "%s exists and is not a dump of this command (no %s to resume from); "
                          "remove it or choose another --out", w->path, w->journal);
    if (!complete)
        return k3_err_set(err, "%s is an unfinished dump whose journal %s is gone; remove it to start "
                          "over", w->path, w->journal);
    return 0;
}

/* ------------------------------------------------------------------- open */

/* Per-rank files depend on the number of ranks (the chunk -> file map); the
 * shared file does not, so it can be resumed with another rank count. */
static uint64_t identity_of(const struct k3_h5_dump_opts *o, const struct k3_h5_dump_input *in, int world)
{
    uint64_t h = K3_FNV1A64_INIT;
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%s|%d|%lld|%d|%lld|%d|%lld|", DUMP_FORMAT, (int)o->dtype,
                     (long long)o->hidden, o->per_rank_files ? world : 0, (long long)o->chunk_tokens, o->n_datasets,
                     (long long)in->n_samples);
    h = k3_fnv1a64(buf, (size_t)n, h);
    for (int i = 0; i < o->n_datasets; i++) h = k3_fnv1a64(o->datasets[i], strlen(o->datasets[i]) + 1, h);
    h = k3_fnv1a64(in->sample_len, sizeof(int64_t) * (size_t)in->n_samples, h);
    if (o->identity) h = k3_fnv1a64(o->identity, strlen(o->identity), h);
    return h;
}

int k3_h5_dump_open(struct k3_h5_dump **out, const struct k3_h5_dump_opts *opts,
                    const struct k3_h5_dump_input *in, int64_t *n_done, struct k3_err *err)
{
    *out = NULL;
    struct k3_h5_dump *w = calloc(1, sizeof *w);
    K3_CHECK(w, "out of memory");
    w->opts = *opts;
    w->fd_direct = w->fd_plain = -1;
    K3_CHECK_MPI(MPI_Comm_dup(opts->comm, &w->comm));
    K3_CHECK_MPI(MPI_Comm_rank(w->comm, &w->rank));
    K3_CHECK_MPI(MPI_Comm_size(w->comm, &w->world));
    int rc = 0;
    err->msg[0] = 0;

    /* Arguments: checked the same way on every rank. */
    if (opts->n_datasets < 1 || opts->n_datasets > K3_H5_DUMP_MAX_DATASETS)
        rc = k3_err_set(err, "a dump needs 1 to %d hidden datasets, not %d", K3_H5_DUMP_MAX_DATASETS,
                        opts->n_datasets);
    else if (in->n_samples < 1)
        rc = k3_err_set(err, "the input has no samples");
    else if (opts->hidden < 1 || opts->chunk_tokens < 1)
        rc = k3_err_set(err, "hidden width and chunk length must be positive");
#if !K3_HDF5_PARALLEL
    else if (!opts->per_rank_files && w->world > 1)
        rc = k3_err_set(err, "this k3 was built with serial HDF5: a %d-rank dump needs per-rank files",
                        w->world);
#endif
    if (rc) goto fail_args;
    w->n_ds = opts->n_datasets;
    w->S = in->n_samples;
    w->off = malloc(sizeof(int64_t) * (size_t)(w->S + 1));
    w->holder = malloc(sizeof(int) * (size_t)w->S);
    K3_CHECK(w->off && w->holder, "out of memory for %lld samples", (long long)w->S);
    w->off[0] = 0;
    for (int64_t s = 0; s < w->S; s++) {
        if (in->sample_len[s] < 1 && !rc)
            rc = k3_err_set(err, "sample %lld has no tokens", (long long)s);
        w->off[s + 1] = w->off[s] + in->sample_len[s];
        w->holder[s] = -1;
    }
    if (rc) goto fail_args;
    w->N = w->off[w->S];
    w->D = opts->hidden;
    w->C = min64(opts->chunk_tokens, w->N);
    w->elem_bytes = opts->dtype == K3_H5_DUMP_F32 ? 4 : 2;
    w->row_bytes = w->elem_bytes * (size_t)w->D;
    w->identity = identity_of(opts, in, w->world);
    w->path = strdup(opts->path);
    w->journal = malloc(strlen(opts->path) + 16);
    K3_CHECK(w->path && w->journal, "out of memory");
    sprintf(w->journal, "%s.journal", opts->path);
    if (opts->per_rank_files) {
        w->rank_path = rank_file_name(opts->path, w->rank, w->world);
        K3_CHECK(w->rank_path, "out of memory");
        w->n_local_rows = local_rows_of(w, w->rank);
    }
    {
        /* Every rank must describe the same dump (its attributes are written collectively). */
        uint64_t root = w->identity;
        K3_CHECK_MPI(MPI_Bcast(&root, 1, MPI_UINT64_T, 0, w->comm));
        if (root != w->identity)
            rc = k3_err_set(err, "ranks disagree on the dump's input or settings (identity %016" PRIx64
                            " vs rank 0's %016" PRIx64 ")", w->identity, root);
        if (agree(w, w->comm, rc, err)) goto fail_args;
    }

    /* Rank 0 decides: 0 = create, 1 = resume, 2 = already complete. */
    int64_t verdict[3] = {0, 0, 0};   /* action, committed samples, committed tokens */
    if (w->rank == 0) {
        struct k3_dump_journal_state st;
        rc = k3_dump_journal_read(w->journal, &st, err);
        if (!rc && st.exists && st.identity != w->identity)
            rc = k3_err_set(err, "%s belongs to a dump with different input or settings; re-run the "
                            "same command to resume it, or remove %s and %s to start over", w->journal,
                            w->path, w->journal);
        if (!rc && st.exists && st.created && file_exists(w->path)) {
            if (st.n_samples > w->S || st.n_tokens != w->off[st.n_samples])
                rc = k3_err_set(err, "%s does not match this input (%lld samples, %lld tokens committed); "
                                "remove %s and it to start over", w->journal, (long long)st.n_samples,
                                (long long)st.n_tokens, w->path);
            verdict[0] = 1;
            verdict[1] = st.n_samples;
            verdict[2] = st.n_tokens;
        } else if (!rc && !st.exists && file_exists(w->path)) {
            rc = check_complete_file(w, err);
            verdict[0] = 2;
        }
        if (!rc && verdict[0] == 0) rc = k3_dump_journal_begin(w->journal, w->identity, opts->no_fsync, err);
    }
    K3_CHECK_MPI(MPI_Bcast(verdict, 3, MPI_INT64_T, 0, w->comm));
    if (agree(w, w->comm, rc, err)) goto fail_args;

    if (verdict[0] == 2) {
        w->finished = 1;
        w->S_committed = w->S;
        w->W = w->N;
        *n_done = w->S;
        *out = w;
        return 0;
    }
    w->dxpl = H5Pcreate(H5P_DATASET_XFER);
#if K3_HDF5_PARALLEL
    if (!opts->per_rank_files) K3_CHECK_H5(H5Pset_dxpl_mpio(w->dxpl, H5FD_MPIO_COLLECTIVE));
#endif
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);   /* failures are reported through err, with the stack's text */
    char h5msg[512];
    if (verdict[0] == 0) {
        /* Create. */
        if (!opts->per_rank_files) {
            hid_t fapl = make_fapl(w, 1);
            w->file = H5Fcreate(w->path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
            H5Pclose(fapl);
            rc = w->file < 0 ? -1 : create_main(w, w->file, in, w->rank == 0, w->dxpl);
            if (!rc && H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0) rc = -1;
            if (rc) {
                h5_err_text(h5msg);
                k3_err_set(err, "cannot create %s: %s", w->path, h5msg);
            }
        } else {
            if (w->rank == 0) {
                hid_t fapl = make_fapl(w, 0);
                hid_t f = H5Fcreate(w->path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
                H5Pclose(fapl);
                rc = f < 0 ? -1 : create_main(w, f, in, 1, w->dxpl);
                if (f >= 0 && H5Fclose(f) < 0) rc = -1;
                if (rc) {
                    h5_err_text(h5msg);
                    k3_err_set(err, "cannot create %s: %s", w->path, h5msg);
                }
            }
            if (!rc && w->n_local_rows && create_rank_file(w)) {
                h5_err_text(h5msg);
                rc = k3_err_set(err, "cannot create %s: %s", w->rank_path, h5msg);
            }
            if (!rc && w->file > 0 && H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0) rc = -1;
        }
        if (agree(w, w->comm, rc, err)) goto fail;
        if (w->rank == 0) rc = k3_dump_journal_append(w->journal, "created", opts->no_fsync, err);
        if (agree(w, w->comm, rc, err)) goto fail;
    } else {
        /* Resume: reopen and continue after the last committed sample. */
        const char *p = opts->per_rank_files ? w->rank_path : w->path;
        if (!opts->per_rank_files || w->n_local_rows) {
            hid_t fapl = make_fapl(w, !opts->per_rank_files);
            w->file = H5Fopen(p, H5F_ACC_RDWR, fapl);
            H5Pclose(fapl);
            if (w->file < 0 || open_datasets(w)) {
                h5_err_text(h5msg);
                rc = k3_err_set(err, "cannot reopen %s to resume (%s); if it is damaged, remove %s, %s "
                                "and any %s.r*.h5 to start over", p, h5msg, w->path, w->journal, w->path);
            }
        }
        if (agree(w, w->comm, rc, err)) goto fail;
        w->S_committed = verdict[1];
        w->W = verdict[2];
    }
    if (!opts->hdf5_io && (!opts->per_rank_files || w->n_local_rows)) {
        const char *p = opts->per_rank_files ? w->rank_path : w->path;
        w->fd_plain = open(p, O_WRONLY | O_CLOEXEC);
        w->fd_direct = open(p, O_WRONLY | O_CLOEXEC | O_DIRECT);   /* -1 where unsupported (tmpfs) */
        if (posix_memalign((void **)&w->bounce, 4096, (size_t)w->C * w->row_bytes)) w->bounce = NULL;
        if (w->fd_plain < 0 || !w->bounce) rc = k3_err_set(err, "cannot open %s for writing: %s", p, strerror(errno));
    }
    if (agree(w, w->comm, rc, err)) goto fail;
    *n_done = w->S_committed;
    *out = w;
    return 0;
fail:
    close_files(w);
fail_args:
    k3_h5_dump_free(w);
    return -1;
}

/* -------------------------------------------------------------- put/done */

/* k3_f32_to_bf16 (round to nearest even, NaN kept quiet) for a row, written
 * with a select instead of a branch so the compiler vectorises it: the
 * conversion is most of put()'s time (bench_h5_dump, "end to end"). */
static void f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &src[j], sizeof u);
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t quiet = (u >> 16) | 0x40u;
        dst[j] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

int k3_h5_dump_put(struct k3_h5_dump *w, int64_t sample, int ds, int64_t row0, const float *x,
                   int64_t n, int64_t ld, struct k3_err *err)
{
    if (sample < w->S_committed || sample >= w->S || ds < 0 || ds >= w->n_ds)
        return k3_err_set(err, "dump put: sample %lld dataset %d is outside this dump", (long long)sample, ds);
    int64_t len = w->off[sample + 1] - w->off[sample];
    if (row0 < 0 || n < 0 || row0 + n > len)
        return k3_err_set(err, "dump put: rows [%lld, %lld) outside sample %lld's %lld tokens",
                          (long long)row0, (long long)(row0 + n), (long long)sample, (long long)len);
    struct held *h = held_find(w, sample);
    if (!h) {
        if (w->n_held == w->cap_held) {
            w->cap_held = w->cap_held ? 2 * w->cap_held : 16;
            w->held = realloc(w->held, sizeof *w->held * (size_t)w->cap_held);
            K3_CHECK(w->held, "out of memory");
        }
        h = &w->held[w->n_held++];
        memset(h, 0, sizeof *h);
        h->sample = sample;
        h->data = pool_take(w, (size_t)w->n_ds * (size_t)len * w->row_bytes);
        if (!h->data) {
            w->n_held--;
            return k3_err_set(err, "out of memory holding sample %lld (%lld tokens)", (long long)sample,
                              (long long)len);
        }
    }
    if (h->done) return k3_err_set(err, "dump put: sample %lld is already done", (long long)sample);
    for (int64_t i = 0; i < n; i++) {
        const float *src = x + i * ld;
        unsigned char *dst = held_rows(w, h, ds, row0 + i);
        if (w->opts.dtype == K3_H5_DUMP_F32) {
            memcpy(dst, src, w->row_bytes);
        } else {
            f32_to_bf16_row((uint16_t *)dst, src, w->D);
        }
    }
    h->rows_put[ds] += n;
    return 0;
}

int k3_h5_dump_sample_done(struct k3_h5_dump *w, int64_t sample, struct k3_err *err)
{
    struct held *h = sample >= 0 && sample < w->S ? held_find(w, sample) : NULL;
    if (!h) return k3_err_set(err, "dump: sample %lld has no rows on this rank", (long long)sample);
    int64_t len = w->off[sample + 1] - w->off[sample];
    for (int d = 0; d < w->n_ds; d++)
        if (h->rows_put[d] != len)
            return k3_err_set(err, "dump: sample %lld got %lld of its %lld rows for %s (is the layer's "
                              "intermediate produced?)", (long long)sample, (long long)h->rows_put[d],
                              (long long)len, w->opts.datasets[d]);
    h->done = 1;
    return 0;
}

/* ------------------------------------------------------------------ flush */

/* Tells every rank which samples each rank completed since the last flush. */
static void announce(struct k3_h5_dump *w)
{
    int n_new = 0;
    for (int i = 0; i < w->n_held; i++) n_new += w->held[i].done && !w->held[i].announced;
    int *counts = malloc(sizeof(int) * (size_t)w->world), *displs = malloc(sizeof(int) * (size_t)w->world);
    int64_t *mine = malloc(sizeof(int64_t) * (size_t)(n_new + 1));
    K3_CHECK(counts && displs && mine, "out of memory");
    n_new = 0;
    for (int i = 0; i < w->n_held; i++)
        if (w->held[i].done && !w->held[i].announced) {
            mine[n_new++] = w->held[i].sample;
            w->held[i].announced = 1;
        }
    K3_CHECK_MPI(MPI_Allgather(&n_new, 1, MPI_INT, counts, 1, MPI_INT, w->comm));
    int total = 0;
    for (int r = 0; r < w->world; r++) {
        displs[r] = total;
        total += counts[r];
    }
    int64_t *all = malloc(sizeof(int64_t) * (size_t)(total + 1));
    K3_CHECK(all, "out of memory");
    K3_CHECK_MPI(MPI_Allgatherv(mine, n_new, MPI_INT64_T, all, counts, displs, MPI_INT64_T, w->comm));
    for (int r = 0; r < w->world; r++)
        for (int i = 0; i < counts[r]; i++) {
            int64_t s = all[displs[r] + i];
            K3_CHECK(w->holder[s] < 0 || w->holder[s] == r, "sample %lld completed on ranks %d and %d",
                     (long long)s, w->holder[s], r);
            w->holder[s] = r;
        }
    free(all);
    free(mine);
    free(counts);
    free(displs);
}

/* The segments of rows [W, E) with their holders and chunk owners. */
static int64_t build_segments(struct k3_h5_dump *w, int64_t E, struct segment **out)
{
    int64_t k0 = w->W / w->C, k1 = (E + w->C - 1) / w->C;
    int64_t s0 = sample_of_row(w, w->W), s1 = sample_of_row(w, E - 1);
    int64_t cap = (s1 - s0 + 1) + (k1 - k0) + 1, n = 0;
    struct segment *seg = malloc(sizeof *seg * (size_t)cap);
    int64_t *count = calloc((size_t)w->world, sizeof(int64_t));
    K3_CHECK(seg && count, "out of memory");
    int64_t s = s0;
    for (int64_t k = k0; k < k1; k++) {
        int64_t lo = k * w->C > w->W ? k * w->C : w->W, hi = min64(k * w->C + w->C, E);
        int64_t first = n;
        memset(count, 0, sizeof(int64_t) * (size_t)w->world);
        for (int64_t a = lo; a < hi;) {
            while (w->off[s + 1] <= a) s++;
            int64_t b = min64(hi, w->off[s + 1]);
            seg[n++] = (struct segment){.a = a, .b = b, .sample = s, .holder = w->holder[s]};
            count[w->holder[s]] += b - a;
            a = b;
        }
        int owner = 0;
        if (w->opts.per_rank_files) owner = (int)(k % w->world);
        else
            for (int r = 1; r < w->world; r++)
                if (count[r] > count[owner]) owner = r;
        for (int64_t i = first; i < n; i++) seg[i].owner = owner;
    }
    free(count);
    *out = seg;
    return n;
}

/* Moves dataset d's rows of [W, E) to their owners; returns the owner
 * buffer (this rank's owned rows in row order) and its row count. */
static unsigned char *route(struct k3_h5_dump *w, int d, const struct segment *seg, int64_t n_seg,
                            int64_t *n_rows_out)
{
    int P = w->world, me = w->rank;
    int *sc = calloc((size_t)P, sizeof(int)), *rc = calloc((size_t)P, sizeof(int));
    int *sd = calloc((size_t)P, sizeof(int)), *rd = calloc((size_t)P, sizeof(int));
    int64_t *scur = calloc((size_t)P, sizeof(int64_t)), *rcur = calloc((size_t)P, sizeof(int64_t));
    K3_CHECK(sc && rc && sd && rd && scur && rcur, "out of memory");
    int64_t n_own = 0;
    for (int64_t i = 0; i < n_seg; i++) {
        int64_t len = seg[i].b - seg[i].a;
        if (seg[i].owner == me) n_own += len;
        if (seg[i].holder == seg[i].owner) continue;       /* stays in place: copied directly */
        if (seg[i].holder == me) sc[seg[i].owner] += (int)len;
        if (seg[i].owner == me) rc[seg[i].holder] += (int)len;
    }
    int64_t n_send = 0, n_recv = 0;
    for (int r = 0; r < P; r++) {
        sd[r] = (int)n_send;
        rd[r] = (int)n_recv;
        n_send += sc[r];
        n_recv += rc[r];
    }
    size_t rb = w->row_bytes;
    unsigned char *sbuf = buf_need(&w->sbuf, (size_t)n_send * rb + 1), *rbuf = buf_need(&w->rbuf, (size_t)n_recv * rb + 1);
    unsigned char *own = buf_need(&w->own, (size_t)n_own * rb + 1);
    K3_CHECK(sbuf && rbuf && own, "out of memory routing %lld rows", (long long)(n_send + n_recv));
    for (int64_t i = 0; i < n_seg; i++) {
        const struct segment *g = &seg[i];
        if (g->holder != me || g->holder == g->owner) continue;
        struct held *h = held_find(w, g->sample);
        size_t n = (size_t)(g->b - g->a) * rb;
        memcpy(sbuf + ((size_t)sd[g->owner] + (size_t)scur[g->owner]) * rb,
               held_rows(w, h, d, g->a - w->off[g->sample]), n);
        scur[g->owner] += g->b - g->a;
    }
    if (P > 1) {
        MPI_Datatype row;
        K3_CHECK_MPI(MPI_Type_contiguous((int)rb, MPI_BYTE, &row));
        K3_CHECK_MPI(MPI_Type_commit(&row));
        K3_CHECK_MPI(MPI_Alltoallv(sbuf, sc, sd, row, rbuf, rc, rd, row, w->comm));
        K3_CHECK_MPI(MPI_Type_free(&row));
    }
    int64_t pos = 0;
    for (int64_t i = 0; i < n_seg; i++) {
        const struct segment *g = &seg[i];
        if (g->owner != me) continue;
        size_t n = (size_t)(g->b - g->a) * rb;
        if (g->holder == me) {
            struct held *h = held_find(w, g->sample);
            memcpy(own + (size_t)pos * rb, held_rows(w, h, d, g->a - w->off[g->sample]), n);
        } else {
            memcpy(own + (size_t)pos * rb, rbuf + ((size_t)rd[g->holder] + (size_t)rcur[g->holder]) * rb, n);
            rcur[g->holder] += g->b - g->a;
        }
        pos += g->b - g->a;
    }
    free(sc);
    free(rc);
    free(sd);
    free(rd);
    free(scur);
    free(rcur);
    *n_rows_out = n_own;
    return own;
}

/* Writes this rank's owned rows of dataset d (row order) with one H5Dwrite:
 * collective in the shared file (ranks owning nothing select nothing),
 * independent in a rank file. */
static int write_owned(struct k3_h5_dump *w, int d, const struct segment *seg, int64_t n_seg,
                       const unsigned char *buf, int64_t n_rows)
{
    int per_rank = w->opts.per_rank_files;
    if (per_rank && n_rows == 0) return 0;
    hid_t fspace = H5Dget_space(w->ds[d]);
    H5Sselect_none(fspace);
    /* Runs of consecutive owned segments become one hyperslab block. */
    for (int64_t i = 0; i < n_seg;) {
        if (seg[i].owner != w->rank) {
            i++;
            continue;
        }
        int64_t a = seg[i].a, b = seg[i].b;
        int64_t j = i + 1;
        while (j < n_seg && seg[j].owner == w->rank && seg[j].a == b &&
               (!per_rank || seg[j].a / w->C == a / w->C))   /* rank files: a chunk's rows are contiguous */
            b = seg[j++].b;
        int64_t fa = per_rank ? local_row(w, a) : a;
        hsize_t start[2] = {(hsize_t)fa, 0}, count[2] = {(hsize_t)(b - a), (hsize_t)w->D};
        H5Sselect_hyperslab(fspace, H5S_SELECT_OR, start, NULL, count, NULL);
        i = j;
    }
    hsize_t mdims[2] = {(hsize_t)(n_rows ? n_rows : 1), (hsize_t)w->D};
    hid_t mspace = H5Screate_simple(2, mdims, NULL);
    if (!n_rows) H5Sselect_none(mspace);
    herr_t rc = H5Dwrite(w->ds[d], hidden_type(w, 1), mspace, fspace, w->dxpl, buf);
    H5Sclose(mspace);
    H5Sclose(fspace);
    return rc < 0 ? -1 : 0;
}

static int pwrite_all(int fd, const unsigned char *p, size_t n, off_t off)
{
    while (n) {
        ssize_t k = pwrite(fd, p, n, off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/* The same rows as write_owned, as raw chunk bytes at the chunk addresses
 * (see the file comment). Independent: no collective call. */
static int write_owned_raw(struct k3_h5_dump *w, int d, const struct segment *seg, int64_t n_seg,
                           const unsigned char *buf, struct k3_err *err)
{
    size_t rb = w->row_bytes, chunk_bytes = (size_t)w->C * rb;
    int64_t pos = 0;
    for (int64_t i = 0; i < n_seg;) {
        if (seg[i].owner != w->rank) {
            i++;
            continue;
        }
        int64_t k = seg[i].a / w->C, a = seg[i].a, b = seg[i].b, j = i + 1;
        while (j < n_seg && seg[j].owner == w->rank && seg[j].a == b && seg[j].a / w->C == k) b = seg[j++].b;
        hsize_t coord[2] = {(hsize_t)(w->opts.per_rank_files ? (k / w->world) * w->C : k * w->C), 0};
        unsigned filters = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(w->ds[d], coord, &filters, &addr, &size) < 0 || addr == HADDR_UNDEF ||
            size < chunk_bytes)
            return k3_err_set(err, "chunk %lld of %s has no file address", (long long)k, w->opts.datasets[d]);
        const unsigned char *p = buf + (size_t)pos * rb;
        size_t len = (size_t)(b - a) * rb;
        int whole = a == k * w->C && (b == k * w->C + w->C || b == w->N);
        int rc;
        if (w->fd_direct >= 0 && whole && addr % 4096 == 0 && chunk_bytes % 4096 == 0) {
            const unsigned char *q = p;
            if (len != chunk_bytes || (uintptr_t)p % 4096) {   /* the last chunk is padded to its stored size */
                memcpy(w->bounce, p, len);
                memset(w->bounce + len, 0, chunk_bytes - len);
                q = w->bounce;
            }
            rc = pwrite_all(w->fd_direct, q, chunk_bytes, (off_t)addr);
            w->n_direct_chunks++;
        } else {
            rc = pwrite_all(w->fd_plain, p, len, (off_t)(addr + (haddr_t)((a - k * w->C) * (int64_t)rb)));
            w->n_plain_writes++;
        }
        if (rc)
            return k3_err_set(err, "writing %s rows [%lld, %lld) to %s failed: %s", w->opts.datasets[d], (long long)a,
                              (long long)b, w->opts.per_rank_files ? w->rank_path : w->path, strerror(errno));
        pos += b - a;
        i = j;
    }
    return 0;
}

/* Data on disk before the journal says so. */
static int sync_data(struct k3_h5_dump *w)
{
    if (w->fd_plain >= 0) return w->opts.no_fsync ? 0 : fdatasync(w->fd_plain);
    if (w->file <= 0) return 0;
    if (H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0) return -1;   /* MPI-IO: MPI_File_sync */
    if (w->opts.per_rank_files && !w->opts.no_fsync) {
        int *fd = NULL;
        if (H5Fget_vfd_handle(w->file, H5P_DEFAULT, (void **)&fd) < 0 || !fd) return -1;
        if (fsync(*fd) < 0) return -1;
    }
    return 0;
}

static int flush_to(struct k3_h5_dump *w, int64_t E, struct k3_err *err)
{
    int rc = 0;
    if (E > w->W) {
        struct segment *seg;
        int64_t n_seg = build_segments(w, E, &seg);
        char h5msg[512] = "";
        for (int d = 0; d < w->n_ds; d++) {
            int64_t n_rows;
            unsigned char *own = route(w, d, seg, n_seg, &n_rows);
            if (!rc && !w->opts.hdf5_io) rc = write_owned_raw(w, d, seg, n_seg, own, err);
            else if (!rc && write_owned(w, d, seg, n_seg, own, n_rows)) {
                h5_err_text(h5msg);
                rc = k3_err_set(err, "writing %s rows [%lld, %lld) of %s failed: %s", w->opts.datasets[d],
                                (long long)w->W, (long long)E,
                                w->opts.per_rank_files ? w->rank_path : w->path, h5msg);
            }
        }
        free(seg);
        if (!rc && sync_data(w)) {
            h5_err_text(h5msg);
            rc = k3_err_set(err, "flushing %s failed: %s (errno: %s)",
                            w->opts.per_rank_files ? w->rank_path : w->path, h5msg, strerror(errno));
        }
        if (agree(w, w->comm, rc, err)) return -1;
        w->W = E;
    }
    /* Samples entirely below W are committed; their rows can go. */
    int64_t S_new = w->W == w->N ? w->S : sample_of_row(w, w->W);
    if (S_new > w->S_committed) {
        if (w->rank == 0) {
            char line[96];
            snprintf(line, sizeof line, "committed %lld %lld", (long long)S_new, (long long)w->off[S_new]);
            rc = k3_dump_journal_append(w->journal, line, w->opts.no_fsync, err);
        }
        if (agree(w, w->comm, rc, err)) return -1;
        w->S_committed = S_new;
    }
    int keep = 0;
    for (int i = 0; i < w->n_held; i++) {
        int64_t s = w->held[i].sample;
        if (w->held[i].done && w->off[s + 1] <= w->W)
            pool_give(w, w->held[i].data, (size_t)w->n_ds * (size_t)(w->off[s + 1] - w->off[s]) * w->row_bytes);
        else w->held[keep++] = w->held[i];
    }
    w->n_held = keep;
    return 0;
}

int k3_h5_dump_flush(struct k3_h5_dump *w, struct k3_err *err)
{
    if (w->finished) return 0;
    announce(w);
    int64_t s = w->S_committed;
    while (s < w->S && w->holder[s] >= 0) s++;
    int64_t E = s == w->S ? w->N : (w->off[s] / w->C) * w->C;
    if (E < w->W) E = w->W;
    return flush_to(w, E, err);
}

int k3_h5_dump_finish(struct k3_h5_dump *w, struct k3_err *err)
{
    if (w->finished) return 0;
    if (k3_h5_dump_flush(w, err)) return -1;
    int rc = 0;
    if (w->W != w->N) rc = k3_err_set(err, "dump finish: only %lld of %lld tokens are done", (long long)w->W,
                                      (long long)w->N);
    if (agree(w, w->comm, rc, err)) return -1;
    char h5msg[512];
    if (!w->opts.per_rank_files) {
        /* In place: the attribute exists since creation, so this rewrites 8 bytes. */
        if (write_i64_attr(w->file, "complete", 1, 0) || sync_data(w)) {
            h5_err_text(h5msg);
            rc = k3_err_set(err, "marking %s complete failed: %s", w->path, h5msg);
        }
        close_files(w);
    } else {
        if (sync_data(w)) {
            h5_err_text(h5msg);
            rc = k3_err_set(err, "flushing %s failed: %s", w->rank_path, h5msg);
        }
        close_files(w);
        if (agree(w, w->comm, rc, err)) return -1;
        if (w->rank == 0) {
            hid_t f = H5Fopen(w->path, H5F_ACC_RDWR, H5P_DEFAULT);
            if (f < 0 || write_i64_attr(f, "complete", 1, 0) || H5Fclose(f) < 0) {
                h5_err_text(h5msg);
                rc = k3_err_set(err, "marking %s complete failed: %s", w->path, h5msg);
            }
        }
    }
    if (agree(w, w->comm, rc, err)) return -1;
    if (w->rank == 0 && unlink(w->journal) && errno != ENOENT)
        K3_WARN("dump: cannot remove %s: %s (the dump is complete)", w->journal, strerror(errno));
    w->finished = 1;
    return 0;
}

void k3_h5_dump_stats(const struct k3_h5_dump *w, struct k3_h5_dump_stats *st)
{
    st->samples_committed = w->S_committed;
    st->tokens_written = w->W;
    st->bytes_written = w->W * (int64_t)w->row_bytes * w->n_ds;
    st->direct_chunks = w->n_direct_chunks;
    st->plain_writes = w->n_plain_writes;
}

void k3_h5_dump_free(struct k3_h5_dump *w)
{
    if (!w) return;
    close_files(w);
    if (w->dxpl > 0) H5Pclose(w->dxpl);
    for (int i = 0; i < w->n_held; i++) free(w->held[i].data);
    free(w->held);
    free(w->bounce);
    free(w->own.p);
    free(w->sbuf.p);
    free(w->rbuf.p);
    for (int i = 0; i < 8; i++) free(w->pool[i].p);
    free(w->off);
    free(w->holder);
    free(w->path);
    free(w->journal);
    free(w->rank_path);
    MPI_Comm_free(&w->comm);
    free(w);
}
