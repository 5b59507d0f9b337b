// Device and pinned host allocations with sized error messages.
#include "backend/cuda/device_buffer.h"

#include <string>

#include "backend/cuda/cuda_check.h"

namespace tern::cuda {
namespace {

Status describe(Status s, size_t bytes, const char* what) {
  return s.with_context(std::string("allocating ") + std::to_string(bytes) + " bytes for " + what);
}

}  // namespace

template <MemoryKind kKind>
Status CudaBuffer<kKind>::allocate(size_t bytes, const char* what) {
  reset();
  if (bytes == 0) bytes = 1;
  Status s = [&]() -> Status {
    if constexpr (kKind == MemoryKind::kDevice) {
      TERN_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    } else {
      TERN_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, bytes));
    }
    return Status::ok();
  }();
  if (!s.is_ok()) {
    ptr_ = nullptr;
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    return describe(std::move(s), bytes, what);
  }
  bytes_ = bytes;
  return Status::ok();
}

template <MemoryKind kKind>
void CudaBuffer<kKind>::reset() {
  if (ptr_ != nullptr) {
    if constexpr (kKind == MemoryKind::kDevice) {
      cudaFree(ptr_);
    } else {
      cudaFreeHost(ptr_);
    }
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

template class CudaBuffer<MemoryKind::kDevice>;
template class CudaBuffer<MemoryKind::kPinnedHost>;

}  // namespace tern::cuda
