/* bench_h5_dump.c - write throughput of the dump writer against the disk's own
 * bandwidth, measured in the same run.
 *
 *   mpirun -np P bench_h5_dump DIR [--mib M] [--hidden H] [--datasets D] [--chunk C]
 *                              [--round R] [--per-rank] [--f32] [--json]
 *
 * Defaults are the K3 DSpark capture: 6 datasets (layers 7, 23, 51, 67, 83 and the
 * final state) of 7168 bf16 values, 86,016 B per token, about M MiB in all
 * (default 2048), samples of 512-1535 tokens, a flush every R tokens (16384).
 * Rank 0 first times `dd if=/dev/zero bs=8M oflag=direct` (and `conv=fdatasync`,
 * the page-cache path the writer takes) writing the same number of bytes into DIR,
 * then the writer: put() (bf16 conversion, in memory) and flush()+finish() (the
 * disk part, which ends with fsync, so nothing is left in the page cache) are timed
 * apart. Correctness in the same run: every 7th sample is read back and compared.
 * Output: a #-headed table (MB = 10^6 bytes), or one JSON object with --json. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "core/clock.h"
#include "core/dtype.h"
#include "io/h5_dump.h"
#include "synth.h"

/* Seconds for dd to write `bytes` into path with the given flags (-1 on failure). */
static double time_dd(const char *path, long long bytes, const char *flags)
{
    char cmd[1024];
    long long count = (bytes + (8 << 20) - 1) / (8 << 20);
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of='%s' bs=8M count=%lld %s status=none", path, count, flags);
    double t0 = k3_now_s();
    int rc = system(cmd);
    double t = k3_now_s() - t0;
    unlink(path);
    return rc == 0 ? t : -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 2) {
        if (!rank) fprintf(stderr, "usage: bench_h5_dump DIR [options] (see the file comment)\n");
        MPI_Finalize();
        return 2;
    }
    const char *dir = argv[1];
    long long mib = 2048, hidden = 7168, n_ds = 6, chunk = 512, round_tok = 16384;
    int per_rank = 0, f32 = 0, json = 0, hdf5_io = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) hidden = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--datasets") && i + 1 < argc) n_ds = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--round") && i + 1 < argc) round_tok = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--per-rank")) per_rank = 1;
        else if (!strcmp(argv[i], "--f32")) f32 = 1;
        else if (!strcmp(argv[i], "--hdf5-io")) hdf5_io = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
    }
    if (n_ds < 1 || n_ds > 16) n_ds = 6;
    long long elem = f32 ? 4 : 2, tok_bytes = elem * hidden * n_ds;
    long long n_tok_want = mib * (1 << 20) / tok_bytes;
    /* Samples of 512..1535 tokens until the budget is reached. */
    int64_t S = 0, N = 0, cap = 1024;
    int64_t *len = malloc(sizeof(int64_t) * (size_t)cap);
    while (N < n_tok_want) {
        if (S == cap) len = realloc(len, sizeof(int64_t) * (size_t)(cap *= 2));
        len[S] = synth_len(3, S, 512, 1535);
        N += len[S++];
    }
    int64_t bytes = N * tok_bytes;
    char path[1024], ddpath[1024];
    snprintf(path, sizeof path, "%s/bench.h5", dir);
    snprintf(ddpath, sizeof ddpath, "%s/bench.dd", dir);

    double dd_direct = 0, dd_sync = 0;
    if (rank == 0) {
        dd_direct = time_dd(ddpath, bytes, "oflag=direct");
        dd_sync = time_dd(ddpath, bytes, "conv=fdatasync");
        unlink(path);
        char j[1100];
        snprintf(j, sizeof j, "%s.journal", path);
        unlink(j);
        for (int r = 0; r < 64; r++) {
            snprintf(j, sizeof j, "%s.r%d-of-%d.h5", path, r, world);
            unlink(j);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);

    int32_t *tok = calloc((size_t)N, sizeof(int32_t));
    uint8_t *mask = calloc((size_t)N, 1);
    const char *names[16];
    char nbuf[16][16];
    for (int d = 0; d < n_ds; d++) {
        snprintf(nbuf[d], sizeof nbuf[d], d == n_ds - 1 ? "final" : "layer_%d", d);
        names[d] = nbuf[d];
    }
    struct k3_h5_dump_opts o = {.path = path, .comm = MPI_COMM_WORLD, .n_datasets = (int)n_ds, .datasets = names,
                                .hidden = hidden, .dtype = f32 ? K3_H5_DUMP_F32 : K3_H5_DUMP_BF16,
                                .chunk_tokens = chunk, .per_rank_files = per_rank, .identity = "bench",
                                .hdf5_io = hdf5_io};
    struct k3_h5_dump_input in = {.n_samples = S, .sample_len = len, .tokens = tok, .loss_mask = mask};
    struct k3_h5_dump *w;
    struct k3_err err;
    int64_t n_done;
    double t_open0 = k3_now_s();
    if (k3_h5_dump_open(&w, &o, &in, &n_done, &err)) {
        if (!rank) fprintf(stderr, "bench: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double t_open = k3_now_s() - t_open0;
    /* One source buffer of the longest sample, rows a function of (sample 0, ds, t, j):
     * every sample gets the same values (generation is not what is measured). */
    float *rows = calloc((size_t)(1535 * hidden), sizeof(float));
    double t_put = 0, t_write = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t_all0 = k3_now_s();
    for (int64_t base = 0; base < S;) {
        int64_t end = base, tk = 0;
        while (end < S && (tk < round_tok || end == base)) tk += len[end++];
        double t0 = k3_now_s();
        for (int64_t s = base; s < end; s++) {
            if (s % world != rank) continue;
            for (int d = 0; d < n_ds; d++) {
                for (int64_t t = 0; t < len[s]; t++)
                    rows[t * hidden] = synth_value(s, d, t, 0);   /* column 0 tells samples apart */
                if (k3_h5_dump_put(w, s, d, 0, rows, len[s], hidden, &err)) {
                    fprintf(stderr, "bench: %s\n", err.msg);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            }
            k3_h5_dump_sample_done(w, s, &err);
        }
        double t1 = k3_now_s();
        if (k3_h5_dump_flush(w, &err)) {
            if (!rank) fprintf(stderr, "bench: %s\n", err.msg);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        t_put += t1 - t0;
        t_write += k3_now_s() - t1;
        base = end;
    }
    double t2 = k3_now_s();
    if (k3_h5_dump_finish(w, &err)) {
        if (!rank) fprintf(stderr, "bench: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    t_write += k3_now_s() - t2;
    double t_all = k3_now_s() - t_all0;
    struct k3_h5_dump_stats st;
    k3_h5_dump_stats(w, &st);
    int64_t io_local[2] = {st.direct_chunks, st.plain_writes}, io[2];
    MPI_Reduce(io_local, io, 2, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    k3_h5_dump_free(w);
    double tp[2] = {t_put, t_write}, tmax[2];
    MPI_Reduce(tp, tmax, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    /* Correctness: column 0 of every 7th sample, every dataset. */
    long long wrong = 0, checked = 0;
    if (rank == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        float *col = malloc(sizeof(float) * 1535);
        int64_t off = 0;
        for (int64_t s = 0; s < S; off += len[s], s++) {
            if (s % 7) continue;
            for (int d = 0; d < n_ds; d++) {
                char name[64];
                snprintf(name, sizeof name, "/hidden/%s", names[d]);
                hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
                hid_t fs = H5Dget_space(ds);
                hsize_t start[2] = {(hsize_t)off, 0}, count[2] = {(hsize_t)len[s], 1};
                H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
                hid_t ms = H5Screate_simple(2, count, NULL);
                uint16_t *u = (uint16_t *)col;
                H5Dread(ds, f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, ms, fs, H5P_DEFAULT, col);
                for (int64_t t = len[s] - 1; t >= 0; t--) {
                    float v = f32 ? col[t] : k3_bf16_to_f32(u[t]);
                    wrong += v != synth_value(s, d, t, 0);
                    checked++;
                }
                H5Sclose(ms);
                H5Sclose(fs);
                H5Dclose(ds);
            }
        }
        free(col);
        H5Fclose(f);
        double mb = (double)bytes / 1e6;
        double w_mbs = mb / tmax[1], e2e_mbs = mb / t_all, dd_mbs = dd_direct > 0 ? mb / dd_direct : 0,
               dds_mbs = dd_sync > 0 ? mb / dd_sync : 0;
        if (json) {
            printf("{\"ranks\": %d, \"layout\": \"%s\", \"bytes\": %lld, \"tokens\": %lld, \"samples\": %lld, "
                   "\"chunk_tokens\": %lld, \"dd_direct_MBps\": %.1f, \"dd_fdatasync_MBps\": %.1f, "
                   "\"write_MBps\": %.1f, \"end_to_end_MBps\": %.1f, \"write_vs_dd_direct\": %.3f, "
                   "\"open_s\": %.3f, \"wrong\": %lld, \"checked\": %lld}\n",
                   world, per_rank ? "per-rank" : "shared", (long long)bytes, (long long)N, (long long)S, chunk,
                   dd_mbs, dds_mbs, w_mbs, e2e_mbs, dd_mbs > 0 ? w_mbs / dd_mbs : 0, t_open, wrong, checked);
        } else {
            printf("# dump writer vs dd, %d rank(s), %s, %s, %lld tokens x %lld B = %.0f MB, chunk %lld tokens\n",
                   world, per_rank ? "per-rank files" : "one shared file", hdf5_io ? "H5Dwrite" : "raw chunk pwrite",
                   (long long)N, tok_bytes, mb, chunk);
            printf("# chunk writes: %lld with O_DIRECT, %lld plain\n", (long long)io[0], (long long)io[1]);
            printf("# %-34s %10s %10s %8s\n", "what", "seconds", "MB/s", "vs dd");
            printf("  %-34s %10.2f %10.1f %8s\n", "dd bs=8M oflag=direct", dd_direct, dd_mbs, "1.00");
            printf("  %-34s %10.2f %10.1f %8.2f\n", "dd bs=8M conv=fdatasync", dd_sync, dds_mbs,
                   dd_mbs > 0 ? dds_mbs / dd_mbs : 0);
            printf("  %-34s %10.2f %10.1f %8.2f\n", "writer: flush+finish (disk)", tmax[1], w_mbs,
                   dd_mbs > 0 ? w_mbs / dd_mbs : 0);
            printf("  %-34s %10.2f %10.1f %8.2f\n", "writer: end to end (+bf16 put)", t_all, e2e_mbs,
                   dd_mbs > 0 ? e2e_mbs / dd_mbs : 0);
            printf("# open (create + allocate) %.3f s; read back %lld values, %lld wrong\n", t_open, checked, wrong);
        }
        unlink(path);
        char j[1100];
        for (int r = 0; r < world; r++) {
            snprintf(j, sizeof j, "%s.r%d-of-%d.h5", path, r, world);
            unlink(j);
        }
    }
    free(rows);
    free(len);
    free(tok);
    free(mask);
    int bad = wrong != 0;
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return bad;
}
