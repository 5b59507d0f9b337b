// cuBLASLt's e4m3 GEMM for the FP8 linear layers, and the dequantized
// fallback. In cuBLASLt's column-major terms, as in gemm.cpp: D^T[N, T] =
// A^T B with A = the codes stored K x N (op T: the "TN" layout FP8 needs)
// and B = the tokens' codes stored K x T (op N); with outer-vector scales
// the A vector runs along N (the weights' rows), the B vector along T (the
// tokens). Without them D is the sums, bf16 for a bf16 output and fp32
// otherwise, and scale_e4m3_sums applies both.
#include "backend/cuda/gemm_fp8.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace tern::cuda {

struct Fp8Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;           // cuBLASLt offered an algorithm
  bool unit_scales = false;  // no outer-vector scales: sums (bf16 for a bf16 output, else fp32), scaled after
  ~Plan() {
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    for (cublasLtMatrixLayout_t l : {a, b, c})
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
  }
};

Result<std::unique_ptr<Fp8Gemm>> Fp8Gemm::create(size_t workspace_bytes, bool fast_accum) {
  std::unique_ptr<Fp8Gemm> g(new Fp8Gemm());
  g->workspace_bytes_ = workspace_bytes;
  g->fast_accum_ = fast_accum;
  TERN_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&g->lt_));
  int device = 0, major = 0, minor = 0;
  TERN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  TERN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TERN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  g->cc_ = major * 10 + minor;
  return g;
}

Fp8Gemm::~Fp8Gemm() {
  plans_.clear();
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

Result<Fp8Gemm::Plan*> Fp8Gemm::plan(int64_t T, int64_t K, int64_t N, GemmOut out) {
  const auto key = std::make_tuple(T, K, N, static_cast<int>(out));
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  if (plans_.size() >= 4096) plans_.clear();  // prefill sizes vary; keep the cache bounded
  auto p = std::make_unique<Plan>();
  const Status outer = describe(T, K, N, out == GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F, true, p.get());
  if (!outer.is_ok() || !p->ok) {  // no outer-vector scales here: the unscaled GEMM into sums
    p = std::make_unique<Plan>();
    TERN_RETURN_IF_ERROR(describe(T, K, N, out == GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F, false, p.get()));
    p->unit_scales = p->ok;
  }
  Plan* raw = p.get();
  plans_.emplace(key, std::move(p));
  return raw;
}

Status Fp8Gemm::describe(int64_t T, int64_t K, int64_t N, cudaDataType_t c_type, bool outer_scales, Plan* p) {
  size_t workspace = workspace_bytes_;
  TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  TERN_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  TERN_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  if (fast_accum_) {  // unset: cuBLASLt's default, the partial sums promoted into fp32
    const int8_t fast = 1;
    TERN_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  if (outer_scales) {
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    TERN_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof(outer)));
    TERN_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof(outer)));
  }
  const auto k = static_cast<uint64_t>(K), n = static_cast<uint64_t>(N), t = static_cast<uint64_t>(T);
  TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, k, n, static_cast<int64_t>(k)));
  TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, k, t, static_cast<int64_t>(k)));
  TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->c, c_type, n, t, static_cast<int64_t>(n)));
  cublasLtMatmulPreference_t pref = nullptr;
  TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace, sizeof(workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    // The scale pointers are not set yet: the heuristic looks at the modes only.
    st = cublasLtMatmulAlgoGetHeuristic(lt_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  p->ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (p->ok) p->algo = result.algo;
  return Status::ok();
}

bool Fp8Gemm::tensor_cores(int64_t T, int64_t K, int64_t N, GemmOut out) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (cc_ < 89 || T <= 0 || K <= 0 || N <= 0 || K % 16 != 0 || N % 8 != 0 || T > kMax || K > kMax || N > kMax) {
    return false;
  }
  Result<Plan*> p = plan(T, K, N, out);
  return p.is_ok() && (*p)->ok;
}

bool Fp8Gemm::needs_sums(int64_t T, int64_t K, int64_t N, GemmOut out) {
  if (!tensor_cores(T, K, N, out)) return false;
  Result<Plan*> p = plan(T, K, N, out);
  return p.is_ok() && (*p)->unit_scales;
}

namespace {

// The unscaled GEMM of a plan with unit scales into `sums` (fp32 or bf16, as the plan's D).
Status unscaled_gemm(cublasLtHandle_t lt, const cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, const cublasLtMatmulAlgo_t* algo,
                     const uint8_t* codes, const uint8_t* x_codes, void* sums, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(lt, desc, &alpha, codes, a, x_codes, b, &beta, sums, c, sums, c, algo,
                                             workspace, workspace_bytes, stream));
  return Status::ok();
}

}  // namespace

