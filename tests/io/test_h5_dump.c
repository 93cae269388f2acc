/* test_h5_dump.c - the dump writer on 1..4 ranks with synthetic data (no
 * model): every layout (shared file / per-rank files + virtual datasets,
 * bf16 / float32), holders that are every rank or only "group leaders",
 * samples completed out of order, chunk sizes that do and do not divide the
 * token count, a resume after an abandoned run, and the errors a user can
 * cause. Rank 0 reads every file back with plain (serial) HDF5 and checks
 * every value. Run as: mpirun -np N test_h5_dump DIR */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "core/dtype.h"
#include "io/h5_dump.h"
#include "k3_test.h"
#include "synth.h"

static int rank, world;
static const char *dir;

struct cfg {
    const char *name;
    int64_t n_samples, len_lo, len_hi, chunk, hidden;
    int per_rank, f32, leaders_every;   /* holders: ranks r with r % leaders_every == 0 */
    int n_ds;
    int flush_every;                    /* samples per rank between flushes */
    int hdf5_io;                        /* the H5Dwrite reference path */
};

static const char *ds_names[] = {"layer_0", "layer_3", "final"};

static void make_input(const struct cfg *c, int64_t **len, int32_t **tok, uint8_t **mask)
{
    *len = malloc(sizeof(int64_t) * (size_t)c->n_samples);
    int64_t N = 0;
    for (int64_t s = 0; s < c->n_samples; s++) N += (*len)[s] = synth_len(42, s, c->len_lo, c->len_hi);
    *tok = malloc(sizeof(int32_t) * (size_t)N);
    *mask = malloc((size_t)N);
    int64_t i = 0;
    for (int64_t s = 0; s < c->n_samples; s++)
        for (int64_t t = 0; t < (*len)[s]; t++, i++) {
            (*tok)[i] = synth_token(s, t);
            (*mask)[i] = synth_mask(s, t);
        }
}

static int holder_of(const struct cfg *c, int64_t s)
{
    int n_leaders = (world + c->leaders_every - 1) / c->leaders_every;
    return (int)(s % n_leaders) * c->leaders_every;
}

static void fill_opts(const struct cfg *c, struct k3_h5_dump_opts *o, const char *path,
                      const struct k3_h5_dump_attr *attrs)
{
    *o = (struct k3_h5_dump_opts){.path = path, .comm = MPI_COMM_WORLD, .n_datasets = c->n_ds,
                                  .datasets = ds_names, .hidden = c->hidden,
                                  .dtype = c->f32 ? K3_H5_DUMP_F32 : K3_H5_DUMP_BF16,
                                  .chunk_tokens = c->chunk, .per_rank_files = c->per_rank,
                                  .n_attrs = 1, .attrs = attrs, .identity = "test", .no_fsync = 1,
                                  .hdf5_io = c->hdf5_io};
}

/* Runs samples [n_done, stop) (stop < n_samples: abandon there, as a kill
 * would) and finishes if stop == n_samples. Each holder completes its samples
 * in reverse order within a round to exercise out-of-order completion. */
