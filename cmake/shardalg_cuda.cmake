# cmake/shardalg_cuda.cmake — shardalg::cuda: the CUDA/NCCL backend headers (include/shardalg/backend/cuda/).
#
# Included from the top-level CMakeLists.txt when SHARDALG_WITH_CUDA is ON. Provides the INTERFACE
# target `shardalg_cuda` (alias shardalg::cuda, exported as shardalg::cuda) only when both a CUDA
# compiler and NCCL are found; otherwise it says why and provides nothing (the CPU build is unchanged).
# A GPU is NOT needed to configure, build or link: the tests skip at run time without one.
include(CheckLanguage)

set(SHARDALG_CUDA_FOUND OFF)
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc AND NOT DEFINED ENV{CUDACXX})
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)  # not on the PATH in every shell
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "shardalg::cuda: no CUDA compiler found — the CUDA backend is not built")
  return()
endif()

# NCCL ships inside the CUDA 13 toolkit directory on these machines; NCCL_ROOT overrides.
find_path(SHARDALG_NCCL_INCLUDE_DIR nccl.h
          HINTS ${NCCL_ROOT} ENV NCCL_ROOT ENV NCCL_HOME
          PATHS /usr/local/cuda/include /usr/local/cuda-13.0/include /usr/include
          PATH_SUFFIXES include)
find_library(SHARDALG_NCCL_LIBRARY nccl
             HINTS ${NCCL_ROOT} ENV NCCL_ROOT ENV NCCL_HOME
             PATHS /usr/local/cuda/lib64 /usr/local/cuda-13.0/lib64 /usr/lib/x86_64-linux-gnu
             PATH_SUFFIXES lib lib64)
if(NOT SHARDALG_NCCL_INCLUDE_DIR OR NOT SHARDALG_NCCL_LIBRARY)
  message(STATUS "shardalg::cuda: NCCL not found (nccl.h: ${SHARDALG_NCCL_INCLUDE_DIR}, "
                 "libnccl: ${SHARDALG_NCCL_LIBRARY}) — the CUDA backend is not built")
  return()
endif()

# sm_90 (H100/H200) unless the user chose; set before enable_language so CMake does not probe.
# A cache entry, not a plain variable, so that it also reaches a parent project when shardalg is
# added with add_subdirectory (plain variables stay in this directory's scope).
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (shardalg default: sm_90)" FORCE)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

add_library(shardalg_cuda INTERFACE)
add_library(shardalg::cuda ALIAS shardalg_cuda)
set_target_properties(shardalg_cuda PROPERTIES EXPORT_NAME cuda)
# C++20 in .cu files. CMake 3.25 does not know the standard flags of nvcc 13, so fall back to the
# flag itself when the compile feature is unknown.
if("cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  target_compile_features(shardalg_cuda INTERFACE cuda_std_20)
else()
  target_compile_options(shardalg_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
endif()
# NCCL's include dir is usually the toolkit's own; add it anyway (harmless when equal). The library
# is linked by its absolute path, installed package included (NCCL lives in the toolkit tree here).
target_include_directories(shardalg_cuda SYSTEM INTERFACE $<BUILD_INTERFACE:${SHARDALG_NCCL_INCLUDE_DIR}>)
target_link_libraries(shardalg_cuda INTERFACE shardalg CUDA::cudart CUDA::cublas CUDA::cublasLt
                                              ${SHARDALG_NCCL_LIBRARY})
# In .cu translation units Eigen is host-only (EIGEN_NO_CUDA: no __device__ Eigen, no warnings);
# kernels may use constexpr std functions and user code may pass __device__ lambdas to map/zip.
target_compile_definitions(shardalg_cuda INTERFACE SHARDALG_HAVE_CUDA $<$<COMPILE_LANGUAGE:CUDA>:EIGEN_NO_CUDA>)
target_compile_options(shardalg_cuda INTERFACE
                       $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda>)
list(APPEND SHARDALG_EXPORTED shardalg_cuda)
set(SHARDALG_CUDA_FOUND ON)

# shardalg::cudnn — optional: fused causal attention from cuDNN 9's attention graphs
# (include/shardalg/backend/cuda/cudnn_attention.hpp), compiled once from src/cuda/ by the host
# compiler with cuDNN's frontend (header-only, third_party/cudnn_frontend, MIT). Linking it defines
# SHARDALG_WITH_CUDNN, which gives nn::Kernels<CudaBackend> its fused attention path. Built in the
# tree only (not installed): the frontend's headers stay private to it.
find_path(SHARDALG_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT
          PATHS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include PATH_SUFFIXES include)
find_library(SHARDALG_CUDNN_LIBRARY cudnn HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT
             PATHS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu PATH_SUFFIXES lib lib64)
set(SHARDALG_CUDNN_FRONTEND ${PROJECT_SOURCE_DIR}/third_party/cudnn_frontend/include)
if(SHARDALG_CUDNN_INCLUDE_DIR AND SHARDALG_CUDNN_LIBRARY AND EXISTS ${SHARDALG_CUDNN_FRONTEND}/cudnn_frontend.h)
  add_library(shardalg_cudnn STATIC ${PROJECT_SOURCE_DIR}/src/cuda/cudnn_attention.cpp)
  add_library(shardalg::cudnn ALIAS shardalg_cudnn)
  target_include_directories(shardalg_cudnn SYSTEM PRIVATE ${SHARDALG_CUDNN_FRONTEND} ${SHARDALG_CUDNN_INCLUDE_DIR})
  target_compile_definitions(shardalg_cudnn PRIVATE CUDNN_FRONTEND_SKIP_JSON_LIB PUBLIC SHARDALG_WITH_CUDNN)
  target_link_libraries(shardalg_cudnn PUBLIC shardalg_cuda ${SHARDALG_CUDNN_LIBRARY})
  message(STATUS "shardalg::cudnn: ${SHARDALG_CUDNN_LIBRARY} (fused attention)")
else()
  message(STATUS "shardalg::cudnn: cuDNN not found (cudnn.h: ${SHARDALG_CUDNN_INCLUDE_DIR}, libcudnn: "
                 "${SHARDALG_CUDNN_LIBRARY}) — attention on CUDA stays unfused")
endif()
message(STATUS "shardalg::cuda: CUDA ${CMAKE_CUDA_COMPILER_VERSION} (${CMAKE_CUDA_COMPILER}), "
               "NCCL ${SHARDALG_NCCL_LIBRARY}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
