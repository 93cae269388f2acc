# Toolchain file: cross-compile for Grace (aarch64) hosts with Debian's
# gcc-aarch64-linux-gnu. Used with -DK3_PORTABLE_ONLY=ON for the parts that
# have no dependencies (src/core, kernels/cpu, the tokenizer).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
