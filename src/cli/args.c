/* args.c - the flag table and the parser. Flags are GNU style: `--name value`
 * or `--name=value`; switches take no value; `-h` is `--help`. */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct k3_opt k3_opts[] = {
    {"help", NULL, "show this help and exit", NULL},
    {"model", "DIR", "checkpoint directory (config.json, index, shards, tokenizer)", "model.path"},
    {"config", "FILE", "deployment configuration (libconfig; see configs/deploy/README.md)", NULL},
    {"set", "KEY=VALUE", "override one deployment key (repeatable), e.g. --set server.port=9000", NULL},
    {"out", "PATH", "output file or directory", NULL},
    {"tp", "N", "ranks per attention group (tensor parallel)", "parallel.tp"},
    {"adp", "M", "attention-data-parallel groups (world = tp * adp)", "parallel.adp"},
    {"comm", "KIND", "activation communicator: mpi, nccl or auto", "parallel.comm"},
    {"backend", "KIND", "cpu or cuda", "backend.kind"},
    {"threads", "N", "CPU threads per rank (0 = all available)", "backend.threads"},
    {"host", "ADDR", "HTTP bind address (default 127.0.0.1)", "server.host"},
    {"port", "N", "HTTP port", "server.port"},
    {"api-key", "KEY", "require this API key from clients", "server.api_key"},
    {"log-level", "LEVEL", "error, warn, info or debug", "log.level"},
    {"layers", "LIST", "layers: dump: 0-based list such as 7,23,51; gen-weights: range A-B", "dump.layers"},
    {"model-config", "FILE", "a model config.json without weights", NULL},
    {"seed", "N", "random seed (dump --generate: request (sample i, turn k) is seeded from N, i and k)", NULL},
    {"shard-bytes", "B", "largest safetensors shard to write", NULL},
    {"tokenizer", "DIR", "directory with tiktoken.model and tokenizer_config.json", NULL},
    {"input", "FILE", "input file (JSONL conversations or token ids)", NULL},
    {"request", "FILE", "render: a chat-completions request body (JSON; '-' = standard input)", NULL},
    {"final", NULL, "also dump the final hidden state", NULL},
    {"generate", NULL, "dump: first regenerate every assistant turn with the model, in order, each on the "
                       "regenerated history (prompt_ids: append a continuation); loss mask = the generated "
                       "tokens; resumable through OUT.gen (src/io/README.md)", NULL},
    {"temperature", "T", "dump --generate: sampling temperature (0 = greedy; default K3's: 1.0 thinking, 0.6 "
                         "instant, top_p 0.95)", NULL},
    {"text", "TEXT", "input text", NULL},
    {"prompt", "TEXT", "prompt text", NULL},
    {"max-tokens", "N", "tokens to generate (dump --generate: per reply, default 4096; a reply cut here ends "
                        "its conversation)", NULL},
    {"schema", NULL, "print the deployment schema as a Markdown table", NULL},
    {"json", NULL, "machine-readable JSON output", NULL},
    {"file", "FILE", "read the input from FILE ('-' = standard input)", NULL},
    {"decode", NULL, "tokenize: the input is token ids (a JSON array); print their text", NULL},
    {"special", NULL, "tokenize: special-token text such as <|open|> becomes its control token", NULL},
    {"ids", "LIST", "token ids, comma-separated, e.g. 1,2,3", NULL},
    {"decode-from", "N", "logits: prefill ids[0:N], then decode the rest one token at a time", NULL},
    {"dump", "NAMES", "logits: write these intermediates (comma-separated, or all) as OUT.NAME.npy", NULL},
    {"dtype", "TYPE", "dump: bfloat16 (default, stored as uint16) or float32", NULL},
};
const int k3_n_opts = (int)(sizeof k3_opts / sizeof k3_opts[0]);

static int opt_index(const char *name, size_t len)
{
    for (int i = 0; i < k3_n_opts; i++)
        if (strlen(k3_opts[i].name) == len && strncmp(k3_opts[i].name, name, len) == 0) return i;
    return -1;
}

static int cmd_takes(const struct k3_cmd *cmd, const char *name)
{
    if (!strcmp(name, "help")) return 1;
    size_t n = strlen(name);
    for (const char *p = cmd->opts; p && *p;) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!end) break;
        p = end;
    }
    return 0;
}

int k3_args_parse(struct k3_args *a, const struct k3_cmd *cmd, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h")) s = "--help";
        if (strncmp(s, "--", 2) != 0 || !s[2]) {
            fprintf(stderr, "k3 %s: unexpected argument '%s' (options start with --; see "
                            "k3 %s --help)\n", cmd->name, s, cmd->name);
            return -1;
        }
        const char *name = s + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int idx = opt_index(name, len);
        if (idx < 0 || !cmd_takes(cmd, k3_opts[idx].name)) {
            fprintf(stderr, "k3 %s: unknown option '--%.*s' (see k3 %s --help)\n", cmd->name,
                    (int)len, name, cmd->name);
            return -1;
        }
        const struct k3_opt *o = &k3_opts[idx];
        const char *value = "1";
        if (o->arg) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else {
                fprintf(stderr, "k3 %s: option '--%s' needs a value (%s)\n", cmd->name, o->name,
                        o->arg);
                return -1;
            }
        } else if (eq) {
            fprintf(stderr, "k3 %s: option '--%s' takes no value\n", cmd->name, o->name);
            return -1;
        }
        if (!strcmp(o->name, "set")) {
            if (a->n_sets == K3_MAX_SETS) {
                fprintf(stderr, "k3 %s: too many --set options\n", cmd->name);
                return -1;
            }
            a->sets[a->n_sets++] = value;
            continue;
        }
        if (a->values[idx] && strcmp(o->name, "help") != 0) {
            fprintf(stderr, "k3 %s: option '--%s' given twice\n", cmd->name, o->name);
            return -1;
        }
        a->values[idx] = value;
    }
    return 0;
}

const char *k3_arg(const struct k3_args *a, const char *name)
{
    int idx = opt_index(name, strlen(name));
    return idx < 0 ? NULL : a->values[idx];
}

int k3_arg_flag(const struct k3_args *a, const char *name) { return k3_arg(a, name) != NULL; }

int k3_arg_int(const struct k3_args *a, const char *name, long long def, long long min,
               long long max, long long *out)
{
    const char *v = k3_arg(a, name);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < min || x > max) {
        fprintf(stderr, "k3 %s: --%s must be an integer in [%lld, %lld], not '%s'\n",
                a->cmd->name, name, min, max, v);
        return -1;
    }
    *out = x;
    return 0;
}

void k3_cmd_usage(const struct k3_cmd *cmd, FILE *f)
{
    fprintf(f, "usage: k3 %s [options]\n\n%s\n", cmd->name, cmd->summary);
    if (!cmd->run) fprintf(f, "(not built yet: %s)\n", cmd->later);
    fprintf(f, "\noptions:\n");
    for (int i = 0; i < k3_n_opts; i++) {
        const struct k3_opt *o = &k3_opts[i];
        if (!cmd_takes(cmd, o->name)) continue;
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-22s %s", left, o->help);
        if (o->deploy_key && cmd_takes(cmd, "config")) fprintf(f, " [%s]", o->deploy_key);
        fputc('\n', f);
    }
}
