/* cli.h - the `k3` command: subcommands, their options, and parsed arguments.
 *
 * All flags live in one table (args.c) so that a name means the same thing in
 * every subcommand; a subcommand lists which of them it takes. Flags that name
 * a deployment key (--tp -> parallel.tp) override the config file in
 * subcommands that read one. Exit codes: 0 success, 1 failure at run time (or
 * a subcommand not built yet), 2 bad usage or bad configuration. */
#ifndef K3_CLI_CLI_H
#define K3_CLI_CLI_H

#include "core/deploy.h"

#define K3_EXIT_OK 0
#define K3_EXIT_FAIL 1
#define K3_EXIT_USAGE 2
#define K3_MAX_SETS 64

struct k3_job;

struct k3_opt {
    const char *name;      /* without the leading "--" */
    const char *arg;       /* metavariable, or NULL for a switch */
    const char *help;
    const char *deploy_key;/* deployment key this flag overrides, or NULL */
};

struct k3_args {
    const struct k3_cmd *cmd;
    const char *values[64];   /* by index into k3_opts; switches get "1" */
    const char *sets[K3_MAX_SETS];
    int n_sets;
};

struct k3_cli {
    struct k3_args args;
    struct k3_deploy deploy;  /* effective configuration (commands with --config) */
    struct k3_job *job;       /* NULL for commands that do not start MPI */
};

struct k3_cmd {
    const char *name;
    const char *summary;
    const char *opts;         /* space-separated option names it accepts */
    int (*run)(struct k3_cli *cli);  /* NULL: not built yet */
    int uses_mpi;             /* runs as an MPI job (every rank) */
    const char *later;        /* for run == NULL: what it will do */
};

extern const struct k3_opt k3_opts[];
extern const int k3_n_opts;
extern const struct k3_cmd k3_cmds[];
extern const int k3_n_cmds;

/* Parses argv after the subcommand name. On error prints a message that
 * names the command and returns -1. */
int k3_args_parse(struct k3_args *a, const struct k3_cmd *cmd, int argc, char **argv);
const char *k3_arg(const struct k3_args *a, const char *name);
int k3_arg_flag(const struct k3_args *a, const char *name);
/* Integer option with bounds; prints a usage error and returns -1 if bad. */
int k3_arg_int(const struct k3_args *a, const char *name, long long def, long long min,
               long long max, long long *out);

void k3_cli_usage(FILE *f);
void k3_cmd_usage(const struct k3_cmd *cmd, FILE *f);

/* Builds cli->deploy: defaults, --config file (read by rank 0, parsed by all),
 * mapped flags and --set, then validation; rank 0 logs the result if log_it.
 * Returns 0 or an exit code. */
int k3_cli_load_deploy(struct k3_cli *cli, int log_it);

int k3_main(int argc, char **argv);

/* Subcommands built so far. */
int k3_cmd_config(struct k3_cli *cli);
int k3_cmd_tokenize(struct k3_cli *cli);
int k3_cmd_render(struct k3_cli *cli);
int k3_cmd_gen_weights(struct k3_cli *cli);
int k3_cmd_inspect(struct k3_cli *cli);
int k3_cmd_logits(struct k3_cli *cli);
int k3_cmd_dump(struct k3_cli *cli);
int k3_cmd_generate(struct k3_cli *cli);
int k3_cmd_serve(struct k3_cli *cli);

#endif
