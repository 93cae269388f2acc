#!/usr/bin/env bash
# test_deploy_files.sh K3 - every shipped deployment file loads; every broken
# file in tests/configs/bad is rejected with exit 2 and the message its first
# line expects; configs/deploy/README.md documents exactly the schema.
set -u
K3=$1
. "$(dirname "$0")/harness.sh"

n=0
for f in "$ROOT"/configs/deploy/*.cfg; do
    out=$(K3_API_KEY=test "$K3" config --config "$f" 2>&1 >/dev/null); rc=$?
    check "shipped $(basename "$f") loads" "$rc" 0
    n=$((n + 1))
done
check "some shipped configs exist" "$([ $n -ge 3 ] && echo yes)" yes

n=0
for f in "$ROOT"/tests/configs/bad/*.cfg; do
    want=$(sed -n '1s/^# expect: //p' "$f")
    out=$("$K3" config --config "$f" 2>&1 >/dev/null); rc=$?
    check "bad $(basename "$f") -> exit 2" "$rc" 2
    check_contains "bad $(basename "$f") message" "$out" "$want"
    n=$((n + 1))
done
check "at least a dozen broken files" "$([ $n -ge 12 ] && echo yes)" yes

out=$("$K3" config --config "$ROOT/no/such/file.cfg" 2>&1); rc=$?
check "missing file -> exit 2" "$rc" 2
check_contains "missing file message" "$out" "cannot read $ROOT/no/such/file.cfg: No such file or directory"
out=$("$K3" config --config "$ROOT/configs" 2>&1); rc=$?
check "directory -> exit 2" "$rc" 2
check_contains "directory message" "$out" "not a regular file"
tmp=$(mktemp); printf 'server = { port = 1; };\n' > "$tmp"; chmod 000 "$tmp"
if [ "$(id -u)" != 0 ]; then
    out=$("$K3" config --config "$tmp" 2>&1); rc=$?
    check "unreadable file -> exit 2" "$rc" 2
    check_contains "unreadable message" "$out" "Permission denied"
fi
rm -f "$tmp"

# the printed effective configuration is itself a valid config file
tmp=$(mktemp)
"$K3" config --config "$ROOT/configs/deploy/k3-gb300-2x4.cfg" --set server.api_key_env= >"$tmp" 2>/dev/null
check "printing a config works" "$?" 0
a=$("$K3" config --config "$tmp" 2>/dev/null)
b=$(cat "$tmp")
check "printed config reads back identically" "$a" "$b"
rm -f "$tmp"

# the schema document is generated from the schema table and kept in sync
schema=$("$K3" config --schema 2>/dev/null)
doc=$(sed -n '/^| key | type/,/^$/p' "$ROOT/configs/deploy/README.md" | sed '/^$/d')
check "configs/deploy/README.md table == k3 config --schema (regenerate it)" "$doc" "$schema"

summary
