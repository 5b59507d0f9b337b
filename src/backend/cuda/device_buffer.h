// RAII owners of device memory (cudaMalloc) and pinned host memory
// (cudaMallocHost). Move-only; a failed allocation is a Status naming the
// size. Host code of the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "base/status.h"

namespace tern::cuda {

// Where a buffer lives: device memory (cudaMalloc) or page-locked host
// memory (cudaMallocHost) that the GPU copies to and from asynchronously.
enum class MemoryKind { kDevice, kPinnedHost };

template <MemoryKind kKind>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  ~CudaBuffer() { reset(); }
  CudaBuffer(CudaBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  // Frees what was held, then allocates `bytes` (at least 1).
  Status allocate(size_t bytes, const char* what);
  void reset();

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<MemoryKind::kDevice>;
using PinnedBuffer = CudaBuffer<MemoryKind::kPinnedHost>;

}  // namespace tern::cuda
