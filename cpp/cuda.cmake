# CUDA launchers of the trtspec kernels (cpp/src/*.cu) as the static library `trtspec_cuda`.
#
# Included optionally by cpp/CMakeLists.txt (after project()). Where no CUDA compiler is found the
# CUDA path is skipped with a message and the rest of the build goes on. Architectures default to
# sm_80, sm_90 and sm_100; override with -DTRTSPEC_CUDA_ARCHITECTURES="90" (CMake list syntax).
# Defines TRTSPEC_HAVE_CUDA (ON/OFF) for the including project.
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "trtspec: no CUDA compiler found: CUDA kernels skipped (trtspec_cuda not built)")
  set(TRTSPEC_HAVE_CUDA OFF)
  return()
endif()

set(TRTSPEC_CUDA_ARCHITECTURES "80;90;100" CACHE STRING "CUDA architectures of trtspec_cuda")
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES ${TRTSPEC_CUDA_ARCHITECTURES})
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

file(GLOB TRTSPEC_CUDA_SOURCES CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/src/*.cu")
add_library(trtspec_cuda STATIC ${TRTSPEC_CUDA_SOURCES})
set_target_properties(trtspec_cuda PROPERTIES
  CUDA_ARCHITECTURES "${TRTSPEC_CUDA_ARCHITECTURES}"
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  POSITION_INDEPENDENT_CODE ON)
target_include_directories(trtspec_cuda PUBLIC "${CMAKE_CURRENT_LIST_DIR}/include")
target_link_libraries(trtspec_cuda PUBLIC CUDA::cudart_static)
set(TRTSPEC_HAVE_CUDA ON)
message(STATUS "trtspec: CUDA kernels built as trtspec_cuda for architectures ${TRTSPEC_CUDA_ARCHITECTURES}")
