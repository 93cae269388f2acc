/* deploy.h - the deployment configuration: how a job is laid out and limited.
 *
 * One table (k3_deploy_schema in deploy.c) describes every key: its dotted name
 * ("server.port"), type, default, bounds and meaning. The libconfig loader
 * (src/cli/deploy_load.c), the command-line overrides, the printer and the
 * schema document (configs/deploy/README.md, checked by a test) all walk that
 * table, so a key is added in exactly one place.
 *
 * This file has no dependency: it knows values as strings and typed fields,
 * not libconfig. Model facts (layers, widths) are not here: they come from the
 * checkpoint's config.json. */
#ifndef K3_CORE_DEPLOY_H
#define K3_CORE_DEPLOY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define K3_DEPLOY_MAX_LAYERS 64

struct k3_deploy {
    struct {
        int tp;          /* ranks per attention group */
        int adp;         /* attention-data-parallel groups; world = tp * adp */
        char comm[8];    /* auto | mpi | nccl */
    } parallel;
    struct {
        char kind[8];    /* cpu | cuda */
        int threads;     /* CPU worker threads per rank; 0 = all cores of the rank */
        double memory_fraction; /* share of device memory k3 may take */
    } backend;
    struct {
        char path[1024]; /* checkpoint directory; --model overrides */
    } model;
    struct {
        int block_tokens;         /* tokens per paged MLA block */
        int64_t kv_bytes;         /* bytes for MLA blocks per rank; 0 = what memory allows */
        int kda_slots;            /* KDA state slots per attention group; 0 = derive */
        int kda_snapshot_interval;/* prefix-cache KDA snapshot every N blocks */
        int prefix_cache;         /* bool */
    } cache;
    struct {
        int max_batch_tokens;     /* new tokens per step per attention group */
        int max_seqs;             /* running sequences per attention group */
        int prefill_chunk_tokens; /* largest prefill chunk of one sequence in a step */
        int max_queue;            /* queued requests before 429/503 */
        int context_tokens;       /* prompt + completion limit; 0 = the model's */
    } scheduler;
    struct {
        char host[256];
        int port;
        char api_key[256];        /* empty = no key; never printed */
        char api_key_env[64];     /* read the key from this environment variable */
        char served_model_name[128];
        int64_t max_body_bytes;
        int64_t tokenizer_cache_bytes; /* k3_tok_chunk_budget */
        int max_connections;
        int request_timeout_s;
        char sampling_policy[8];  /* auto | kimi | open */
        int shutdown_grace_s;     /* in-flight requests get this long after SIGTERM */
    } server;
    struct {
        int n_layers;
        int layers[K3_DEPLOY_MAX_LAYERS]; /* 0-based decoder layers to capture */
        int final_state;          /* bool: also the post-norm final hidden state */
        int chunk_tokens;         /* HDF5 chunk length along the token axis */
        int compression;          /* gzip level 0-9 */
    } dump;
    struct {
        char level[8];            /* error | warn | info | debug */
        int all_ranks;            /* bool: info/debug from every rank, not only rank 0 */
    } log;
    struct {
        int timeout_s;            /* a collective or device wait longer than this aborts the job */
    } watchdog;
};

enum k3_cfg_type {
    K3_CFG_INT,
    K3_CFG_BYTES,  /* integer bytes, or a string with a K/M/G/T(i)B suffix */
    K3_CFG_FLOAT,
    K3_CFG_BOOL,
    K3_CFG_STRING,
    K3_CFG_ENUM,   /* a string from `choices` ("a|b|c") */
    K3_CFG_INT_LIST,
};

struct k3_cfg_key {
    const char *key;      /* "section.name" */
    enum k3_cfg_type type;
    size_t offset;        /* into struct k3_deploy */
    size_t size;          /* bytes of the field (strings: capacity) */
    const char *def;      /* default, in the same syntax as a --set value */
    double min, max;      /* numeric bounds (ignored for strings) */
    const char *choices;  /* K3_CFG_ENUM */
    const char *flag;     /* the command-line flag that overrides it, or NULL */
    const char *meaning;
    int secret;           /* never printed */
};

extern const struct k3_cfg_key k3_deploy_schema[];
extern const int k3_deploy_n_keys;

const struct k3_cfg_key *k3_deploy_key_find(const char *key);
const char *k3_cfg_type_name(enum k3_cfg_type t);

/* Fills every field with its default. */
void k3_deploy_defaults(struct k3_deploy *d);

/* Sets one key from its text form ("8", "true", "16GiB", "7,23,51").
 * The message names the key and says what was expected. */
int k3_deploy_set(struct k3_deploy *d, const struct k3_cfg_key *k, const char *text,
                  struct k3_err *err);

/* Typed setters for loaders that already know the type of the value. */
int k3_deploy_set_int(struct k3_deploy *d, const struct k3_cfg_key *k, long long v,
                      struct k3_err *err);
int k3_deploy_set_float(struct k3_deploy *d, const struct k3_cfg_key *k, double v,
                        struct k3_err *err);

/* Rules between keys (prefill chunk within the step budget, ...). */
int k3_deploy_validate(const struct k3_deploy *d, struct k3_err *err);

/* Checks the parallel layout against the job's world size. */
int k3_deploy_check_world(const struct k3_deploy *d, int world, struct k3_err *err);

/* Writes the configuration in libconfig syntax (secrets shown as "<set>"),
 * so that the output can be read back as a config file. */
void k3_deploy_print(const struct k3_deploy *d, FILE *f);

/* Writes the schema as one Markdown table. */
void k3_deploy_schema_markdown(FILE *f);

#ifdef __cplusplus
}
#endif

#endif
