/* json_py.h - JSON text byte-identical to Python's json.dumps, for everything that enters a
 * K3 prompt (research/frontend.md §8, frontend-k3-corrections.md B).
 *
 * jansson's own writer differs from Python on reals (0.1 -> 0.10000000000000001, 1e20 ->
 * 1e20 where Python writes 0.1 and 1e+20), so values are written here: ensure_ascii=False
 * (UTF-8 as is; only '"', '\\' and control characters escaped, \u00XX in lowercase hex),
 * Python float repr (shortest round trip, "1.0", "1e+20", "1e-07", "-0.0", NaN, Infinity),
 * ints kept as ints, and Python's separators. Keys are sorted by code point (UTF-8 byte
 * order) when asked, recursively, which is encoding_k3.py's deep_sort_dict. */
#ifndef K3_FRONTEND_JSON_PY_H
#define K3_FRONTEND_JSON_PY_H

#include <jansson.h>

#include "frontend/fe_buf.h"

enum k3_json_py_flags {
    K3_JSON_PY_COMPACT = 1,    /* separators (",", ":"); default (", ", ": ") */
    K3_JSON_PY_SORT_KEYS = 2,  /* object keys in code-point order, at every depth */
};

/* Appends the JSON text of v to out. */
void k3_json_py_dump(const json_t *v, int flags, struct k3_sbuf *out);
/* Appends s[0..len) as a JSON string literal (with quotes). */
void k3_json_py_string(const char *s, size_t len, struct k3_sbuf *out);
/* Python repr(float) of d (at most 32 bytes with the NUL). */
void k3_py_float_repr(double d, char out[32]);

#endif
