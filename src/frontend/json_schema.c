/* json_schema.c - JSON Schema validation (see json_schema.h).
 *
 * A direct recursive evaluator: each keyword of the schema is checked against the
 * instance, the first failure is reported with a JSONPath-like location. Subschemas whose
 * failure is expected (anyOf branches, not, if) are evaluated quietly. Rejected: compiling
 * schemas to an automaton first; tool schemas are small and checked once per call. */
#include "frontend/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 96  /* $ref "#" on the same instance would recurse for ever */

struct ctx {
    const json_t *root;
    struct k3_err *err;
    int quiet;
};

static int report(struct ctx *c, const char *path, int verdict, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int report(struct ctx *c, const char *path, int verdict, const char *fmt, ...)
{
    if (!c->quiet || verdict == K3_JSCHEMA_UNKNOWN) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        k3_err_set(c->err, "%s: %s", path, msg);
    }
    return verdict;
}

static int check(struct ctx *c, const json_t *s, const json_t *v, const char *path, int depth);

/* JSON equality as jsonschema defines it: 1 == 1.0, true != 1. */
static int json_eq(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    if (json_typeof(a) != json_typeof(b)) return 0;
    switch (json_typeof(a)) {
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_eq(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)a, k, x) {
            const json_t *y = json_object_get(b, k);
            if (!y || !json_eq(x, y)) return 0;
        }
        return 1;
    }
    default:
        return 1;  /* null, true, false */
    }
}

static int is_type(const json_t *v, const char *t)
{
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && isfinite(json_real_value(v)) &&
                floor(json_real_value(v)) == json_real_value(v));
    return 0;
}

static size_t utf8_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

/* Resolves "#" or "#/a/b~1c" against the root schema; NULL if it does not resolve. */
static const json_t *resolve(const json_t *root, const char *ref)
{
    if (ref[0] != '#') return NULL;
    const json_t *cur = root;
    const char *p = ref + 1;
    if (!*p) return root;
    if (*p != '/') return NULL;
    char tok[256];
    while (*p == '/') {
        p++;
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = p[1] == '0' ? '~' : '/', p++;
            if (n + 1 < sizeof tok) tok[n++] = ch;
        }
        tok[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            cur = (*end || i < 0) ? NULL : json_array_get(cur, (size_t)i);
        } else {
            cur = NULL;
        }
        if (!cur) return NULL;
    }
    return cur;
}

/* Runs a subschema quietly: its failure is an expected outcome, not the error to report. */
static int quiet_check(struct ctx *c, const json_t *s, const json_t *v, const char *path,
                       int depth)
{
    int q = c->quiet;
    c->quiet = 1;
    int r = check(c, s, v, path, depth);
    c->quiet = q;
    return r;
}

static int num_kw(const json_t *s, const char *k, double *out)
{
    const json_t *x = json_object_get(s, k);
    if (!json_is_number(x)) return 0;
    *out = json_number_value(x);
    return 1;
}

static int check_number(struct ctx *c, const json_t *s, const json_t *v, const char *path)
{
    double x = json_number_value(v), b;
    char num[40];
    if (num_kw(s, "minimum", &b) && x < b) {
        snprintf(num, sizeof num, "%.17g", b);
        return report(c, path, 0, "less than the minimum %s", num);
    }
    if (num_kw(s, "maximum", &b) && x > b) {
        snprintf(num, sizeof num, "%.17g", b);
        return report(c, path, 0, "more than the maximum %s", num);
    }
    if (num_kw(s, "exclusiveMinimum", &b) && x <= b)
        return report(c, path, 0, "not above exclusiveMinimum");
    if (num_kw(s, "exclusiveMaximum", &b) && x >= b)
        return report(c, path, 0, "not below exclusiveMaximum");
    const json_t *m = json_object_get(s, "multipleOf");
    if (json_is_number(m) && json_number_value(m) > 0) {
        int bad;
        if (json_is_real(m)) {  /* jsonschema: quotient = instance / m; int(quotient) != quotient */
            double q = x / json_number_value(m);
            if (!isfinite(q)) return report(c, path, K3_JSCHEMA_UNKNOWN, "multipleOf overflows");
            bad = trunc(q) != q;
        } else if (json_is_integer(v)) {
            bad = json_integer_value(v) % json_integer_value(m) != 0;
        } else {
            bad = fmod(x, json_number_value(m)) != 0;
        }
        if (bad) return report(c, path, 0, "not a multiple of multipleOf");
    }
    return 1;
}

