#!/bin/bash
# test_cli_tokenize.sh - `k3 tokenize`: encode (plain and --special), --file and stdin,
# --decode (round trip, U+FFFD for a lone byte), --json, --model, exit codes.
# usage: test_cli_tokenize.sh K3 TIKTOKEN_MODEL TOKENIZER_CONFIG
source "$(dirname "$0")/../cli/harness.sh"
K3=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# A tokenizer directory and a "checkpoint" directory, made of links to the shared data.
mkdir -p "$TMP/tok" "$TMP/ckpt"
ln -s "$2" "$TMP/tok/tiktoken.model"; ln -s "$3" "$TMP/tok/tokenizer_config.json"
ln -s "$2" "$TMP/ckpt/tiktoken.model"; ln -s "$3" "$TMP/ckpt/tokenizer_config.json"

check "plain" "$("$K3" tokenize --tokenizer "$TMP/tok" --text 'Hello World <|open|>')" \
      "[19180, 6949, 22652, 4454, 91, 29]"
check "special" "$("$K3" tokenize --tokenizer "$TMP/tok" --special --text 'Hello World <|open|>')" \
      "[19180, 6949, 220, 163587]"
check "json" "$("$K3" tokenize --model "$TMP/ckpt" --json --text 'Hello World')" \
      '{"n_tokens": 2, "ids": [19180, 6949]}'
check "empty" "$("$K3" tokenize --tokenizer "$TMP/tok" --text '')" "[]"
printf '中文abc漢字\n  x' > "$TMP/in.txt"
IDS=$("$K3" tokenize --tokenizer "$TMP/tok" --file "$TMP/in.txt")
check "stdin = file" "$("$K3" tokenize --tokenizer "$TMP/tok" < "$TMP/in.txt")" "$IDS"
check "threads" "$("$K3" tokenize --tokenizer "$TMP/tok" --threads 2 --file - < "$TMP/in.txt")" "$IDS"
echo "$IDS" | "$K3" tokenize --tokenizer "$TMP/tok" --decode > "$TMP/out.txt"
check "round trip" "$(cmp "$TMP/in.txt" "$TMP/out.txt" && echo same)" "same"
check "decode json" "$(echo '[19180, 163587, 198]' | "$K3" tokenize --tokenizer "$TMP/tok" --decode --json)" \
      '{"text": "Hello<|open|>\n"}'
# Token 157 is the single byte 0xE1 (GPT-2 byte order): alone it is not UTF-8 -> U+FFFD.
check "lone byte" "$(echo '[19180, 157]' | "$K3" tokenize --tokenizer "$TMP/tok" --decode | od -An -tx1 | tr -d ' \n')" \
      "48656c6c6fefbfbd"

"$K3" tokenize --text x > /dev/null 2>"$TMP/err"; check "no tokenizer: exit" "$?" "2"
check_contains "no tokenizer: message" "$(cat "$TMP/err")" "--tokenizer DIR"
"$K3" tokenize --tokenizer "$TMP/tok" --text x --file "$TMP/in.txt" > /dev/null 2>&1
check "text and file: exit" "$?" "2"
"$K3" tokenize --tokenizer "$TMP/tok" --file "$TMP/missing" > /dev/null 2>&1; check "missing input: exit" "$?" "2"
"$K3" tokenize --tokenizer "$TMP/nothere" --text x > /dev/null 2>"$TMP/err"; check "missing tokenizer: exit" "$?" "1"
check_contains "missing tokenizer: message" "$(cat "$TMP/err")" "tiktoken.model"
echo '[1, 163840]' | "$K3" tokenize --tokenizer "$TMP/tok" --decode > /dev/null 2>"$TMP/err"
check "bad id: exit" "$?" "1"
check_contains "bad id: message" "$(cat "$TMP/err")" "out of range"
echo 'hello' | "$K3" tokenize --tokenizer "$TMP/tok" --decode > /dev/null 2>&1; check "bad ids: exit" "$?" "1"
summary
