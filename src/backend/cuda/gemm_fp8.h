// Linear layers with FP8 e4m3 weights (--quantization fp8) for steps past
// the GEMV's sizes: y[T, N] = x[T, K] . W^T with W[n, k] = e4m3(w[n, k]) *
// w_scales[n] ([N, K] row-major codes, one fp32 scale per output row), as
// linear() (gemm.h) does for bf16 W. Two ways:
//   tensor cores (W8A8, where cuBLASLt offers an e4m3 x e4m3 GEMM; never
//     before sm_89): each token's row of x quantized to e4m3 with its own
//     scale (quantize_rows_e4m3), then the GEMM of the codes. Both scales
//     factor out of a dot product, y[t, n] = x_scale[t] * w_scale[n] *
//     sum_k xq[t, k] wq[n, k], so they are applied to the sums either
//     by cuBLASLt itself with outer-vector scales
//     (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: w_scales along N, the
//     tokens' scales along T; CUDA 13.0 does not offer it on sm_90,
//     measured on an H200), or else by a kernel after an unscaled GEMM
//     into sums (scale_e4m3_sums; fp32, or bf16 for a bf16 output);
//   dequantized (otherwise): W written out as bf16 into a scratch matrix
//     (dequantize_e4m3_rows), then linear(): W8A16, weight bytes saved in
//     memory only.
// Thread: one host thread at a time per Fp8Gemm (its plans are cached and
// reused); everything is enqueued on the given stream.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "base/status.h"

namespace tern::cuda {

// For t < rows: scales[t] = max_k |x[t, k]| / 448 and q[t, k] = e4m3(x[t, k] / scales[t])
// (nearest even, saturating), a zero row scale 0 and codes 0: cpu::quantize_fp8_row bit for bit.
cudaError_t quantize_rows_e4m3(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scales,
                               cudaStream_t stream);
// out[n, k] = bf16(e4m3(w[n, k]) * scales[n]) for n < rows, k < cols.
cudaError_t dequantize_e4m3_rows(const uint8_t* w, const float* scales, int64_t rows, int64_t cols, bf16* out,
                                 cudaStream_t stream);
// y[t, n] = sums[t, n] * x_scales[t] * w_scales[n] for t < rows, n < cols,
// stored as `out` says (bf16, fp32, or added to fp32). cols a multiple of
// 4; w_scales and y 16-byte aligned, sums 16-byte (fp32) or 8-byte (bf16:
// the unscaled GEMM's sums rounded to bf16, where the output is bf16 anyway).
// fp32 sums may be y itself with out kF32 (scaled in place).
cudaError_t scale_e4m3_sums(const float* sums, int64_t rows, int64_t cols, const float* x_scales,
                            const float* w_scales, void* y, GemmOut out, cudaStream_t stream);
cudaError_t scale_e4m3_sums(const bf16* sums, int64_t rows, int64_t cols, const float* x_scales,
                            const float* w_scales, void* y, GemmOut out, cudaStream_t stream);

// An unscaled FP8 GEMM's sums [T, N] with the scales that make its
// outputs: y[t, n] = sums[t, n] * x_scales[t] * w_scales[n]
// (scale_e4m3_sums). The sums fp32 (sums, 16-byte aligned) or bf16
// (sums_bf16, 8-byte aligned): one of the two; w_scales 16-byte aligned.
struct Fp8Sums {
  const float* sums = nullptr;
  const float* x_scales = nullptr;  // [T]
  const float* w_scales = nullptr;  // [N]
  const bf16* sums_bf16 = nullptr;
};

// The kernels around an FP8 MLP with the scaling and the quantization
// folded in, each bit for bit the unfused kernels it replaces (so a step
// takes 3 kernels fewer per layer for the same values):
//   add_rmsnorm_e4m3: for t < rows, when delta.sums is set (fp32 sums
//     only), x[t] += delta's y[t] (scale_e4m3_sums with GemmOut::kAddF32);
//     then the row's
//     add_rmsnorm (kernels.h) h = bf16(x[t] / sqrt(mean(x[t]^2) + eps) *
//     weight) and quantize_rows_e4m3(h) into codes [rows, hidden] and
//     scales [rows]; h itself is not stored;
//   silu_mul_e4m3: the gate|up GEMM's sums gu ([rows, 2 * inter], gate
//     first; fp32 or bf16) made bf16 (scale_e4m3_sums, GemmOut::kBf16), silu_mul of
//     them, and quantize_rows_e4m3 of the products into codes [rows, inter]
//     and scales [rows]. inter a multiple of 4 up to kMaxSiluE4m3Inter
//     (its products are held in shared memory), codes 4-byte aligned.
constexpr int64_t kMaxSiluE4m3Inter = 24576;
cudaError_t add_rmsnorm_e4m3(float* x, const Fp8Sums& delta, const float* weight, int64_t rows, int64_t hidden,
                             float eps, uint8_t* codes, float* scales, cudaStream_t stream);
cudaError_t silu_mul_e4m3(const Fp8Sums& gu, int64_t rows, int64_t inter, uint8_t* codes, float* scales,
                          cudaStream_t stream);

struct Fp8Weights {
  const uint8_t* codes = nullptr;  // [N, K], 16-byte aligned
  const float* scales = nullptr;   // [N]
};

// Scratch the calls need, owned by the caller: the quantized activations
// (x_codes: T x K bytes, x_scales: T floats) and, where the scales are
// applied after the GEMM (Fp8Gemm::needs_sums), its sums (sums: room for T x N
// floats; a bf16 output's sums are bf16 and take half) for the tensor cores; the dequantized weights (w_bf16: N x K
// bf16) otherwise.
struct Fp8Scratch {
  uint8_t* x_codes = nullptr;
  float* x_scales = nullptr;
  bf16* w_bf16 = nullptr;
  void* workspace = nullptr;  // cuBLASLt's, of the size given to Fp8Gemm::create
  float* sums = nullptr;
};

class Fp8Gemm {
 public:
  // The cuBLASLt handle; Internal on failure. Call after cudaSetDevice.
  // workspace_bytes: the size of every Fp8Scratch::workspace passed later.
  // fast_accum: the tensor cores' own accumulation throughout
  // (CUBLASLT_MATMUL_DESC_FAST_ACCUM) instead of partial sums promoted into
  // fp32, which is faster and less precise over long K.
  static Result<std::unique_ptr<Fp8Gemm>> create(size_t workspace_bytes, bool fast_accum = false);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // Whether cuBLASLt has an e4m3 GEMM for these sizes and output on this
  // device (K a multiple of 16, N of 8), with outer-vector scales or else
  // unscaled into sums; asked once per shape and remembered. Never
  // true before sm_89.
  bool tensor_cores(int64_t num_tokens, int64_t in_features, int64_t out_features, GemmOut out);
  // Whether that GEMM is the unscaled one, so the call needs Fp8Scratch::sums
  // (false where tensor_cores is).
  bool needs_sums(int64_t num_tokens, int64_t in_features, int64_t out_features, GemmOut out);