static int check_object(struct ctx *c, const json_t *s, const json_t *v, const char *path,
                        int depth)
{
    char sub[512];
    const json_t *req = json_object_get(s, "required");
    for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++) {
        const json_t *k = json_array_get(req, i);
        if (json_is_string(k) && !json_object_get(v, json_string_value(k)))
            return report(c, path, 0, "missing required property '%s'", json_string_value(k));
    }
    double b;
    if (num_kw(s, "minProperties", &b) && (double)json_object_size(v) < b)
        return report(c, path, 0, "fewer properties than minProperties");
    if (num_kw(s, "maxProperties", &b) && (double)json_object_size(v) > b)
        return report(c, path, 0, "more properties than maxProperties");
    const json_t *props = json_object_get(s, "properties");
    const json_t *addl = json_object_get(s, "additionalProperties");
    const json_t *names = json_object_get(s, "propertyNames");
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        snprintf(sub, sizeof sub, "%s.%s", path, k);
        if (names) {
            json_t *ks = json_string(k);
            int r = check(c, names, ks, sub, depth + 1);
            json_decref(ks);
            if (r != 1) return r;
        }
        const json_t *ps = json_is_object(props) ? json_object_get(props, k) : NULL;
        const json_t *use = ps ? ps : addl;
        if (!use) continue;
        if (!ps && json_is_false(addl))
            return report(c, path, 0, "property '%s' is not allowed (additionalProperties is "
                          "false)", k);
        int r = check(c, use, x, sub, depth + 1);
        if (r != 1) return r;
    }
    return 1;
}

static int check_array(struct ctx *c, const json_t *s, const json_t *v, const char *path,
                       int depth)
{
    char sub[512];
    size_t n = json_array_size(v);
    double b;
    if (num_kw(s, "minItems", &b) && (double)n < b)
        return report(c, path, 0, "fewer items than minItems");
    if (num_kw(s, "maxItems", &b) && (double)n > b)
        return report(c, path, 0, "more items than maxItems");
    if (json_is_true(json_object_get(s, "uniqueItems")))
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (json_eq(json_array_get(v, i), json_array_get(v, j)))
                    return report(c, path, 0, "items are not unique");
    const json_t *prefix = json_object_get(s, "prefixItems");
    size_t n_prefix = json_is_array(prefix) ? json_array_size(prefix) : 0;
    const json_t *items = json_object_get(s, "items");
    for (size_t i = 0; i < n; i++) {
        const json_t *use = i < n_prefix ? json_array_get(prefix, i) : items;
        if (!use) continue;
        snprintf(sub, sizeof sub, "%s[%zu]", path, i);
        int r = check(c, use, json_array_get(v, i), sub, depth + 1);
        if (r != 1) return r;
    }
    const json_t *contains = json_object_get(s, "contains");
    if (contains) {
        size_t hits = 0;
        for (size_t i = 0; i < n; i++) {
            int r = quiet_check(c, contains, json_array_get(v, i), path, depth + 1);
            if (r < 0) return r;
            hits += r == 1;
        }
        if (!hits) return report(c, path, 0, "no item matches contains");
    }
    return 1;
}

