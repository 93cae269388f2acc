# harness.sh - tiny assertion helpers for the shell tests; sourced.
# Prints "N passed, N failed" at the end like the C harness.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
T_PASS=0
T_FAIL=0
check() { # name got want
    if [ "$2" == "$3" ]; then T_PASS=$((T_PASS + 1))
    else T_FAIL=$((T_FAIL + 1)); echo "FAIL: $1: got '$2', want '$3'" >&2; fi
}
check_contains() { # name haystack needle
    if [[ "$2" == *"$3"* ]]; then T_PASS=$((T_PASS + 1))
    else T_FAIL=$((T_FAIL + 1)); printf 'FAIL: %s: output does not contain the expected text\n--- output:\n%s\n---\n' "$1" "$2" >&2; fi
}
summary() {
    echo "$T_PASS passed, $T_FAIL failed"
    [ "$T_FAIL" -eq 0 ]
}
