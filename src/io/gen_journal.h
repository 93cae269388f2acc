/* gen_journal.h - the replies `k3 dump --generate` regenerated, kept next to
 * the dump (OUT.gen) so that a killed run does not generate them again and a
 * resumed dump sees exactly the tokens the first run produced. A text file,
 * appended and fsync'd in batches (about once a second while generating):
 *
 *   k3-dump-gen 1
 *   identity <16 hex digits>        hash of everything the replies depend on
 *   reply <sample> <turn> <seed> <finish> <n> <id> ... <id>
 *   ...
 *   complete <samples>              every reply of every sample is above
 *
 * <finish> is the scheduler's finish name (stop, length). A line torn by a
 * kill (no trailing newline) is ignored and its reply generated again. The
 * file stays after the dump is finished: it is the record of what was
 * generated (small: the dump itself holds 2 x hidden bytes per token per
 * layer), and a re-run of a finished command needs it to skip generation.
 * Only rank 0 touches it. */
#ifndef K3_IO_GEN_JOURNAL_H
#define K3_IO_GEN_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

struct k3_gen_reply {
    int64_t sample;
    int turn;
    uint64_t seed;
    char finish[16];
    int32_t *ids;
    int n;
};

struct k3_gen_journal {
    char *path;
    int fd;                      /* open for appending after k3_gen_journal_open */
    int no_fsync;
    struct k3_gen_reply *r;      /* what the file held when opened, then what was appended */
    int64_t n, cap;
    int64_t *slot;               /* lookup by (sample, turn): index + 1 into r, 0 = empty */
    int64_t n_slots;             /* 2 x cap, a power of two */
    int complete;                /* the file says every reply is in it */
    char *pending;               /* appended lines not yet written */
    size_t n_pending, cap_pending;
};

/* Opens PATH: reads the replies of a file with this identity, creates the
 * file when it is missing. A file with another identity is refused (it holds
 * replies of another input, model, sampling or layout). */
int k3_gen_journal_open(struct k3_gen_journal *j, const char *path, uint64_t identity, int no_fsync,
                        struct k3_err *err);
void k3_gen_journal_free(struct k3_gen_journal *j);

/* The reply of (sample, turn) read from the file or added since, or NULL. */
const struct k3_gen_reply *k3_gen_journal_find(const struct k3_gen_journal *j, int64_t sample, int turn);
/* Records a reply (the ids are copied); written at the next sync. */
void k3_gen_journal_add(struct k3_gen_journal *j, int64_t sample, int turn, uint64_t seed, const char *finish,
                        const int32_t *ids, int n);
/* Writes what was added and fsyncs. */
int k3_gen_journal_sync(struct k3_gen_journal *j, struct k3_err *err);
/* Appends "complete N" and syncs. */
int k3_gen_journal_complete(struct k3_gen_journal *j, int64_t n_samples, struct k3_err *err);

#endif
