// Check macros for the CUDA runtime and cuBLAS: a failed call becomes a
// Status naming the file, line, call and error (llm.c's habit). Host code of
// the CUDA backend only; includes the CUDA runtime headers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "base/status.h"

namespace tern::cuda {

// "device_model.cpp:120: cudaMalloc(&p, n): out of memory (cudaErrorMemoryAllocation)".
// Allocation failures map to ResourceExhausted, everything else to Internal.
Status cuda_status(cudaError_t error, const char* call, const char* file, int line);
Status cublas_status(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace tern::cuda

#define TERN_CUDA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                     \
    const cudaError_t tern_cuda_error_ = (expr);                                           \
    if (tern_cuda_error_ != cudaSuccess)                                                   \
      return ::tern::cuda::cuda_status(tern_cuda_error_, #expr, __FILE__, __LINE__);       \
  } while (0)

#define TERN_CUBLAS_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                                     \
    const cublasStatus_t tern_cublas_status_ = (expr);                                     \
    if (tern_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                      \
      return ::tern::cuda::cublas_status(tern_cublas_status_, #expr, __FILE__, __LINE__); \
  } while (0)
