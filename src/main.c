/* main.c - entry point of the `k3` binary; everything lives in src/cli. */
#include "cli/cli.h"

int main(int argc, char **argv) { return k3_main(argc, argv); }
