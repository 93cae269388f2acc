/* h5_check.c - see h5_check.h. */
#include "io/h5_check.h"

#include <stdio.h>

void k3_h5_fail(const char *stmt, const char *file, int line)
{
    H5Eprint2(H5E_DEFAULT, stderr);
    k3_fatal(file, line, stmt, "HDF5 call failed (HDF5 error stack above)");
}
