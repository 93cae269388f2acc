/* json_py.c - Python json.dumps-identical output (see json_py.h).
 *
 * Float repr: the shortest "%.Ne" that reads back to the same double (N = 1..17) gives
 * Python's digits (both are the shortest round-trip digit string; CPython uses dtoa mode 0,
 * which on ties picks the digits closest to the true value, as the %.Ne search does since
 * printf rounds correctly). Python then writes fixed notation when the decimal point
 * position is in [-3, 16], else scientific with a signed exponent of at least two digits. */
#include "frontend/json_py.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

void k3_py_float_repr(double d, char out[32])
{
    if (isnan(d)) { strcpy(out, "NaN"); return; }
    if (isinf(d)) { strcpy(out, d < 0 ? "-Infinity" : "Infinity"); return; }
    char sci[40];
    int prec = 0;
    for (prec = 0; prec < 17; prec++) {  /* %.{prec}e has prec+1 significant digits */
        snprintf(sci, sizeof sci, "%.*e", prec, d);
        if (strtod(sci, NULL) == d) break;
    }
    /* sci = [-]d[.ddd]e[+-]XX */
    const char *s = sci;
    int neg = 0;
    if (*s == '-') { neg = 1; s++; }
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;  /* %.Ne may pad with zeros (e.g. 0.0) */
    digits[nd] = 0;
    int decpt = exp10 + 1;  /* digits d1 d2 ... with the point after position decpt */
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt < -3 || decpt > 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        o += sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else if (decpt >= nd) {
        memcpy(o, digits, (size_t)nd);
        o += nd;
        for (int i = nd; i < decpt; i++) *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, (size_t)(nd - decpt));
        o += nd - decpt;
    }
    *o = 0;
}

void k3_json_py_string(const char *s, size_t len, struct k3_sbuf *out)
{
    static const char hex[] = "0123456789abcdef";
    k3_sbuf_reserve(out, len + 2);
    k3_sbuf_addc(out, '"');
    size_t run = 0;  /* start of the pending run of bytes that need no escape */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        k3_sbuf_add(out, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': k3_sbuf_add(out, "\\\"", 2); break;
        case '\\': k3_sbuf_add(out, "\\\\", 2); break;
        case '\n': k3_sbuf_add(out, "\\n", 2); break;
        case '\r': k3_sbuf_add(out, "\\r", 2); break;
        case '\t': k3_sbuf_add(out, "\\t", 2); break;
        case '\b': k3_sbuf_add(out, "\\b", 2); break;
        case '\f': k3_sbuf_add(out, "\\f", 2); break;
        default: {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            k3_sbuf_add(out, u, 6);
        }
        }
    }
    k3_sbuf_add(out, s + run, len - run);
    k3_sbuf_addc(out, '"');
}

struct kv {
    const char *key;
    size_t key_len;
    json_t *value;
};

static int kv_cmp(const void *a, const void *b)
{
    const struct kv *x = a, *y = b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);  /* UTF-8 byte order = code point order */
    if (c) return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

void k3_json_py_dump(const json_t *v, int flags, struct k3_sbuf *out)
{
    const char *item_sep = (flags & K3_JSON_PY_COMPACT) ? "," : ", ";
    const char *key_sep = (flags & K3_JSON_PY_COMPACT) ? ":" : ": ";
    switch (json_typeof(v)) {
    case JSON_NULL: k3_sbuf_add(out, "null", 4); return;
    case JSON_TRUE: k3_sbuf_add(out, "true", 4); return;
    case JSON_FALSE: k3_sbuf_add(out, "false", 5); return;
    case JSON_INTEGER: k3_sbuf_addf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); return;
    case JSON_REAL: {
        char f[32];
        k3_py_float_repr(json_real_value(v), f);
        k3_sbuf_adds(out, f);
        return;
    }
    case JSON_STRING: k3_json_py_string(json_string_value(v), json_string_length(v), out); return;
    case JSON_ARRAY: {
        k3_sbuf_addc(out, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) k3_sbuf_adds(out, item_sep);
            k3_json_py_dump(json_array_get(v, i), flags, out);
        }
        k3_sbuf_addc(out, ']');
        return;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(v);
        struct kv *kvs = n ? malloc(n * sizeof *kvs) : NULL;
        if (n && !kvs) K3_FATAL("out of memory sorting %zu JSON keys", n);
        size_t i = 0;
        const char *key;
        json_t *val;
        void *iter = json_object_iter((json_t *)v);
        for (; iter && i < n; iter = json_object_iter_next((json_t *)v, iter), i++) {
            key = json_object_iter_key(iter);
            val = json_object_iter_value(iter);
            kvs[i] = (struct kv){key, json_object_iter_key_len(iter), val};
        }
        n = i;
        if ((flags & K3_JSON_PY_SORT_KEYS) && n > 1) qsort(kvs, n, sizeof *kvs, kv_cmp);
        k3_sbuf_addc(out, '{');
        for (i = 0; i < n; i++) {
            if (i) k3_sbuf_adds(out, item_sep);
            k3_json_py_string(kvs[i].key, kvs[i].key_len, out);
            k3_sbuf_adds(out, key_sep);
            k3_json_py_dump(kvs[i].value, flags, out);
        }
        k3_sbuf_addc(out, '}');
        free(kvs);
        return;
    }
    }
}
