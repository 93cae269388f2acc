/* test_sample_dist.c - greedy and top-k over vocabulary slices equal the
 * same on the whole vocabulary (ids exactly, log-probabilities to 1e-6),
 * including tied maxima and ranks that hold no vocabulary rows. */
#include <math.h>
#include <stdlib.h>

#include "engine/sample_dist.h"
#include "k3_test_mpi.h"
#include "model/parallel.h"
#include "mpi/bootstrap.h"
#include "mpi/comm.h"
#include "mpi/mpi_check.h"

static uint64_t rng;
static float rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) % 20000) / 1000.0f - 10.0f;
}

int main(int argc, char **argv)
{
    struct k3_job job;
    k3_job_init(&job, &argc, &argv);
    struct k3_comm c;
    k3_comm_init_mpi(&c, job.world_comm, 60);
    static const int64_t vocabs[] = {3, 17, 1024, 163840};
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        int64_t V = vocabs[vi];
        float *x = malloc(sizeof(float) * (size_t)V);
        for (int trial = 0; trial < 6; trial++) {
            rng = (uint64_t)(V * 31 + trial); /* the same logits on every rank */
            for (int64_t i = 0; i < V; i++) x[i] = rnd();
            if (trial % 2) /* tied maxima in several slices */
                for (int64_t i = 0; i < V; i += V / 3 + 1) x[i] = 50.0f;
            long long b, e;
            k3_split(V, c.size, c.rank, &b, &e);
            int32_t tok_d, tok_1;
            float lp_d, lp_1;
            k3_dist_greedy(x + b, e - b, b, &c, &tok_d, &lp_d);
            k3_dist_greedy(x, V, 0, NULL, &tok_1, &lp_1);
            CHECK_MSG(tok_d == tok_1, "V %lld trial %d: greedy %d vs %d", (long long)V, trial, tok_d, tok_1);
            CHECK_NEAR(lp_d, lp_1, 1e-6);
            int k = V < 20 ? (int)V : 20;
            int32_t id_d[64], id_1[64];
            float l_d[64], l_1[64];
            k3_dist_topk(x + b, e - b, b, k, &c, id_d, l_d);
            k3_dist_topk(x, V, 0, k, NULL, id_1, l_1);
            int same = 1;
            for (int j = 0; j < k; j++) same &= id_d[j] == id_1[j] && fabsf(l_d[j] - l_1[j]) <= 1e-6f;
            CHECK_MSG(same, "V %lld trial %d: top-%d differs", (long long)V, trial, k);
            /* one rank's reference: sorted descending, ties by id */
            for (int j = 1; j < k; j++) CHECK(l_1[j] < l_1[j - 1] || (l_1[j] == l_1[j - 1] && id_1[j] > id_1[j - 1]));
        }
        free(x);
    }
    k3_comm_free(&c);
    int rc = k3_test_summary_all(job.world_comm);
    k3_job_free(&job);
    return rc;
}
