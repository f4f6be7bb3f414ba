# CUDA and NCCL, optional at build time (included from the top-level CMakeLists.txt).
#
#   HERD_WITH_CUDA  AUTO|ON|OFF  AUTO: on when a CUDA compiler and the CUDA runtime are found
#                                (nvcc on PATH, $CUDACXX, $CUDA_HOME/bin or /usr/local/cuda/bin)
#   HERD_WITH_NCCL  AUTO|ON|OFF  AUTO: on when CUDA is on and nccl.h + libnccl are found
#                                ($NCCL_HOME, -DNCCL_HOME=..., the CUDA toolkit, system paths)
#   CMAKE_CUDA_ARCHITECTURES     default 90 (H100/H200; the PTX also runs on newer GPUs)
#
# Results, for the rest of the build:
#   HERD_HAVE_CUDA / HERD_HAVE_NCCL    ON or OFF
#   herd_enable_gpu(<target>)          adds src/gpu/gpu.cpp and src/collective/nccl.cpp to the
#                                      library (always: without CUDA they report "not built"),
#                                      links CUDA::cudart / herd::nccl PRIVATE and defines
#                                      HERD_HAVE_CUDA / HERD_HAVE_NCCL.
# libherd stays plain C++ (no nvcc): kernels live only in the examples', tests' and benchmarks'
# .cu files, which are built only when HERD_HAVE_CUDA is ON. A machine without the toolkit
# builds everything else.

set(HERD_WITH_CUDA AUTO CACHE STRING "Build the CUDA parts: AUTO (when found), ON or OFF")
set_property(CACHE HERD_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(HERD_WITH_NCCL AUTO CACHE STRING "Build the NCCL communicator: AUTO (when found), ON or OFF")
set_property(CACHE HERD_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)

# AUTO, or a CMake boolean (ON/1/YES/TRUE, OFF/0/NO/FALSE) -> AUTO, ON or OFF.
function(_herd_tristate var out)
  string(TOUPPER "${${var}}" v)
  if(v STREQUAL "AUTO")
    set(${out} AUTO PARENT_SCOPE)
  elseif(${var})
    set(${out} ON PARENT_SCOPE)
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()
_herd_tristate(HERD_WITH_CUDA _herd_cuda_mode)
_herd_tristate(HERD_WITH_NCCL _herd_nccl_mode)

set(HERD_HAVE_CUDA OFF)
set(HERD_HAVE_NCCL OFF)
set(_herd_cuda_why "HERD_WITH_CUDA=OFF")

if(NOT _herd_cuda_mode STREQUAL "OFF")
  # nvcc is often not on PATH (module load cuda puts it there; a plain shell does not).
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(HERD_NVCC nvcc
      HINTS ENV CUDA_HOME ENV CUDA_PATH ${CUDAToolkit_ROOT}
      PATH_SUFFIXES bin
      PATHS /usr/local/cuda/bin /opt/cuda/bin)
    if(HERD_NVCC)
      set(ENV{CUDACXX} "${HERD_NVCC}")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Compile once for Hopper (quick, and the embedded PTX is JIT-compiled on newer GPUs);
    # -DCMAKE_CUDA_ARCHITECTURES=80;90 or =native overrides.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures to compile for")
    endif()
    # One CUDA runtime per process: libherd links the shared libcudart, so must the .cu targets
    # (a static copy would be a second runtime beside it).
    if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
      set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    endif()
    enable_language(CUDA)
    # The .cu files include herd's C++20 headers, and a CUDA target takes its dialect from
    # CXX_STANDARD (20) when CUDA_STANDARD is unset. CMake 3.25 does not know that nvcc 12+
    # has -std=c++20 (it lists cuda_std_17 at most): it is told here.
    if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES
       AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    if(NOT CUDAToolkit_ROOT)
      get_filename_component(_herd_nvcc_dir "${CMAKE_CUDA_COMPILER}" DIRECTORY)
      get_filename_component(CUDAToolkit_ROOT "${_herd_nvcc_dir}" DIRECTORY)
    endif()
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart)
      set(HERD_HAVE_CUDA ON)
    else()
      set(_herd_cuda_why "nvcc found (${CMAKE_CUDA_COMPILER}) but not the CUDA runtime library")
    endif()
  else()
    set(_herd_cuda_why "no CUDA compiler (nvcc) found; set CUDACXX or CUDA_HOME, or put nvcc on PATH")
  endif()
  if(_herd_cuda_mode STREQUAL "ON" AND NOT HERD_HAVE_CUDA)
    message(FATAL_ERROR "HERD_WITH_CUDA=ON but CUDA is not usable: ${_herd_cuda_why}. "
                        "Use -DHERD_WITH_CUDA=AUTO or OFF to build without it.")
  endif()
endif()

set(_herd_nccl_why "HERD_WITH_NCCL=OFF")
if(NOT _herd_nccl_mode STREQUAL "OFF")
  if(NOT HERD_HAVE_CUDA)
    set(_herd_nccl_why "needs CUDA")
  else()
    find_package(NCCL)
    if(NCCL_FOUND)
      set(HERD_HAVE_NCCL ON)
    else()
      set(_herd_nccl_why "nccl.h or libnccl not found; set NCCL_HOME")
    endif()
  endif()
  if(_herd_nccl_mode STREQUAL "ON" AND NOT HERD_HAVE_NCCL)
    message(FATAL_ERROR "HERD_WITH_NCCL=ON but NCCL is not usable: ${_herd_nccl_why}. "
                        "Use -DHERD_WITH_NCCL=AUTO or OFF to build without it.")
  endif()
endif()

if(HERD_HAVE_CUDA)
  set(_herd_gpu_status "CUDA ${CUDAToolkit_VERSION} (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  set(_herd_gpu_status "CUDA off (${_herd_cuda_why})")
endif()
if(HERD_HAVE_NCCL)
  string(APPEND _herd_gpu_status ", NCCL ${NCCL_VERSION} (${NCCL_LIBRARY})")
else()
  string(APPEND _herd_gpu_status ", NCCL off (${_herd_nccl_why})")
endif()
message(STATUS "herd GPU support: ${_herd_gpu_status}")

# The gpu and collective layers compile against CUDA/NCCL when they are on; libherd links them.
macro(herd_enable_gpu)
  set(HERD_GPU_LIBS "")
  foreach(_herd_target ${ARGN})
    if(HERD_HAVE_CUDA)
      target_compile_definitions(${_herd_target} PRIVATE HERD_HAVE_CUDA=1)
      target_link_libraries(${_herd_target} PRIVATE CUDA::cudart)
    endif()
    if(HERD_HAVE_NCCL)
      target_compile_definitions(${_herd_target} PRIVATE HERD_HAVE_NCCL=1)
      target_link_libraries(${_herd_target} PRIVATE herd::nccl)
    endif()
  endforeach()
  if(HERD_HAVE_CUDA)
    list(APPEND HERD_GPU_LIBS CUDA::cudart)
  endif()
  if(HERD_HAVE_NCCL)
    list(APPEND HERD_GPU_LIBS herd::nccl)
  endif()
endmacro()
