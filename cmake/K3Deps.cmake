# K3Deps.cmake - finds what k3 links against and prints a summary at the end.
# MPI, libconfig and jansson are required, libmicrohttpd for `k3 serve`; HDF5 prefers the parallel
# (hdf5-openmpi) flavour; CUDA and NCCL only with -DK3_CUDA=ON.

set(K3_DEP_LINES "")
macro(k3_dep ok name detail)
  if(${ok})
    list(APPEND K3_DEP_LINES "  ✓ ${name}  ${detail}")
  else()
    list(APPEND K3_DEP_LINES "  ✗ ${name}  ${detail}")
  endif()
endmacro()

if(NOT K3_PORTABLE_ONLY)
  find_package(PkgConfig REQUIRED)

  find_package(MPI REQUIRED COMPONENTS C)
  k3_dep(MPI_C_FOUND "MPI" "${MPI_C_LIBRARY_VERSION_STRING}")

  pkg_check_modules(LIBCONFIG IMPORTED_TARGET libconfig)
  if(NOT LIBCONFIG_FOUND)
    message(FATAL_ERROR "libconfig not found: install libconfig-dev (Debian) or set PKG_CONFIG_PATH")
  endif()
  k3_dep(LIBCONFIG_FOUND "libconfig" "${LIBCONFIG_VERSION}")

  pkg_check_modules(JANSSON IMPORTED_TARGET jansson)
  if(NOT JANSSON_FOUND)
    message(FATAL_ERROR "jansson not found: install libjansson-dev (Debian) or set PKG_CONFIG_PATH")
  endif()
  k3_dep(JANSSON_FOUND "jansson" "${JANSSON_VERSION}")

  # The HTTP server of `k3 serve` (src/server). Without it everything else still builds
  # (a GPU machine that only runs kernels and tests need not have it); `k3 serve` then says so.
  pkg_check_modules(MHD IMPORTED_TARGET libmicrohttpd)
  set(K3_SERVER ${MHD_FOUND})
  if(NOT MHD_FOUND)
    message(WARNING "libmicrohttpd not found: k3 serve is not built (install libmicrohttpd-dev)")
  endif()
  k3_dep(MHD_FOUND "libmicrohttpd" "${MHD_VERSION}")

  set(K3_HDF5_PARALLEL OFF)
  pkg_check_modules(HDF5 IMPORTED_TARGET hdf5-openmpi)
  if(HDF5_FOUND)
    set(K3_HDF5_PARALLEL ON)
    k3_dep(HDF5_FOUND "HDF5" "${HDF5_VERSION} parallel (hdf5-openmpi)")
  else()
    pkg_check_modules(HDF5 IMPORTED_TARGET hdf5-serial)
    if(NOT HDF5_FOUND)
      pkg_check_modules(HDF5 IMPORTED_TARGET hdf5)
    endif()
    if(NOT HDF5_FOUND)
      message(FATAL_ERROR "HDF5 not found: install libhdf5-openmpi-dev (Debian) or set PKG_CONFIG_PATH")
    endif()
    message(WARNING "parallel HDF5 (hdf5-openmpi) not found; using serial HDF5: dumps are "
                    "funnelled through rank 0 instead of written collectively")
    k3_dep(HDF5_FOUND "HDF5" "${HDF5_VERSION} SERIAL (no collective writes)")
  endif()

  if(K3_CUDA)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_90: H100/H200; sm_100/sm_103: B200/GB300.
      set(CMAKE_CUDA_ARCHITECTURES 90 100 103)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    find_package(CUDAToolkit REQUIRED)
    k3_dep(CUDAToolkit_FOUND "CUDA" "${CUDAToolkit_VERSION} (archs ${CMAKE_CUDA_ARCHITECTURES})")
    k3_dep(TRUE "cuBLASLt" "${CUDAToolkit_LIBRARY_DIR}")
    find_path(NCCL_INCLUDE_DIR nccl.h
      HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_INCLUDE_DIRS}
      PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl
      HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_DIR}
            ${CUDAToolkit_LIBRARY_ROOT}
      PATH_SUFFIXES lib lib64)
    if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      message(FATAL_ERROR "NCCL not found (nccl.h: ${NCCL_INCLUDE_DIR}, libnccl: ${NCCL_LIBRARY}). "
                          "Install libnccl-dev, or pass -DNCCL_ROOT=/path/to/nccl (with include/ "
                          "and lib/), or set NCCL_HOME.")
    endif()
    add_library(k3::nccl UNKNOWN IMPORTED)
    set_target_properties(k3::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    k3_dep(TRUE "NCCL" "${NCCL_LIBRARY}")
  else()
    k3_dep(FALSE "CUDA" "off (-DK3_CUDA=ON to build the GPU backend)")
    k3_dep(FALSE "NCCL" "off (needs K3_CUDA)")
  endif()
endif()

function(k3_dependency_summary)
  message(STATUS "")
  message(STATUS "k3 ${PROJECT_VERSION} configuration (${CMAKE_SYSTEM_PROCESSOR}, ${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}, ${CMAKE_BUILD_TYPE})")
  if(K3_PORTABLE_ONLY)
    message(STATUS "  portable parts only: src/core, kernels/cpu")
  endif()
  foreach(line IN LISTS K3_DEP_LINES)
    message(STATUS "${line}")
  endforeach()
  message(STATUS "  werror=${K3_WERROR} sanitize='${K3_SANITIZE}'")
  message(STATUS "")
endfunction()
