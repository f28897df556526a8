# Decides whether the CUDA backend is built and finds CUDA, cuBLAS, cuDNN and NCCL.
# Sets FORECASTD_WITH_CUDA and the imported targets forecastd::cudnn and forecastd::nccl.
include(CheckLanguage)

string(TOUPPER "${FORECASTD_CUDA}" _fd_cuda_mode)
if(NOT _fd_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FORECASTD_CUDA must be AUTO, ON or OFF, not '${FORECASTD_CUDA}'")
endif()

set(FORECASTD_WITH_CUDA OFF)
if(NOT _fd_cuda_mode STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(FORECASTD_WITH_CUDA ON)
  elseif(_fd_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "FORECASTD_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "forecastd: nvcc not found, building without CUDA")
  endif()
endif()

if(FORECASTD_WITH_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES "${FORECASTD_CUDA_ARCHITECTURES}")
  enable_language(CUDA)
  # CMake 3.25 knows no C++20 flag for nvcc; .cu files are C++17 (the host code is C++20).
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)

  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include /usr/include)
  find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/lib /usr/lib/x86_64-linux-gnu)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include /usr/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/lib /usr/lib/x86_64-linux-gnu)
  foreach(_fd_var CUDNN_INCLUDE_DIR CUDNN_LIBRARY NCCL_INCLUDE_DIR NCCL_LIBRARY)
    if(NOT ${_fd_var})
      message(FATAL_ERROR "forecastd: CUDA is enabled but ${_fd_var} was not found "
                          "(install cuDNN and NCCL, or configure with -DFORECASTD_CUDA=OFF)")
    endif()
  endforeach()
  add_library(forecastd::cudnn UNKNOWN IMPORTED)
  set_target_properties(forecastd::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                                                    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
  add_library(forecastd::nccl UNKNOWN IMPORTED)
  set_target_properties(forecastd::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                                   INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  message(STATUS "forecastd: CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, "
                 "cuDNN ${CUDNN_LIBRARY}, NCCL ${NCCL_LIBRARY}")
endif()
