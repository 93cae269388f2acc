/* clock.h - monotonic seconds, for deadlines, timings and log stamps. */
#ifndef K3_CORE_CLOCK_H
#define K3_CORE_CLOCK_H

#include <time.h>

static inline double k3_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
