/* deploy_load.h - reads a libconfig deployment file into struct k3_deploy and
 * applies command-line overrides. Rank 0 reads the file and broadcasts its
 * bytes; every rank parses the same text and reaches the same verdict. */
#ifndef K3_CLI_DEPLOY_LOAD_H
#define K3_CLI_DEPLOY_LOAD_H

#include "core/deploy.h"
#include "core/err.h"

/* Parses libconfig text (name is the file name used in messages) over the
 * values already in d: unknown keys, wrong types and bad values are errors
 * naming the key, the file and the line. */
int k3_deploy_parse(struct k3_deploy *d, const char *text, const char *name,
                    struct k3_err *err);

/* Applies "key=value" (from --set). */
int k3_deploy_override(struct k3_deploy *d, const char *assignment, struct k3_err *err);

/* Final step after all overrides: cross-key rules, then the API key from
 * server.api_key_env if that is set. */
int k3_deploy_finish(struct k3_deploy *d, struct k3_err *err);

#endif
