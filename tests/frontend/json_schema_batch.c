/* json_schema_batch.c - reads {"schema": S, "instance": I} per line on stdin and prints the
 * verdict of k3_json_schema_check per line: 1 valid, 0 invalid, -1 unknown (and !error for
 * a line jansson cannot parse). check_json_schema.py compares with Python jsonschema. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "frontend/json_schema.h"

int main(void)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_t *v = json_loadb(line, (size_t)n, 0, NULL);
        if (!v) {
            puts("!error");
            continue;
        }
        struct k3_err err;
        int r = k3_json_schema_check(json_object_get(v, "schema"), json_object_get(v, "instance"),
                                     &err);
        printf("%d\n", r);
        json_decref(v);
    }
    free(line);
    return 0;
}
