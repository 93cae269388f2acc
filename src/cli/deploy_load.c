/* deploy_load.c - libconfig -> struct k3_deploy, driven by k3_deploy_schema.
 *
 * The file has one group per section (`server = { port = 8000; };`); anything
 * the schema does not know is an error with a suggestion, because a misspelt
 * key that is silently ignored is a production incident. */
#include "cli/deploy_load.h"

#include <ctype.h>
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int row[64];
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = a[i - 1] == b[j - 1] ? 0 : 1;
            int best = diag + cost;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The closest known key, if it is close enough to be a typo. */
static const char *suggest(const char *key)
{
    const char *best = NULL;
    int best_d = 3;
    for (int i = 0; i < k3_deploy_n_keys; i++) {
        int dist = edit_distance(key, k3_deploy_schema[i].key);
        if (dist < best_d) {
            best_d = dist;
            best = k3_deploy_schema[i].key;
        }
    }
    return best;
}

static int section_known(const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < k3_deploy_n_keys; i++)
        if (strncmp(k3_deploy_schema[i].key, name, n) == 0 && k3_deploy_schema[i].key[n] == '.')
            return 1;
    return 0;
}

static const char *libconfig_type_name(int t)
{
    switch (t) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_INT: case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    }
    return "an unknown value";
}

static int set_from_setting(struct k3_deploy *d, const struct k3_cfg_key *k,
                            const config_setting_t *s, struct k3_err *err)
{
    int t = config_setting_type(s);
    switch (k->type) {
    case K3_CFG_INT:
        if (t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64)
            return k3_deploy_set_int(d, k, config_setting_get_int64(s), err);
        break;
    case K3_CFG_BYTES:
        if (t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64)
            return k3_deploy_set_int(d, k, config_setting_get_int64(s), err);
        if (t == CONFIG_TYPE_STRING) return k3_deploy_set(d, k, config_setting_get_string(s), err);
        break;
    case K3_CFG_FLOAT:
        if (t == CONFIG_TYPE_FLOAT) return k3_deploy_set_float(d, k, config_setting_get_float(s), err);
        if (t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64)
            return k3_deploy_set_float(d, k, (double)config_setting_get_int64(s), err);
        break;
    case K3_CFG_BOOL:
        if (t == CONFIG_TYPE_BOOL) return k3_deploy_set(d, k, config_setting_get_bool(s) ? "true" : "false", err);
        break;
    case K3_CFG_STRING:
    case K3_CFG_ENUM:
        if (t == CONFIG_TYPE_STRING) return k3_deploy_set(d, k, config_setting_get_string(s), err);
        break;
    case K3_CFG_INT_LIST:
        if (t == CONFIG_TYPE_ARRAY || t == CONFIG_TYPE_LIST) {
            char text[K3_DEPLOY_MAX_LAYERS * 12 + 16] = "";
            int n = config_setting_length(s);
            if (n > K3_DEPLOY_MAX_LAYERS)
                return k3_err_set(err, "%s: more than %d entries", k->key, K3_DEPLOY_MAX_LAYERS);
            for (int i = 0; i < n; i++) {
                const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
                int et = config_setting_type(e);
                if (et != CONFIG_TYPE_INT && et != CONFIG_TYPE_INT64)
                    return k3_err_set(err, "%s must be a list of integers, but entry %d is %s",
                                      k->key, i, libconfig_type_name(et));
                char one[24];
                snprintf(one, sizeof one, "%s%lld", i ? "," : "", config_setting_get_int64(e));
                strcat(text, one);
            }
            return k3_deploy_set(d, k, text, err);
        }
        break;
    }
    const char *want = k->type == K3_CFG_BYTES  ? "an integer or a size string"
                       : k->type == K3_CFG_INT_LIST ? "a list of integers"
                       : k->type == K3_CFG_INT  ? "an integer"
                       : k->type == K3_CFG_FLOAT ? "a number"
                       : k->type == K3_CFG_BOOL ? "true or false"
                                                : "a string";
    return k3_err_set(err, "%s must be %s, but the file has %s", k->key, want,
                      libconfig_type_name(t));
}

/* libconfig 1.5 (Debian 12) silently wraps integer literals beyond 32 bits
 * unless they carry an L suffix; 17179869184 reads back as 0. Catch them in
 * the text before libconfig sees it. Strings and comments are skipped. */