Status Fp8Gemm::sums_of(const uint8_t* x_codes, int64_t T, int64_t K, const uint8_t* codes, int64_t N, void* sums,
                        GemmOut type, void* workspace, cudaStream_t stream) {
  if (T <= 0) return Status::ok();
  if (!needs_sums(T, K, N, type)) {
    return internal_error("FP8 GEMM sums: cuBLASLt offers no unscaled e4m3 GEMM for " + std::to_string(T) + " x " +
                          std::to_string(K) + " -> " + std::to_string(N));
  }
  TERN_ASSIGN_OR_RETURN(Plan * p, plan(T, K, N, type));
  return unscaled_gemm(lt_, p->desc, p->a, p->b, p->c, &p->algo, codes, x_codes, sums, workspace, workspace_bytes_,
                       stream);
}

Status Fp8Gemm::sums(const uint8_t* x_codes, int64_t T, int64_t K, const uint8_t* codes, int64_t N, float* sums,
                     void* workspace, cudaStream_t stream) {
  return sums_of(x_codes, T, K, codes, N, sums, GemmOut::kF32, workspace, stream);
}

Status Fp8Gemm::sums(const uint8_t* x_codes, int64_t T, int64_t K, const uint8_t* codes, int64_t N, bf16* sums,
                     void* workspace, cudaStream_t stream) {
  return sums_of(x_codes, T, K, codes, N, sums, GemmOut::kBf16, workspace, stream);
}

Status Fp8Gemm::linear(cublasHandle_t cublas, const bf16* x, int64_t T, int64_t K, Fp8Weights w, int64_t N,
                       void* y, GemmOut out_type, const Fp8Scratch& scratch, cudaStream_t stream,
                       bool use_tensor_cores) {
  if (T <= 0) return Status::ok();
  if (use_tensor_cores && tensor_cores(T, K, N, out_type)) {
    TERN_ASSIGN_OR_RETURN(Plan * p, plan(T, K, N, out_type));
    const auto aligned = [](const void* a) { return reinterpret_cast<uintptr_t>(a) % 16 == 0; };
    // Without room for the sums (a caller that planned for outer-vector scales) or aligned rows: dequantized.
    if (p->ok && p->unit_scales && scratch.sums != nullptr && aligned(y) && aligned(w.scales)) {
      TERN_CUDA_RETURN_IF_ERROR(quantize_rows_e4m3(x, T, K, scratch.x_codes, scratch.x_scales, stream));
      TERN_RETURN_IF_ERROR(unscaled_gemm(lt_, p->desc, p->a, p->b, p->c, &p->algo, w.codes, scratch.x_codes,
                                         scratch.sums, scratch.workspace, workspace_bytes_, stream));
      if (out_type == GemmOut::kBf16) {  // the plan's sums are bf16 (plan())
        TERN_CUDA_RETURN_IF_ERROR(scale_e4m3_sums(reinterpret_cast<const bf16*>(scratch.sums), T, N,
                                                  scratch.x_scales, w.scales, y, out_type, stream));
      } else {
        TERN_CUDA_RETURN_IF_ERROR(
            scale_e4m3_sums(scratch.sums, T, N, scratch.x_scales, w.scales, y, out_type, stream));
      }
      return Status::ok();
    }
    if (p->ok && !p->unit_scales) {
      TERN_CUDA_RETURN_IF_ERROR(quantize_rows_e4m3(x, T, K, scratch.x_codes, scratch.x_scales, stream));
      TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                                 &w.scales, sizeof(w.scales)));
      TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                                 &scratch.x_scales, sizeof(scratch.x_scales)));
      const float alpha = 1.0f, beta = out_type == GemmOut::kAddF32 ? 1.0f : 0.0f;
      TERN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(lt_, p->desc, &alpha, w.codes, p->a, scratch.x_codes, p->b, &beta,
                                                 y, p->c, y, p->c, &p->algo, scratch.workspace,
                                                 workspace_bytes_, stream));
      return Status::ok();
    }
  }
  if (scratch.w_bf16 == nullptr) return internal_error("FP8 linear: no scratch for the dequantized weights");
  TERN_CUDA_RETURN_IF_ERROR(dequantize_e4m3_rows(w.codes, w.scales, N, K, scratch.w_bf16, stream));
  return ::tern::cuda::linear(cublas, x, T, K, scratch.w_bf16, N, y, out_type);
}

}  // namespace tern::cuda