static int run_dump(const struct cfg *c, const char *path, int64_t stop, int64_t *n_done_out)
{
    int64_t *len;
    int32_t *tok;
    uint8_t *mask;
    make_input(c, &len, &tok, &mask);
    struct k3_h5_dump_attr attrs[1] = {{"model_config", "{\"synthetic\": true}"}};
    struct k3_h5_dump_opts o;
    fill_opts(c, &o, path, attrs);
    struct k3_h5_dump_input in = {.n_samples = c->n_samples, .sample_len = len,
                                  .tokens = rank == 0 ? tok : NULL, .loss_mask = rank == 0 ? mask : NULL};
    struct k3_h5_dump *w;
    struct k3_err err;
    int64_t n_done = -1;
    int rc = k3_h5_dump_open(&w, &o, &in, &n_done, &err);
    CHECK_MSG(rc == 0, "%s: open: %s", c->name, err.msg);
    if (rc) goto out;
    *n_done_out = n_done;
    float *rows = malloc(sizeof(float) * (size_t)(c->len_hi * c->hidden));
    int64_t round = (int64_t)c->flush_every * world;
    for (int64_t base = n_done; base < stop; base += round) {
        int64_t end = base + round < stop ? base + round : stop;
        for (int64_t s = end - 1; s >= base; s--) {
            if (holder_of(c, s) != rank) continue;
            for (int d = 0; d < c->n_ds; d++) {
                for (int64_t t = 0; t < len[s]; t++)
                    for (int64_t j = 0; j < c->hidden; j++) rows[t * c->hidden + j] = synth_value(s, d, t, j);
                /* In two pieces, as the forward pass's slices come. */
                int64_t half = len[s] / 2;
                CHECK(k3_h5_dump_put(w, s, d, 0, rows, half, c->hidden, &err) == 0);
                CHECK(k3_h5_dump_put(w, s, d, half, rows + half * c->hidden, len[s] - half, c->hidden, &err) == 0);
            }
            CHECK_MSG(k3_h5_dump_sample_done(w, s, &err) == 0, "%s", err.msg);
        }
        CHECK_MSG(k3_h5_dump_flush(w, &err) == 0, "%s: flush: %s", c->name, err.msg);
    }
    free(rows);
    if (stop == c->n_samples) CHECK_MSG(k3_h5_dump_finish(w, &err) == 0, "%s: finish: %s", c->name, err.msg);
    struct k3_h5_dump_stats st;
    k3_h5_dump_stats(w, &st);
    if (strstr(c->name, "direct") && !c->hdf5_io && n_done == 0) {
        int64_t n_direct = st.direct_chunks, all;
        MPI_Allreduce(&n_direct, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        CHECK_MSG(all > 0, "%s: no chunk went through O_DIRECT", c->name);
    }
    k3_h5_dump_free(w);
out:
    free(len);
    free(tok);
    free(mask);
    return rc;
}

/* Rank 0: the whole file read back (through the virtual datasets in per-rank mode). */
static void verify(const struct cfg *c, const char *path)
{
    if (rank != 0) return;
    int64_t *len;
    int32_t *tok;
    uint8_t *mask;
    make_input(c, &len, &tok, &mask);
    int64_t N = 0;
    for (int64_t s = 0; s < c->n_samples; s++) N += len[s];
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK_MSG(f >= 0, "%s: cannot open %s", c->name, path);
    if (f < 0) return;
    int32_t *t2 = malloc(sizeof(int32_t) * (size_t)N);
    uint8_t *m2 = malloc((size_t)N);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(c->n_samples + 1));
    hid_t d = H5Dopen2(f, "tokens", H5P_DEFAULT);
    CHECK(H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, t2) >= 0);
    H5Dclose(d);
    d = H5Dopen2(f, "loss_mask", H5P_DEFAULT);
    CHECK(H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, m2) >= 0);
    H5Dclose(d);
    d = H5Dopen2(f, "sample_offsets", H5P_DEFAULT);
    CHECK(H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off) >= 0);
    H5Dclose(d);
    CHECK(memcmp(t2, tok, sizeof(int32_t) * (size_t)N) == 0);
    CHECK(memcmp(m2, mask, (size_t)N) == 0);
    int off_ok = off[0] == 0;
    for (int64_t s = 0; s < c->n_samples; s++) off_ok &= off[s + 1] - off[s] == len[s];
    CHECK_MSG(off_ok, "%s: sample offsets", c->name);
    int64_t complete = 0;
    hid_t a = H5Aopen(f, "complete", H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_INT64, &complete);
    H5Aclose(a);
    CHECK_MSG(complete == 1, "%s: complete attribute", c->name);
    size_t eb = c->f32 ? 4 : 2;
    unsigned char *h = malloc((size_t)N * (size_t)c->hidden * eb);
    for (int di = 0; di < c->n_ds; di++) {
        char name[64];
        snprintf(name, sizeof name, "/hidden/%s", ds_names[di]);
        d = H5Dopen2(f, name, H5P_DEFAULT);
        CHECK_MSG(d >= 0, "%s: %s missing", c->name, name);
        if (d < 0) continue;
        CHECK(H5Dread(d, c->f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, h) >= 0);
        H5Dclose(d);
        int64_t bad = 0, first_bad = -1;
        for (int64_t s = 0; s < c->n_samples; s++)
            for (int64_t t = 0; t < len[s]; t++)
                for (int64_t j = 0; j < c->hidden; j++) {
                    int64_t i = (off[s] + t) * c->hidden + j;
                    float want = synth_value(s, di, t, j);
                    float got = c->f32 ? ((float *)h)[i] : k3_bf16_to_f32(((uint16_t *)h)[i]);
                    if (got != want && !bad++) first_bad = off[s] + t;
                }
        CHECK_MSG(bad == 0, "%s: %s: %lld wrong values, first at token %lld", c->name, name, (long long)bad,
                  (long long)first_bad);
    }
    free(h);
    free(t2);
    free(m2);
    free(off);
    H5Fclose(f);
    free(len);
    free(tok);
    free(mask);
}

