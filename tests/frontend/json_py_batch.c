/* json_py_batch.c - reads one JSON document per line on stdin and writes k3_json_py_dump of
 * each on stdout, one per line; argv[1] = flags (0-3: 1 compact, 2 sorted keys). The
 * Python check (check_json_py.py) compares the lines with json.dumps. A line that jansson
 * cannot parse prints "!error". */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "frontend/json_py.h"

int main(int argc, char **argv)
{
    int flags = argc > 1 ? atoi(argv[1]) : 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    struct k3_sbuf out = {0};
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_t *v = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        k3_sbuf_clear(&out);
        if (v) k3_json_py_dump(v, flags, &out);
        else k3_sbuf_adds(&out, "!error");
        k3_sbuf_addc(&out, '\n');
        fwrite(out.p, 1, out.n, stdout);
        json_decref(v);
    }
    k3_sbuf_free(&out);
    free(line);
    return 0;
}