static int check_wide_ints(const char *text, const char *name, struct k3_err *err)
{
    int line = 1;
    for (const char *p = text; *p; p++) {
        if (*p == '\n') {
            line++;
        } else if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1]) p++;
                else if (*p == '\n') line++;
            }
            if (!*p) break;
        } else if (*p == '#' || (*p == '/' && p[1] == '/')) {
            while (p[1] && p[1] != '\n') p++;
        } else if (*p == '/' && p[1] == '*') {
            for (p += 2; *p && !(*p == '*' && p[1] == '/'); p++)
                if (*p == '\n') line++;
            if (!*p) break;
            p++;
        } else if (isdigit((unsigned char)*p) && (p == text || !isalnum((unsigned char)p[-1]))) {
            const char *start = p;
            int hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
            if (hex) p += 2;
            while (hex ? isxdigit((unsigned char)*p) : isdigit((unsigned char)*p)) p++;
            int is_float = !hex && (*p == '.' || *p == 'e' || *p == 'E');
            if (!is_float && *p != 'L') {
                unsigned long long v = strtoull(start, NULL, hex ? 16 : 10);
                if (v > 2147483647ULL || (int)(p - start) > 19)
                    return k3_err_set(err, "%s:%d: integer %.*s does not fit in 32 bits; libconfig "
                                      "needs an L suffix (%.*sL) or write a size string "
                                      "such as \"16GiB\"", name, line, (int)(p - start), start,
                                      (int)(p - start), start);
            }
            while (isalnum((unsigned char)*p) || *p == '.') p++;
            p--;
        }
    }
    return 0;
}

int k3_deploy_parse(struct k3_deploy *d, const char *text, const char *name,
                    struct k3_err *err)
{
    config_t cfg;
    if (check_wide_ints(text, name, err)) return -1;
    config_init(&cfg);
    int rc = -1;
    if (config_read_string(&cfg, text) != CONFIG_TRUE) {
        k3_err_set(err, "%s:%d: syntax error: %s", name, config_error_line(&cfg),
                   config_error_text(&cfg));
        goto out;
    }
    config_setting_t *root = config_root_setting(&cfg);
    int n_sections = config_setting_length(root);
    for (int i = 0; i < n_sections; i++) {
        config_setting_t *sec = config_setting_get_elem(root, (unsigned)i);
        const char *sname = config_setting_name(sec);
        int line = (int)config_setting_source_line(sec);
        if (config_setting_type(sec) != CONFIG_TYPE_GROUP) {
            const struct k3_cfg_key *k = k3_deploy_key_find(sname);
            k3_err_set(err, "%s:%d: '%s' is not a section; keys live in groups such as "
                       "server = { port = 8000; };%s", name, line, sname,
                       k ? "" : " and no key has that name");
            goto out;
        }
        if (!section_known(sname)) {
            k3_err_set(err, "%s:%d: unknown section '%s'", name, line, sname);
            goto out;
        }
        int n_keys = config_setting_length(sec);
        for (int j = 0; j < n_keys; j++) {
            config_setting_t *s = config_setting_get_elem(sec, (unsigned)j);
            char full[256];
            snprintf(full, sizeof full, "%s.%s", sname, config_setting_name(s));
            int kline = (int)config_setting_source_line(s);
            const struct k3_cfg_key *k = k3_deploy_key_find(full);
            if (!k) {
                const char *hint = suggest(full);
                k3_err_set(err, "%s:%d: unknown key '%s'%s%s%s", name, kline, full,
                           hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
                goto out;
            }
            if (set_from_setting(d, k, s, err)) {
                k3_err_prefix(err, "%s:%d", name, kline);
                goto out;
            }
        }
    }
    rc = 0;
out:
    config_destroy(&cfg);
    return rc;
}

int k3_deploy_override(struct k3_deploy *d, const char *assignment, struct k3_err *err)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return k3_err_set(err, "--set wants KEY=VALUE, not '%s'", assignment);
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(eq - assignment), assignment);
    const struct k3_cfg_key *k = k3_deploy_key_find(key);
    if (!k) {
        const char *hint = suggest(key);
        return k3_err_set(err, "--set: unknown key '%s'%s%s%s", key,
                          hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
    }
    if (k3_deploy_set(d, k, eq + 1, err)) return k3_err_prefix(err, "--set");
    return 0;
}

int k3_deploy_finish(struct k3_deploy *d, struct k3_err *err)
{
    if (k3_deploy_validate(d, err)) return -1;
    if (d->server.api_key_env[0]) {
        const char *v = getenv(d->server.api_key_env);
        if (!v || !v[0])
            return k3_err_set(err, "server.api_key_env names %s, which is not set in the "
                              "environment", d->server.api_key_env);
        if (strlen(v) >= sizeof d->server.api_key)
            return k3_err_set(err, "the API key in %s is too long", d->server.api_key_env);
        strcpy(d->server.api_key, v);
    }
    return 0;
}
