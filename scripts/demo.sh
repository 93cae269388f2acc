#!/usr/bin/env bash
# demo.sh - set up, build, and run the main job on the tiny built-in setup.
# For now: the command's help and the effective tiny deployment configuration,
# printed by a 2-rank MPI job.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)"
./build/k3 --help
mpirun --oversubscribe -np 2 ./build/k3 config --config configs/deploy/tiny-2rank.cfg
