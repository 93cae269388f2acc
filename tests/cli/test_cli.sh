#!/usr/bin/env bash
# test_cli.sh K3 - the `k3` command line: help, unknown commands and options,
# exit codes, subcommands not built yet, flag overrides of deployment keys.
set -u
K3=$1
. "$(dirname "$0")/harness.sh"

# expect_run CODE PATTERN ARGS... : run k3 ARGS, check the exit code and that
# stdout+stderr contains PATTERN (a fixed string).
expect_run() {
    local code=$1 pattern=$2; shift 2
    local out rc
    out=$("$K3" "$@" 2>&1); rc=$?
    check "k3 $* -> exit $code" "$rc" "$code"
    check_contains "k3 $* -> '$pattern'" "$out" "$pattern"
}

expect_run 0 "usage: k3 <command>" --help
expect_run 0 "usage: k3 <command>" -h
expect_run 0 "usage: k3 <command>" help
expect_run 0 "usage: k3 serve" help serve
expect_run 2 "usage: k3 <command>"
expect_run 0 "k3 0." --version
expect_run 2 "k3: unknown command 'frobnicate' (see k3 --help)" frobnicate
expect_run 2 "k3: unknown command '--tp'" --tp 2

# every command has help that lists its options, and --help never starts a job
for cmd in serve generate logits dump gen-weights inspect tokenize render plan bench config; do
    expect_run 0 "usage: k3 $cmd [options]" "$cmd" --help
    expect_run 0 "--help" "$cmd" -h
done
expect_run 0 "--model DIR" serve --help
expect_run 0 "--tp N" serve --help
expect_run 0 "[parallel.tp]" serve --help

# unknown and malformed options: exit 2 and a message naming the command
expect_run 2 "k3 config: unknown option '--bogus' (see k3 config --help)" config --bogus
expect_run 2 "k3 config: unknown option '--out'" config --out x
expect_run 2 "k3 config: option '--tp' needs a value (N)" config --tp
expect_run 2 "k3 config: option '--tp' given twice" config --tp 1 --tp 2
expect_run 2 "k3 config: unexpected argument 'extra'" config extra
expect_run 2 "k3 config: option '--schema' takes no value" config --schema=yes
expect_run 2 "--tp: parallel.tp must be an integer, not 'two'" config --tp two
expect_run 2 "--port: server.port = 99999 is out of range" config --port 99999
expect_run 2 "did you mean 'server.port'" config --set server.prot=1
expect_run 2 "--set wants KEY=VALUE" config --set server.port

# flags override the file, --set overrides flags, both in the printed config
expect_run 0 "tp = 1;" config --config "$ROOT/configs/deploy/tiny.cfg"
expect_run 0 "adp = 3;" config --config "$ROOT/configs/deploy/tiny.cfg" --adp 3
expect_run 0 "port = 9001;" config --config "$ROOT/configs/deploy/tiny.cfg" --port 9000 --set server.port=9001
expect_run 0 "host = \"127.0.0.1\";" config
expect_run 0 "# api_key is set (not shown)" config --api-key s3cret
out=$("$K3" config --api-key s3cret 2>&1)
check "the API key is never printed" "$(grep -c s3cret <<<"$out")" 0
expect_run 0 "layers = [7, 23];" config --layers 7,23
expect_run 0 "level = \"debug\";" config --log-level debug
expect_run 2 "log.level must be one of error|warn|info|debug" config --log-level loud

# commands that are not built yet say so and fail
for cmd in serve generate logits dump gen-weights inspect tokenize render plan bench; do
    out=$("$K3" "$cmd" 2>&1); rc=$?
    if grep -q "not built yet" <<<"$out"; then
        check "k3 $cmd (not built) -> exit 1" "$rc" 1
    fi
done

summary
