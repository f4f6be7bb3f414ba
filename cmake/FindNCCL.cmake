# FindNCCL: NVIDIA's collective library (nccl.h + libnccl), as nccl-tests looks for it.
#
# Searched: -DNCCL_HOME=..., $NCCL_HOME, $NCCL_ROOT, the CUDA toolkit (CUDAToolkit_ROOT,
# CUDAToolkit_INCLUDE_DIRS, /usr/local/cuda), then the system paths (Debian/Ubuntu libnccl-dev).
# Defines NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_VERSION and the target herd::nccl.

set(_nccl_hints ${NCCL_HOME} $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${CUDAToolkit_ROOT} /usr/local/cuda)
set(_nccl_include_hints ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS})
set(_nccl_library_hints ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR})

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_include_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${_nccl_library_hints} PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${_part} ([0-9]+).*" "\\1" _nccl_${_part} "${_nccl_version_lines}")
  endforeach()
  set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
# 2.14: ncclCommInitRankConfig with a non-blocking config, which herd needs to abort cleanly.
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NCCL_VERSION VERSION_LESS 2.14)
  message(STATUS "NCCL ${NCCL_VERSION} is older than 2.14 (no non-blocking communicators): not used")
  set(NCCL_FOUND FALSE)
endif()

if(NCCL_FOUND AND NOT TARGET herd::nccl)
  add_library(herd::nccl UNKNOWN IMPORTED)
  set_target_properties(herd::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