static int check(struct ctx *c, const json_t *s, const json_t *v, const char *path, int depth)
{
    if (depth > MAX_DEPTH)
        return report(c, path, K3_JSCHEMA_UNKNOWN, "schema recursion deeper than the limit "
                      "(a $ref cycle that consumes nothing)");
    if (json_is_true(s)) return 1;
    if (json_is_false(s)) return report(c, path, 0, "no value is allowed here (schema false)");
    if (!json_is_object(s))
        return report(c, path, K3_JSCHEMA_UNKNOWN, "a schema must be an object or a boolean");

    static const char *const unsupported[] = {"patternProperties", "unevaluatedProperties",
                                              "unevaluatedItems", "dependentSchemas",
                                              "dependentRequired", "$dynamicRef", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (json_object_get(s, unsupported[i]))
            return report(c, path, K3_JSCHEMA_UNKNOWN, "keyword '%s' is not supported",
                          unsupported[i]);

    const json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        const json_t *target = resolve(c->root, json_string_value(ref));
        if (!target)
            return report(c, path, K3_JSCHEMA_UNKNOWN, "$ref '%s' does not resolve inside the "
                          "schema", json_string_value(ref));
        int r = check(c, target, v, path, depth + 1);
        if (r != 1) return r;
    }

    const json_t *type = json_object_get(s, "type");
    if (json_is_string(type) && !is_type(v, json_string_value(type)))
        return report(c, path, 0, "expected %s", json_string_value(type));
    if (json_is_array(type)) {
        int ok = 0;
        for (size_t i = 0; i < json_array_size(type) && !ok; i++)
            ok = json_is_string(json_array_get(type, i)) &&
                 is_type(v, json_string_value(json_array_get(type, i)));
        if (!ok) return report(c, path, 0, "not one of the allowed types");
    }
    const json_t *en = json_object_get(s, "enum");
    if (json_is_array(en)) {
        int ok = 0;
        for (size_t i = 0; i < json_array_size(en) && !ok; i++) ok = json_eq(v, json_array_get(en, i));
        if (!ok) return report(c, path, 0, "not one of the enum values");
    }
    const json_t *cst = json_object_get(s, "const");
    if (cst && !json_eq(v, cst)) return report(c, path, 0, "not the const value");

    if (json_is_number(v)) {
        int r = check_number(c, s, v, path);
        if (r != 1) return r;
    }
    if (json_is_string(v)) {
        size_t n = utf8_len(json_string_value(v), json_string_length(v));
        double b;
        if (num_kw(s, "minLength", &b) && (double)n < b)
            return report(c, path, 0, "shorter than minLength");
        if (num_kw(s, "maxLength", &b) && (double)n > b)
            return report(c, path, 0, "longer than maxLength");
    }
    if (json_is_object(v)) {
        int r = check_object(c, s, v, path, depth);
        if (r != 1) return r;
    }
    if (json_is_array(v)) {
        int r = check_array(c, s, v, path, depth);
        if (r != 1) return r;
    }

    const json_t *all = json_object_get(s, "allOf");
    for (size_t i = 0; json_is_array(all) && i < json_array_size(all); i++) {
        int r = check(c, json_array_get(all, i), v, path, depth + 1);
        if (r != 1) return r;
    }
    const json_t *any = json_object_get(s, "anyOf");
    if (json_is_array(any)) {
        int ok = 0;
        for (size_t i = 0; i < json_array_size(any) && !ok; i++) {
            int r = quiet_check(c, json_array_get(any, i), v, path, depth + 1);
            if (r < 0) return r;
            ok = r == 1;
        }
        if (!ok) return report(c, path, 0, "matches none of anyOf");
    }
    const json_t *one = json_object_get(s, "oneOf");
    if (json_is_array(one)) {
        int hits = 0;
        for (size_t i = 0; i < json_array_size(one); i++) {
            int r = quiet_check(c, json_array_get(one, i), v, path, depth + 1);
            if (r < 0) return r;
            hits += r == 1;
        }
        if (hits != 1) return report(c, path, 0, "matches %s of oneOf", hits ? "more than one" : "none");
    }
    const json_t *not = json_object_get(s, "not");
    if (not) {
        int r = quiet_check(c, not, v, path, depth + 1);
        if (r < 0) return r;
        if (r == 1) return report(c, path, 0, "matches the 'not' schema");
    }
    const json_t *iff = json_object_get(s, "if");
    if (iff) {
        int r = quiet_check(c, iff, v, path, depth + 1);
        if (r < 0) return r;
        const json_t *branch = json_object_get(s, r == 1 ? "then" : "else");
        if (branch) {
            int b = check(c, branch, v, path, depth + 1);
            if (b != 1) return b;
        }
    }
    return 1;
}

enum k3_jschema_verdict k3_json_schema_check(const json_t *schema, const json_t *instance,
                                             struct k3_err *err)
{
    struct ctx c = {.root = schema, .err = err, .quiet = 0};
    int r = check(&c, schema, instance, "$", 0);
    return r < 0 ? K3_JSCHEMA_UNKNOWN : r ? K3_JSCHEMA_VALID : K3_JSCHEMA_INVALID;
}
