/* commands.c - the subcommand table and dispatch of `k3`.
 *
 * Subcommands that are not built yet are listed with what they will do, so
 * `k3 --help` shows the whole tool; running one says so and exits 1. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/deploy_load.h"
#include "core/log.h"
#include "mpi/bootstrap.h"

#define K3_VERSION "0.1.0"
#define JOB_OPTS "model config set tp adp comm backend threads log-level"

const struct k3_cmd k3_cmds[] = {
    {"serve", "Serve the OpenAI and Anthropic HTTP APIs (rank 0) with every rank running the "
     "forward pass.", JOB_OPTS " host port api-key tokenizer", k3_cmd_serve, 1, NULL},
    {"generate", "Generate completions for a JSONL file of requests through the serving loop.",
     JOB_OPTS " input out", k3_cmd_generate, 1, NULL},
    {"logits", "Run one forward pass over a prompt and write the logits.",
     JOB_OPTS " ids out decode-from dump", k3_cmd_logits, 1, NULL},
    {"dump", "Write hidden states of chosen layers to HDF5 for drafter training.",
     JOB_OPTS " input out layers final generate temperature max-tokens seed dtype", k3_cmd_dump, 1, NULL},
    {"gen-weights", "Write a synthetic checkpoint in the published format for a model config.",
     "model-config out seed shard-bytes layers tokenizer", k3_cmd_gen_weights, 0, NULL},
    {"inspect", "Print a checkpoint's (or a config's) architecture, parameters and bytes.",
     "model model-config json", k3_cmd_inspect, 0, NULL},
    {"tokenize", "Tokenize text with the Kimi tokenizer and print the ids.",
     "model tokenizer text file decode special threads json", k3_cmd_tokenize, 0, NULL},
    {"render", "Render a chat request (JSON) to the K3 prompt and its tokens.",
     "model tokenizer request input json", k3_cmd_render, 0, NULL},
    {"plan", "Plan a deployment: memory per rank, cache capacity, layout.",
     JOB_OPTS " model-config json", NULL, 0, "the deployment planner"},
    {"bench", "Benchmark kernels and communication with correctness checks.",
     JOB_OPTS " json", NULL, 1, "the benchmarks"},
    {"config", "Print the effective deployment configuration (file, then flags) and the job's "
     "topology; with --schema, the schema of every key.",
     JOB_OPTS " host port api-key layers schema", k3_cmd_config, 1, NULL},
};
const int k3_n_cmds = (int)(sizeof k3_cmds / sizeof k3_cmds[0]);

void k3_cli_usage(FILE *f)
{
    fprintf(f, "k3 %s - inference engine for Kimi K3 and Kimi Linear\n\n"
               "usage: k3 <command> [options]      (under mpirun for job commands)\n\n"
               "commands:\n", K3_VERSION);
    for (int i = 0; i < k3_n_cmds; i++) {
        const struct k3_cmd *c = &k3_cmds[i];
        const char *dot = strchr(c->summary, '.');
        int len = dot ? (int)(dot - c->summary) : (int)strlen(c->summary);
        fprintf(f, "  %-12s %.*s%s\n", c->name, len, c->summary, c->run ? "" : " (not built yet)");
    }
    fprintf(f, "\n`k3 <command> --help` lists a command's options. Exit codes: 0 ok, "
               "1 failed, 2 bad usage or configuration.\n");
}

static void log_deploy(const struct k3_deploy *d)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return;
    k3_deploy_print(d, m);
    fclose(m);
    K3_INFO("effective deployment configuration:");
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) K3_INFO("  %s", line);
    free(buf);
}

int k3_cli_load_deploy(struct k3_cli *cli, int log_it)
{
    struct k3_deploy *d = &cli->deploy;
    struct k3_err err;
    const char *name = cli->args.cmd->name;
    int root = !cli->job || cli->job->rank == 0;
    k3_deploy_defaults(d);
    const char *path = k3_arg(&cli->args, "config");
    if (path) {
        char *text = NULL;
        if (cli->job) {
            text = k3_job_bcast_file(cli->job, path, err.msg, (int)sizeof err.msg);
        } else {
            FILE *f = fopen(path, "rb");
            if (f) {
                size_t cap = 1 << 16, n = 0;
                text = malloc(cap);
                size_t got;
                while (text && (got = fread(text + n, 1, cap - n - 1, f)) > 0) {
                    n += got;
                    if (n + 1 == cap) text = realloc(text, cap *= 2);
                }
                if (text) text[n] = 0;
                if (ferror(f)) {
                    free(text);
                    text = NULL;
                }
                fclose(f);
            }
            if (!text) snprintf(err.msg, sizeof err.msg, "cannot read %s", path);
        }
        if (!text) {
            if (root) fprintf(stderr, "k3 %s: %s\n", name, err.msg);
            return K3_EXIT_USAGE;
        }
        int rc = k3_deploy_parse(d, text, path, &err);
        free(text);
        if (rc) {
            if (root) fprintf(stderr, "k3 %s: %s\n", name, err.msg);
            return K3_EXIT_USAGE;
        }
    }
    /* Flags that name a key, in table order, then --set in command-line order. */
    for (int i = 0; i < k3_n_opts; i++) {
        const struct k3_opt *o = &k3_opts[i];
        if (!o->deploy_key || !cli->args.values[i]) continue;
        if (k3_deploy_set(d, k3_deploy_key_find(o->deploy_key), cli->args.values[i], &err)) {
            if (root) fprintf(stderr, "k3 %s: --%s: %s\n", name, o->name, err.msg);
            return K3_EXIT_USAGE;
        }
    }
    for (int i = 0; i < cli->args.n_sets; i++) {
        if (k3_deploy_override(d, cli->args.sets[i], &err)) {
            if (root) fprintf(stderr, "k3 %s: %s\n", name, err.msg);
            return K3_EXIT_USAGE;
        }
    }
    if (k3_deploy_finish(d, &err)) {
        if (root) fprintf(stderr, "k3 %s: %s%s%s\n", name, path ? path : "", path ? ": " : "",
                          err.msg);
        return K3_EXIT_USAGE;
    }
    enum k3_log_level level = K3_LOG_INFO;
    k3_log_level_parse(d->log.level, &level);
    k3_log_set_level(level, d->log.all_ranks);
    if (root && log_it) log_deploy(d);
    return 0;
}