/* Also removes what an earlier run of the test left at that path. */
static void path_for(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s-np%d.h5", dir, name, world);
    if (rank == 0) {
        char p[700];
        unlink(buf);
        snprintf(p, sizeof p, "%s.journal", buf);
        unlink(p);
        for (int r = 0; r < world; r++) {
            snprintf(p, sizeof p, "%s.r%d-of-%d.h5", buf, r, world);
            unlink(p);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_layouts(void)
{
    const struct cfg cases[] = {
        {"shared-bf16", 23, 1, 40, 16, 24, 0, 0, 1, 3, 2, 0},
        {"shared-f32-leaders", 17, 5, 70, 32, 8, 0, 1, 2, 2, 1, 0},
        {"shared-chunk-divides", 12, 8, 8, 8, 4, 0, 0, 1, 1, 1, 0},
        {"shared-one-chunk", 5, 3, 9, 4096, 8, 0, 0, 1, 2, 3, 0},
        {"perrank-bf16", 23, 1, 40, 16, 24, 1, 0, 1, 3, 2, 0},
        {"perrank-f32-leaders", 17, 5, 70, 32, 8, 1, 1, 2, 2, 1, 0},
        /* 4 KiB-multiple chunks at 4 KiB addresses: the O_DIRECT path (where the file system has it) */
        {"shared-direct", 40, 1, 300, 64, 32, 0, 0, 1, 2, 2, 0},
        {"perrank-direct-f32", 40, 1, 300, 64, 16, 1, 1, 2, 2, 2, 0},
        {"shared-hdf5io", 23, 1, 40, 16, 24, 0, 0, 1, 3, 2, 1},
        {"perrank-hdf5io", 23, 1, 40, 16, 24, 1, 0, 1, 3, 2, 1},
        {"shared-direct-hdf5io", 40, 1, 300, 64, 32, 0, 0, 1, 2, 2, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        path_for(path, sizeof path, cases[i].name);
        int64_t n_done;
        if (run_dump(&cases[i], path, cases[i].n_samples, &n_done) == 0) CHECK(n_done == 0);
        MPI_Barrier(MPI_COMM_WORLD);
        verify(&cases[i], path);
        /* Running the same command again on a complete file does nothing. */
        if (run_dump(&cases[i], path, cases[i].n_samples, &n_done) == 0)
            CHECK_MSG(n_done == cases[i].n_samples, "%s: rerun of a complete file", cases[i].name);
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

/* Abandon after some flushes (the writer is freed without finishing, as a
 * kill leaves it), reopen, finish: same data. */
static void test_resume(void)
{
    const struct cfg cases[] = {
        {"resume-shared", 30, 1, 40, 16, 8, 0, 0, 1, 2, 1, 0},
        {"resume-perrank", 30, 1, 40, 16, 8, 1, 0, 1, 2, 1, 0},
        {"resume-direct", 60, 1, 300, 64, 32, 0, 0, 1, 2, 1, 0},
        {"resume-hdf5io", 30, 1, 40, 16, 8, 0, 0, 1, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        path_for(path, sizeof path, cases[i].name);
        int64_t n_done;
        run_dump(&cases[i], path, 11, &n_done);
        MPI_Barrier(MPI_COMM_WORLD);
        run_dump(&cases[i], path, 19, &n_done);
        CHECK_MSG(n_done > 0 && n_done <= 11, "%s: resumed at %lld", cases[i].name, (long long)n_done);
        MPI_Barrier(MPI_COMM_WORLD);
        run_dump(&cases[i], path, cases[i].n_samples, &n_done);
        CHECK_MSG(n_done > 0 && n_done <= 19, "%s: resumed at %lld", cases[i].name, (long long)n_done);
        MPI_Barrier(MPI_COMM_WORLD);
        verify(&cases[i], path);
        char journal[600];
        snprintf(journal, sizeof journal, "%s.journal", path);
        CHECK(access(journal, F_OK) != 0);
    }
}

static int open_expect_fail(const struct cfg *c, const char *path, const char *identity, const char *needle)
{
    int64_t *len;
    int32_t *tok;
    uint8_t *mask;
    make_input(c, &len, &tok, &mask);
    struct k3_h5_dump_attr attrs[1] = {{"model_config", "{}"}};
    struct k3_h5_dump_opts o;
    fill_opts(c, &o, path, attrs);
    o.identity = identity;
    struct k3_h5_dump_input in = {.n_samples = c->n_samples, .sample_len = len,
                                  .tokens = rank == 0 ? tok : NULL, .loss_mask = rank == 0 ? mask : NULL};
    struct k3_h5_dump *w = NULL;
    struct k3_err err = {""};
    int64_t n_done;
    int rc = k3_h5_dump_open(&w, &o, &in, &n_done, &err);
    CHECK_MSG(rc == -1 && w == NULL, "%s: open of %s should fail", c->name, path);
    if (rc == -1) CHECK_STR_CONTAINS(err.msg, needle);
    if (!rc) k3_h5_dump_free(w);
    free(len);
    free(tok);
    free(mask);
    return rc;
}

static void test_errors(void)
{
    struct cfg c = {"errors", 6, 2, 9, 4, 4, 0, 0, 1, 1, 1, 0};
    char path[512];
    int64_t n_done;
    /* A partial dump, then the same path with other settings: refused, untouched. */
    path_for(path, sizeof path, "errors");
    run_dump(&c, path, 3, &n_done);
    MPI_Barrier(MPI_COMM_WORLD);
    open_expect_fail(&c, path, "other input", "different input or settings");
    run_dump(&c, path, c.n_samples, &n_done);   /* still resumable after the refusal */
    CHECK(n_done > 0);
    MPI_Barrier(MPI_COMM_WORLD);
    verify(&c, path);
    /* A complete dump of other settings: refused. */
    open_expect_fail(&c, path, "other input", "not a dump of this command");
    /* Some other file at the output path: refused, not overwritten. */
    path_for(path, sizeof path, "not-a-dump");
    if (rank == 0) {
        FILE *f = fopen(path, "w");
        CHECK(f != NULL);
        if (f) {
            fputs("precious", f);
            fclose(f);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    open_expect_fail(&c, path, "test", "not a dump of this command");
    /* A directory that does not exist. */
    snprintf(path, sizeof path, "%s/no/such/dir/x.h5", dir);
    open_expect_fail(&c, path, "test", "cannot create");
    /* Rows that were never put. */
    path_for(path, sizeof path, "missing-rows");
    int64_t *len;
    int32_t *tok;
    uint8_t *mask;
    make_input(&c, &len, &tok, &mask);
    struct k3_h5_dump_attr attrs[1] = {{"model_config", "{}"}};
    struct k3_h5_dump_opts o;
    fill_opts(&c, &o, path, attrs);
    struct k3_h5_dump_input in = {.n_samples = c.n_samples, .sample_len = len, .tokens = tok, .loss_mask = mask};
    struct k3_h5_dump *w;
    struct k3_err err;
    if (k3_h5_dump_open(&w, &o, &in, &n_done, &err) == 0) {
        float row[4] = {0};
        if (rank == 0) {
            CHECK(k3_h5_dump_put(w, 0, 0, 0, row, 1, 4, &err) == 0);
            CHECK(k3_h5_dump_sample_done(w, 0, &err) == -1);
            CHECK_STR_CONTAINS(err.msg, "rows");
            CHECK(k3_h5_dump_put(w, 0, 0, len[0], row, 1, 4, &err) == -1);
        }
        k3_h5_dump_free(w);
    }
    free(len);
    free(tok);
    free(mask);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    dir = argc > 1 ? argv[1] : ".";
    if (rank == 0) mkdir(dir, 0755);
    MPI_Barrier(MPI_COMM_WORLD);
    test_layouts();
    test_resume();
    test_errors();
    int failed = k3_test_failed, any;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int rc = rank == 0 ? k3_test_summary() : 0;
    if (rank == 0 && any && !failed) rc = 1;
    MPI_Finalize();
    return any ? 1 : rc;
}
