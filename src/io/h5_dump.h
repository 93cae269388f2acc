/* h5_dump.h - the hidden-state dump writer: one HDF5 file, token-major,
 * written by the ranks that hold the data, resumable after a kill.
 *
 * File layout (DESIGN.md §5, issue 11; N tokens, S samples, D = hidden):
 *   /tokens          int32  [N]
 *   /loss_mask       uint8  [N]
 *   /sample_offsets  int64  [S+1]       sample i is rows [off[i], off[i+1])
 *   /sample_ids      string [S]         the input lines' ids (when given)
 *   /hidden/layer_L  uint16 [N, D] (bf16 bits, attribute dtype="bfloat16")
 *                    or float32 [N, D] (attribute dtype="float32")
 *   /hidden/final    same, when asked for
 *   root attributes: the caller's (model config, layers, hashes, version)
 *   plus format, dtype, hidden_size, chunk_tokens, complete.
 *
 * Use (every call is collective over opts.comm unless it says otherwise):
 *   k3_h5_dump_open()        creates the file, or reopens a partial one and
 *                            says how many samples are already written;
 *   k3_h5_dump_put()         (local) rows of one dataset of one sample that
 *                            this rank holds (an attention group's leader);
 *   k3_h5_dump_sample_done() (local) every row of that sample has been put;
 *   k3_h5_dump_flush()       writes what is complete, then commits it;
 *   k3_h5_dump_finish()      writes the rest and marks the file complete.
 * Sample lengths, tokens and loss masks are known before the first forward
 * pass, so the file's metadata is written once at creation (see h5_dump.c
 * for why that is what makes a kill harmless). */
#ifndef K3_IO_H5_DUMP_H
#define K3_IO_H5_DUMP_H

#include <mpi.h>
#include <stdint.h>

#include "core/err.h"

#define K3_H5_DUMP_MAX_DATASETS 64

enum k3_h5_dump_dtype {
    K3_H5_DUMP_BF16 = 0,   /* stored as uint16 with dtype="bfloat16" */
    K3_H5_DUMP_F32,
};

struct k3_h5_dump_attr {
    const char *name;
    const char *value;     /* a string attribute on the root group */
};

struct k3_h5_dump_opts {
    const char *path;
    MPI_Comm comm;
    int n_datasets;
    const char *const *datasets;   /* names under /hidden: "layer_7", "final" */
    int64_t hidden;                /* row width of every hidden dataset */
    enum k3_h5_dump_dtype dtype;
    int64_t chunk_tokens;          /* HDF5 chunk length along the token axis */
    int per_rank_files;            /* 1: PATH.rR-of-W.h5 per rank joined by a
                                      virtual dataset (serial HDF5); 0: one
                                      shared file written collectively (MPI-IO) */
    int n_attrs;
    const struct k3_h5_dump_attr *attrs;
    const char *identity;          /* everything that must match for a resume
                                      (input hash, layers, dtype, ...); the
                                      writer adds its own layout to it */
    int hdf5_io;                   /* 1: rows go through H5Dwrite (collective MPI-IO
                                      in the shared file), the simple reference
                                      path; 0: chunks are written with pwrite
                                      (O_DIRECT where aligned) at the addresses
                                      HDF5 allocated (h5_dump.c says why) */
    int no_fsync;                  /* 1: skip fsync of data and journal (tests on
                                      tmpfs; a killed process loses nothing
                                      that reached the page cache anyway) */
};

/* The input's shape: S samples, their lengths, and (on rank 0 only; NULL
 * elsewhere) the tokens and loss mask of all N tokens in sample order. */
struct k3_h5_dump_input {
    int64_t n_samples;
    const int64_t *sample_len;     /* [S], every rank */
    const int32_t *tokens;         /* [N], rank 0 */
    const uint8_t *loss_mask;      /* [N], rank 0 */
    int64_t id_bytes;              /* > 0: /sample_ids, fixed-length strings of
                                      id_bytes (NUL-padded), every rank */
    const char *sample_ids;        /* [S][id_bytes], rank 0 */
};

struct k3_h5_dump;

/* Collective. Creates the file, or reopens PATH after a kill (the journal
 * PATH.journal says how far it got) and sets *n_done to the samples already
 * written (0 for a new file; S for a file that is already complete). A file
 * or journal that belongs to a different command is an error, not
 * overwritten. Returns 0 or -1 with err (the same verdict on every rank). */
int k3_h5_dump_open(struct k3_h5_dump **out, const struct k3_h5_dump_opts *opts,
                    const struct k3_h5_dump_input *in, int64_t *n_done, struct k3_err *err);

/* Local. Rows [row0, row0+n) of dataset ds of sample `sample` (rows with
 * stride ld floats). Converted to the file's dtype and kept until written. */
int k3_h5_dump_put(struct k3_h5_dump *w, int64_t sample, int ds, int64_t row0, const float *x,
                   int64_t n, int64_t ld, struct k3_err *err);
/* Local. Every dataset of `sample` has all its rows on this rank. */
int k3_h5_dump_sample_done(struct k3_h5_dump *w, int64_t sample, struct k3_err *err);

/* Collective. Writes every whole chunk that the completed samples fill, then
 * fsyncs and records in the journal the samples that are now entirely on
 * disk. Returns 0 or -1 (a write failed: disk full, I/O error) with err, the
 * same on every rank; the journal is not advanced, so the file stays
 * resumable. */
int k3_h5_dump_flush(struct k3_h5_dump *w, struct k3_err *err);

/* Collective. Every sample must be done. Writes the last partial chunk, marks
 * the file complete, closes it and removes the journal. */
int k3_h5_dump_finish(struct k3_h5_dump *w, struct k3_err *err);

/* Counters for the progress line (this rank's view of the whole job). */
struct k3_h5_dump_stats {
    int64_t samples_committed, tokens_written;
    int64_t bytes_written;         /* hidden-state bytes written by all ranks so far */
    int64_t direct_chunks;         /* this rank: whole chunks written with O_DIRECT */
    int64_t plain_writes;          /* this rank: other raw writes (partial chunks, no O_DIRECT) */
};
void k3_h5_dump_stats(const struct k3_h5_dump *w, struct k3_h5_dump_stats *st);

/* Closes without finishing (after an error): the file stays resumable. */
void k3_h5_dump_free(struct k3_h5_dump *w);

#endif