static const struct k3_cmd *find_cmd(const char *name)
{
    for (int i = 0; i < k3_n_cmds; i++)
        if (!strcmp(k3_cmds[i].name, name)) return &k3_cmds[i];
    return NULL;
}

int k3_main(int argc, char **argv)
{
    K3_CHECK(k3_n_opts <= (int)(sizeof ((struct k3_args *)0)->values / sizeof(char *)),
             "k3_args.values is too small for %d options", k3_n_opts);
    if (argc < 2) {
        k3_cli_usage(stderr);
        return K3_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        if (argc > 2 && find_cmd(argv[2])) {
            k3_cmd_usage(find_cmd(argv[2]), stdout);
            return K3_EXIT_OK;
        }
        k3_cli_usage(stdout);
        return K3_EXIT_OK;
    }
    if (!strcmp(name, "--version")) {
        printf("k3 %s\n", K3_VERSION);
        return K3_EXIT_OK;
    }
    const struct k3_cmd *cmd = find_cmd(name);
    if (!cmd) {
        fprintf(stderr, "k3: unknown command '%s' (see k3 --help)\n", name);
        return K3_EXIT_USAGE;
    }
    struct k3_cli *cli = calloc(1, sizeof *cli);
    K3_CHECK(cli, "out of memory");
    if (k3_args_parse(&cli->args, cmd, argc - 2, argv + 2)) {
        free(cli);
        return K3_EXIT_USAGE;
    }
    if (k3_arg_flag(&cli->args, "help")) {
        k3_cmd_usage(cmd, stdout);
        free(cli);
        return K3_EXIT_OK;
    }
    if (!cmd->run) {
        fprintf(stderr, "k3 %s: not built yet in k3 %s (it comes with %s)\n", cmd->name,
                K3_VERSION, cmd->later);
        free(cli);
        return K3_EXIT_FAIL;
    }
    struct k3_job job;
    if (cmd->uses_mpi) {
        k3_job_init(&job, &argc, &argv);
        cli->job = &job;
    }
    int rc = cmd->run(cli);
    free(cli);
    if (cmd->uses_mpi) k3_job_exit(&job, rc);
    return rc;
}
