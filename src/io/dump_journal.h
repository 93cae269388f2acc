/* dump_journal.h - the dump's journal: a small append-only text file next to
 * the HDF5 file (PATH.journal) that says how far a dump got, fsync'd after
 * every line, read back on a re-run.
 *
 *   k3-dump-journal 1
 *   identity <16 hex digits>       hash of everything a resume must match
 *   created                        the HDF5 file and its metadata are on disk
 *   committed <samples> <tokens>   that many samples are entirely written
 *   committed ...                  (the last complete line wins)
 *
 * A line torn by a kill (no trailing newline) is ignored. Only rank 0 reads
 * or writes it. */
#ifndef K3_IO_DUMP_JOURNAL_H
#define K3_IO_DUMP_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

struct k3_dump_journal_state {
    int exists;            /* the file is there and starts with the header */
    uint64_t identity;
    int created;
    int64_t n_samples, n_tokens;   /* last committed line (0, 0 if none) */
};

/* 64-bit FNV-1a, the identity hash (not cryptographic: it only tells two
 * commands apart). */
uint64_t k3_fnv1a64(const void *data, size_t n, uint64_t h);
#define K3_FNV1A64_INIT 0xcbf29ce484222325ull

/* Reads PATH. A missing file gives exists = 0 and returns 0; a file that is
 * not a journal returns -1 with err. */
int k3_dump_journal_read(const char *path, struct k3_dump_journal_state *st, struct k3_err *err);
/* Creates (truncates) PATH with the header and identity, fsync'd (file and
 * directory unless no_fsync). */
int k3_dump_journal_begin(const char *path, uint64_t identity, int no_fsync, struct k3_err *err);
/* Appends one line ("created", "committed S N") and fsyncs. */
int k3_dump_journal_append(const char *path, const char *line, int no_fsync, struct k3_err *err);

#endif
