/* h5_check.h - K3_CHECK_H5: an HDF5 call that returns a negative id or status
 * is fatal for the whole job; HDF5's own error stack is printed first. For
 * recoverable cases (a dump file that is not ours) test the return value
 * yourself instead. */
#ifndef K3_IO_H5_CHECK_H
#define K3_IO_H5_CHECK_H

#include <hdf5.h>

#include "core/log.h"

void k3_h5_fail(const char *stmt, const char *file, int line) __attribute__((noreturn));

#define K3_CHECK_H5(call)                                                      \
    do {                                                                       \
        if ((long long)(call) < 0) k3_h5_fail(#call, __FILE__, __LINE__);      \
    } while (0)

#endif
