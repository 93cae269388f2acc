/* dump_journal.c - see dump_journal.h. Each append opens, writes one line
 * with a single write(), fsyncs and closes: appends happen once per flush
 * (seconds apart), so keeping the descriptor open buys nothing. */
#include "io/dump_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define JOURNAL_MAGIC "k3-dump-journal 1\n"

uint64_t k3_fnv1a64(const void *data, size_t n, uint64_t h)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

/* fsync the directory so a newly created journal survives a power cut too. */
static void fsync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

int k3_dump_journal_read(const char *path, struct k3_dump_journal_state *st, struct k3_err *err)
{
    memset(st, 0, sizeof *st);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        return k3_err_set(err, "cannot read %s: %s", path, strerror(errno));
    }
    char line[256];
    int ok = fgets(line, sizeof line, f) && !strcmp(line, JOURNAL_MAGIC);
    if (ok) {
        unsigned long long id;
        ok = fgets(line, sizeof line, f) && strchr(line, '\n') &&
             sscanf(line, "identity %16llx", &id) == 1;
        st->identity = id;
    }
    if (!ok) {
        fclose(f);
        return k3_err_set(err, "%s is not a k3 dump journal; remove it (and the dump file next to "
                          "it) to start over", path);
    }
    st->exists = 1;
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n')) break;     /* torn by a kill: ignore */
        long long s, n;
        if (!strcmp(line, "created\n")) st->created = 1;
        else if (sscanf(line, "committed %lld %lld", &s, &n) == 2) {
            st->n_samples = s;
            st->n_tokens = n;
        }
    }
    fclose(f);
    return 0;
}

int k3_dump_journal_begin(const char *path, uint64_t identity, int no_fsync, struct k3_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return k3_err_set(err, "cannot create %s: %s", path, strerror(errno));
    char buf[128];
    int n = snprintf(buf, sizeof buf, JOURNAL_MAGIC "identity %016" PRIx64 "\n", identity);
    int rc = write_all(fd, buf, (size_t)n);
    if (!rc && !no_fsync) rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc) return k3_err_set(err, "cannot write %s: %s", path, strerror(saved));
    if (!no_fsync) fsync_dir_of(path);
    return 0;
}

int k3_dump_journal_append(const char *path, const char *line, int no_fsync, struct k3_err *err)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return k3_err_set(err, "cannot open %s: %s", path, strerror(errno));
    char buf[160];
    int n = snprintf(buf, sizeof buf, "%s\n", line);
    int rc = write_all(fd, buf, (size_t)n);
    if (!rc && !no_fsync) rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc) return k3_err_set(err, "cannot append to %s: %s", path, strerror(saved));
    return 0;
}
