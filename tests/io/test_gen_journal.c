/* test_gen_journal - the generation journal of `k3 dump --generate` (io/gen_journal.h):
 * replies written and read back (more than the first table size, so the index is
 * rebuilt), a reply line torn by a kill is dropped and appends continue after the last
 * whole line, a header torn during creation starts the file again, another identity or
 * another file is refused, "complete" is remembered.
 *
 *   test_gen_journal WORKDIR
 * Prints 'N passed, N failed'. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gen_journal.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    if (ok) passed++;
    else {
        failed++;
        printf("FAIL: %s\n", what);
    }
}

/* Reply (s, t) of the test: n = (s * 7 + t) % 13 ids, id k = s * 100 + t * 10 + k. */
static int reply_n(int64_t s, int t) { return (int)((s * 7 + t) % 13); }

static void reply_ids(int64_t s, int t, int32_t *ids)
{
    for (int k = 0; k < reply_n(s, t); k++) ids[k] = (int32_t)(s * 100 + t * 10 + k);
}

static int reply_ok(const struct k3_gen_journal *j, int64_t s, int t)
{
    const struct k3_gen_reply *r = k3_gen_journal_find(j, s, t);
    int32_t want[16];
    reply_ids(s, t, want);
    return r && r->n == reply_n(s, t) && r->seed == (uint64_t)(s * 31 + t) &&
           !strcmp(r->finish, s % 2 ? "length" : "stop") && !memcmp(r->ids, want, sizeof(int32_t) * (size_t)r->n);
}

static void append_raw(const char *path, const char *text)
{
    FILE *f = fopen(path, "ab");
    fputs(text, f);
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_gen_journal WORKDIR\n");
        return 2;
    }
    mkdir(argv[1], 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/j.gen", argv[1]);
    unlink(path);
    struct k3_err err;
    struct k3_gen_journal j;
    const int n_samples = 300, n_turns = 2;   /* 600 replies: the table grows past 256 */

    check(k3_gen_journal_open(&j, path, 0x1234, 1, &err) == 0 && j.n == 0 && !j.complete, "a new journal");
    for (int64_t s = 0; s < n_samples; s++)
        for (int t = 0; t < n_turns; t++) {
            int32_t ids[16];
            reply_ids(s, t, ids);
            k3_gen_journal_add(&j, s, t, (uint64_t)(s * 31 + t), s % 2 ? "length" : "stop", ids, reply_n(s, t));
            if (s % 50 == 0) check(k3_gen_journal_sync(&j, &err) == 0, "sync");
        }
    check(k3_gen_journal_sync(&j, &err) == 0, "sync at the end");
    int all = 1;
    for (int64_t s = 0; s < n_samples; s++)
        for (int t = 0; t < n_turns; t++) all &= reply_ok(&j, s, t);
    check(all, "every added reply is found");
    check(!k3_gen_journal_find(&j, n_samples, 0) && !k3_gen_journal_find(&j, 0, n_turns), "absent replies are not");
    k3_gen_journal_free(&j);

    /* read back; then a torn line (a kill mid-write) */
    check(k3_gen_journal_open(&j, path, 0x1234, 1, &err) == 0 && j.n == n_samples * n_turns, "read back");
    all = 1;
    for (int64_t s = 0; s < n_samples; s++)
        for (int t = 0; t < n_turns; t++) all &= reply_ok(&j, s, t);
    check(all, "every reply read back equals what was written");
    k3_gen_journal_free(&j);
    append_raw(path, "reply 300 0 9 stop 3 1 2");
    check(k3_gen_journal_open(&j, path, 0x1234, 1, &err) == 0 && j.n == n_samples * n_turns &&
              !k3_gen_journal_find(&j, 300, 0), "a torn last line is dropped");
    int32_t one[1] = {77};
    k3_gen_journal_add(&j, 300, 0, 5, "stop", one, 1);
    check(k3_gen_journal_complete(&j, 301, &err) == 0, "complete");
    k3_gen_journal_free(&j);
    check(k3_gen_journal_open(&j, path, 0x1234, 1, &err) == 0 && j.n == n_samples * n_turns + 1 && j.complete &&
              k3_gen_journal_find(&j, 300, 0) && k3_gen_journal_find(&j, 300, 0)->ids[0] == 77,
          "appends go after the last whole line; complete is remembered");
    k3_gen_journal_free(&j);

    /* refusals: another identity, a corrupt line in the middle, not a journal */
    check(k3_gen_journal_open(&j, path, 0x1235, 1, &err) != 0 && strstr(err.msg, "another command"),
          "another identity is refused");
    k3_gen_journal_free(&j);
    char bad[4096];
    snprintf(bad, sizeof bad, "%s/bad.gen", argv[1]);
    unlink(bad);
    append_raw(bad, "k3-dump-gen 1\nidentity 0000000000001234\nreply 1 0 1 stop 2 5\nreply 2 0 1 stop 0\n");
    check(k3_gen_journal_open(&j, bad, 0x1234, 1, &err) != 0 && strstr(err.msg, "malformed"),
          "a reply with fewer ids than it says is refused");
    k3_gen_journal_free(&j);
    unlink(bad);
    append_raw(bad, "something else\n");
    check(k3_gen_journal_open(&j, bad, 0x1234, 1, &err) != 0 && strstr(err.msg, "not a generation journal"),
          "another file is refused");
    k3_gen_journal_free(&j);
    FILE *f = fopen(bad, "rb");
    char text[64] = "";
    check(f && fgets(text, sizeof text, f) && !strcmp(text, "something else\n"), "and left alone");
    if (f) fclose(f);

    /* a header torn during creation: started again */
    unlink(bad);
    append_raw(bad, "k3-dump-gen 1\niden");
    check(k3_gen_journal_open(&j, bad, 0x99, 1, &err) == 0 && j.n == 0, "a torn header starts the file again");
    k3_gen_journal_free(&j);
    check(k3_gen_journal_open(&j, bad, 0x99, 1, &err) == 0, "with the new identity");
    k3_gen_journal_free(&j);

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
