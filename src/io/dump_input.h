/* dump_input.h - the input of `k3 dump`: a JSONL file, one sample per line,
 *
 *   {"id": "a1", "prompt_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}   loss_mask optional (default all 1)
 *   {"id": 7, "messages": [{"role": "user", "content": "..."}, ...], "tools": [...]}
 *
 * plus, for `k3 dump --generate`, "stop_token_ids": [...] (ids that end a
 * reply besides the model's end of message, at most K3_DUMP_MAX_STOP_IDS),
 * read and checked whole before anything runs, so a bad line stops the job
 * before any output is written, with its line number. Token ids of
 * prompt_ids lines are final here; messages lines keep their JSON for the
 * chat renderer (frontend), which the caller runs. */
#ifndef K3_IO_DUMP_INPUT_H
#define K3_IO_DUMP_INPUT_H

#include <jansson.h>
#include <stdint.h>

#include "core/err.h"

#define K3_DUMP_MAX_STOP_IDS 6

struct k3_dump_sample {
    char id[128];            /* the line's "id" as text ("" if absent) */
    int64_t line;            /* 1-based line in the file */
    int32_t *ids;            /* prompt_ids lines: [n] */
    uint8_t *mask;           /* [n] */
    int has_mask;            /* the line gave loss_mask */
    int32_t stop_ids[K3_DUMP_MAX_STOP_IDS];   /* the line's stop_token_ids */
    int n_stop_ids;
    int64_t n;
    json_t *request;         /* messages lines: the line without "id" (a chat request) */
};

struct k3_dump_input {
    struct k3_dump_sample *s;
    int64_t n;
    int n_messages;          /* how many samples are messages lines */
    uint64_t hash;           /* FNV-1a 64 of the file's bytes */
};

/* Reads and checks PATH. vocab_size > 0: ids must be below it. */
int k3_dump_input_read(const char *path, int64_t vocab_size, struct k3_dump_input *in, struct k3_err *err);
void k3_dump_input_free(struct k3_dump_input *in);

#endif