  // sums[t, n] = sum_k x_codes[t, k] * codes[n, k] for t < num_tokens: the
  // unscaled e4m3 GEMM that linear() runs where needs_sums says so (same
  // plan, same values), for callers that quantize the input and apply the
  // scales themselves (Fp8Sums): into fp32 sums as linear() does for fp32
  // outputs, or into bf16 sums as it does for bf16 outputs. Internal where
  // no such GEMM is offered for the shape (needs_sums false for kF32,
  // respectively kBf16).
  Status sums(const uint8_t* x_codes, int64_t num_tokens, int64_t in_features, const uint8_t* codes,
              int64_t out_features, float* sums, void* workspace, cudaStream_t stream);
  Status sums(const uint8_t* x_codes, int64_t num_tokens, int64_t in_features, const uint8_t* codes,
              int64_t out_features, bf16* sums, void* workspace, cudaStream_t stream);

  // y (+)= x . W^T; tensor cores when use_tensor_cores and tensor_cores()
  // says so, else the dequantized form (which needs scratch.w_bf16).
  Status linear(cublasHandle_t cublas, const bf16* x, int64_t num_tokens, int64_t in_features, Fp8Weights w,
                int64_t out_features, void* y, GemmOut out_type, const Fp8Scratch& scratch, cudaStream_t stream,
                bool use_tensor_cores);

 private:
  struct Plan;
  // Describes the GEMM (outer-vector scales, or none and fp32 output) and
  // asks cuBLASLt's heuristic for an algorithm; p->ok says whether it gave one.
  Status describe(int64_t num_tokens, int64_t in_features, int64_t out_features, cudaDataType_t c_type,
                  bool outer_scales, Plan* p);
  Fp8Gemm() = default;
  Result<Plan*> plan(int64_t num_tokens, int64_t in_features, int64_t out_features, GemmOut out);
  // sums() for either type (kF32, kBf16), through plan(..., type).
  Status sums_of(const uint8_t* x_codes, int64_t num_tokens, int64_t in_features, const uint8_t* codes,
                 int64_t out_features, void* sums, GemmOut type, void* workspace, cudaStream_t stream);

  cublasLtHandle_t lt_ = nullptr;
  int cc_ = 0;  // compute capability, major * 10 + minor
  size_t workspace_bytes_ = 0;
  bool fast_accum_ = false;
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace tern::cuda
