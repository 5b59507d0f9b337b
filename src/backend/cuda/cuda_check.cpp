// Formatting of CUDA and cuBLAS failures into Status values.
#include "backend/cuda/cuda_check.h"

#include <string>

namespace tern::cuda {
namespace {

std::string where(const char* call, const char* file, int line) {
  std::string f = file;
  const size_t slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return f + ":" + std::to_string(line) + ": " + call + ": ";
}

}  // namespace

Status cuda_status(cudaError_t error, const char* call, const char* file, int line) {
  std::string message = where(call, file, line) + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) + ")";
  if (error == cudaErrorMemoryAllocation) return resource_exhausted(std::move(message));
  return internal_error(std::move(message));
}

Status cublas_status(cublasStatus_t status, const char* call, const char* file, int line) {
  std::string message = where(call, file, line) + cublasGetStatusName(status) + ": " + cublasGetStatusString(status);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return resource_exhausted(std::move(message));
  return internal_error(std::move(message));
}

}  // namespace tern::cuda
