// cuBLAS GEMM for the linear layers. Row-major y = x W^T is, in cuBLAS's
// column-major terms, y^T[N, T] = W[N, K] (stored as a K x N column-major
// matrix, hence op T) times x^T[K, T] (stored as K x T, op N).
#include "backend/cuda/gemm.h"

#include <limits>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace tern::cuda {

Status linear(cublasHandle_t handle, const bf16* x, int64_t num_tokens, int64_t in_features, const bf16* w,
              int64_t out_features, void* y, GemmOut out_type) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (num_tokens <= 0) return Status::ok();
  if (num_tokens > kMax || in_features > kMax || out_features > kMax) {
    return invalid_argument("GEMM shape too large for cuBLAS: " + std::to_string(num_tokens) + " x " +
                            std::to_string(in_features) + " x " + std::to_string(out_features));
  }
  const int m = static_cast<int>(out_features), n = static_cast<int>(num_tokens), k = static_cast<int>(in_features);
  const float alpha = 1.0f, beta = out_type == GemmOut::kAddF32 ? 1.0f : 0.0f;
  const cudaDataType_t c_type = out_type == GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  TERN_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16BF, k, x,
                                           CUDA_R_16BF, k, &beta, y, c_type, m, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
  return Status::ok();
}

Status linear_k_split(cublasHandle_t handle, const bf16* x, int64_t num_tokens, int64_t in_features, const bf16* w,
                      int64_t out_features, float* partials, int splits) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (num_tokens <= 0) return Status::ok();
  if (splits < 1 || in_features % (8 * static_cast<int64_t>(splits)) != 0) {
    return invalid_argument("K of " + std::to_string(in_features) + " does not split into " + std::to_string(splits) +
                            " slices of a multiple of 8");
  }
  if (num_tokens > kMax || in_features > kMax || out_features > kMax || num_tokens * out_features > kMax) {
    return invalid_argument("GEMM shape too large for cuBLAS: " + std::to_string(num_tokens) + " x " +
                            std::to_string(in_features) + " x " + std::to_string(out_features));
  }
  const int m = static_cast<int>(out_features), n = static_cast<int>(num_tokens);
  const int k = static_cast<int>(in_features / splits), ld = static_cast<int>(in_features);
  const float alpha = 1.0f, beta = 0.0f;
  // Slice s of W and of x starts k columns after slice s - 1's (the same leading dimensions); its partial
  // T x N after the previous one's.
  TERN_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16BF, ld, k, x, CUDA_R_16BF, ld, k, &beta,
      partials, CUDA_R_32F, m, static_cast<int64_t>(m) * n, splits, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::ok();
}

}  // namespace tern::cuda
