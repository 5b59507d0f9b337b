// tern_gemm_bench: the bf16 linear layers' GEMMs alone at prefill sizes. For
// each shape (rows x in -> out; the output bf16, or added into fp32 as the
// residual stream takes it) and row count: linear() (cublasGemmEx with the
// default algorithm, what a step runs) against every algorithm cuBLASLt's
// heuristic offers for the same problem (up to --candidates), each timed as
// --reps calls captured in one CUDA graph (the host's launch cost is not
// timed) over --copies weight copies taken in turn (the weights come from
// memory, as in a step, not from L2). Each line: the algorithm's id, tile,
// stages, cluster shape, split-K and the heuristic's wave count, then
// microseconds a call, TFLOP/s and the largest difference from linear()'s
// output relative to its largest magnitude. With --k-splits S,...: the same
// product as one strided-batched call whose batch is S slices of K, each
// writing its fp32 partial (a consumer then adds the S partials, as a
// residual add would), timed the same way; its difference is of the
// partials' sum. With --sm90 1: the GEMM of our own (gemm_sm90.h) with the
// shape's epilogue in both tile heights, its e4m3 form on random codes, and
// for gate_up also with SiLU x up fused, against linear() followed by
// silu_mul. With --int4 1: random int4 weights (Int4Weights, as many copies)
// through what int4 layers run: the layer dequantized to bf16 then linear(),
// and int4_gemm on the tensor cores with its own K split and unsplit; the
// difference is int4_gemm's against the dequantized form's.
// Usage: tern_gemm_bench [--rows 2048,4096] [--shapes qkv,o,gate_up,down,o-bf16,down-bf16] [--candidates 64] [--reps 20]
//                        [--copies 16] [--hidden 1024] [--q-dim 2048] [--kv-dim 256] [--intermediate 3072]
//                        [--k-splits 2,3,4] [--sm90 1] [--int4 1]  (--candidates 0: linear() and the K splits only)
// The defaults are ERNIE-4.5-0.3B's layers (16 q heads and 2 kv heads of 128): q|k|v 1024 -> 2560, o
// 2048 -> 1024 (added), gate|up 1024 -> 6144, down 3072 -> 1024 (added); 16 weight copies (84 MB of q|k|v)
// so that the weights come from memory, not from a 50 MB L2. o-bf16 and down-bf16 are o and down
// written as bf16 instead of added into fp32 (what a residual add outside the GEMM would take).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_sm90.h"
#include "backend/cuda/kernels.h"
#include "base/bf16.h"
#include "comma_list.h"

namespace {

namespace cuda = tern::cuda;
using cuda::bf16;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tern_gemm_bench: %s\n", what.c_str());
  std::exit(1);
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) die(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

struct Shape {
  std::string name;
  int64_t in = 0, out = 0;
  cuda::GemmOut kind = cuda::GemmOut::kBf16;
};

// Device copies of the problem: x [rows][in], `copies` weights [out][in], y [rows][out] and a reference y.
struct Problem {
  int64_t rows = 0;
  Shape shape;
  bf16* x = nullptr;
  std::vector<bf16*> w;
  void* y = nullptr;
  size_t y_bytes = 0;
};

std::vector<bf16> random_bf16(size_t n, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<bf16> v(n);
  for (bf16& e : v) e = tern::f32_to_bf16(d(rng));
  return v;
}

void* upload(const void* data, size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  check(cudaMemcpy(p, data, bytes, cudaMemcpyHostToDevice), "upload");
  return p;
}

// Microseconds a call of `call(i)` (weights copy i % copies), `reps` calls in one graph, best of 3 launches.
template <typename Call>
double time_graph(cudaStream_t stream, int reps, const Call& call) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  bool ok = true;
  for (int i = 0; i < reps && ok; ++i) ok = call(i);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  if (!ok) {
    cudaGraphDestroy(graph);
    return -1;
  }
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaGraphLaunch(exec, stream), "warm-up launch");
  double best = 1e30;
  for (int k = 0; k < 3; ++k) {
    check(cudaEventRecord(start, stream), "record");
    check(cudaGraphLaunch(exec, stream), "launch");
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "graph run");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    best = std::min(best, 1000.0 * ms / reps);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return best;
}

// y as floats (bf16 or fp32 output).
std::vector<float> download_y(const Problem& p) {
  std::vector<float> out(static_cast<size_t>(p.rows * p.shape.out));
  if (p.shape.kind == cuda::GemmOut::kBf16) {
    std::vector<bf16> raw(out.size());
    check(cudaMemcpy(raw.data(), p.y, p.y_bytes, cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < raw.size(); ++i) out[i] = tern::bf16_to_f32(raw[i]);
  } else {
    check(cudaMemcpy(out.data(), p.y, p.y_bytes, cudaMemcpyDeviceToHost), "download");
  }
  return out;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double top = 0, diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    top = std::max(top, static_cast<double>(std::fabs(ref[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - ref[i])));
  }
  return top > 0 ? diff / top : diff;
}

template <typename T>
T algo_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) != CUBLAS_STATUS_SUCCESS) {
    return T{};
  }
  return value;
}

// The product as `splits` K slices in one strided-batched call, fp32 partials [splits][T][N] in `partials`;
// microseconds a call, and the partials' sum's largest difference from `ref` relative to its largest magnitude.
void run_k_splits(const Problem& p, cublasHandle_t blas, cudaStream_t stream, int splits, int reps, float* partials,
                  const std::vector<float>& ref, double base_us) {
  const int64_t T = p.rows, K = p.shape.in, N = p.shape.out;
  if (K % splits != 0 || (K / splits) % 8 != 0) {
    std::printf("  k-splits %d: K %ld does not split into 8-aligned slices\n", splits, static_cast<long>(K));
    return;
  }
  const int copies = static_cast<int>(p.w.size());
  const int m = static_cast<int>(N), n = static_cast<int>(T), k = static_cast<int>(K / splits);
  const float alpha = 1.0f, beta = 0.0f;
  const auto run = [&](int copy) {
    return cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha,
                                      p.w[static_cast<size_t>(copy % copies)], CUDA_R_16BF, static_cast<int>(K), k,
                                      p.x, CUDA_R_16BF, static_cast<int>(K), k, &beta, partials, CUDA_R_32F, m,
                                      static_cast<int64_t>(m) * n, splits, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  };
  if (!run(0) || cudaStreamSynchronize(stream) != cudaSuccess) {
    std::printf("  k-splits %d: does not run\n", splits);
    return;
  }
  std::vector<float> parts(static_cast<size_t>(splits * T * N)), sum(static_cast<size_t>(T * N), 0.0f);
  check(cudaMemcpy(parts.data(), partials, parts.size() * sizeof(float), cudaMemcpyDeviceToHost), "partials");
  for (int sp = 0; sp < splits; ++sp) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += parts[static_cast<size_t>(sp) * sum.size() + i];
  }
  const double us = time_graph(stream, reps, run);
  const double flops = 2.0 * static_cast<double>(T) * static_cast<double>(K) * static_cast<double>(N);
  std::printf("  k-splits %d (strided batch, fp32 partials)  %9.2f us %7.1f TFLOP/s  %.2fx  diff %.1e\n", splits, us,
              us > 0 ? flops / us * 1e-6 : 0.0, us > 0 ? base_us / us : 0.0, max_rel_diff(sum, ref));
}

// The tile shapes timed: rows x columns.
const cuda::Sm90Tiles kSm90Tiles[] = {{128, 128, 0, 1}, {64, 128, 0, 1},  {128, 256, 0, 1},
                                      {64, 256, 0, 1},  {128, 128, 0, 2}, {128, 256, 0, 2}};

std::string tiles_label(const cuda::Sm90Tiles& t) {
  return std::to_string(t.rows) + "x" + std::to_string(t.cols) + (t.cluster == 2 ? " pairs" : "");
}

// The GEMM of our own (gemm_sm90.h) on the same problem with the shape's epilogue, in each tile shape; for
// gate|up also with SiLU x up in its epilogue against linear() then silu_mul (into `act`, [T][N / 2] bf16).
void run_sm90(const Problem& p, cublasHandle_t blas, cudaStream_t stream, int reps, const std::vector<float>& ref,
              double base_us, bf16* act) {
  const int64_t T = p.rows, K = p.shape.in, N = p.shape.out;
  const double flops = 2.0 * static_cast<double>(T) * static_cast<double>(K) * static_cast<double>(N);
  const int copies = static_cast<int>(p.w.size());
  const cuda::Sm90Epilogue e = cuda::sm90_epilogue(p.shape.kind);
  for (const cuda::Sm90Tiles& tiles : kSm90Tiles) {
    check(cudaMemsetAsync(p.y, 0, p.y_bytes, stream), "clear y");
    const tern::Status first = cuda::sm90_linear(p.x, T, K, p.w[0], N, p.y, e, stream, tiles);
    if (!first.is_ok()) {
      std::printf("  sm90 gemm %s: %s\n", tiles_label(tiles).c_str(), first.to_string().c_str());
      continue;
    }
    check(cudaStreamSynchronize(stream), "sm90 gemm");
    const double diff = max_rel_diff(download_y(p), ref);
    const double us = time_graph(stream, reps, [&](int i) {
      return cuda::sm90_linear(p.x, T, K, p.w[static_cast<size_t>(i % copies)], N, p.y, e, stream, tiles).is_ok();
    });
    const std::string label = "sm90 gemm (own, " + tiles_label(tiles) + " tiles)";
    std::printf("  %-34s %9.2f us %7.1f TFLOP/s  %.2fx  diff %.1e\n", label.c_str(), us,
                us > 0 ? flops / us * 1e-6 : 0.0, us > 0 ? base_us / us : 0.0, diff);
  }
  // The same shape on e4m3 codes with row scales in the epilogue (W8A8), against linear()'s bf16 time.
  if (K % 16 == 0) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> byte(0, 0x7e);  // finite codes, both signs by the top bit below
    const auto codes = [&](size_t n) {
      std::vector<uint8_t> v(n);
      for (auto& b : v) b = static_cast<uint8_t>(byte(rng) | ((byte(rng) & 1) << 7));
      return static_cast<uint8_t*>(upload(v.data(), v.size()));
    };
    uint8_t* xc = codes(static_cast<size_t>(T * K));
    std::vector<uint8_t*> wc;
    for (int c = 0; c < copies; ++c) wc.push_back(codes(static_cast<size_t>(N * K)));
    const std::vector<float> ones(static_cast<size_t>(std::max(T, N)), 1.0f / 448);
    auto* scales = static_cast<float*>(upload(ones.data(), ones.size() * sizeof(float)));
    for (const cuda::Sm90Tiles& tiles : kSm90Tiles) {
      if (tiles.cols != 128) continue;  // 256-column tiles take bf16 only
      const double us = time_graph(stream, reps, [&](int i) {
        return cuda::sm90_linear_e4m3(xc, scales, T, K, wc[static_cast<size_t>(i % copies)], scales, N, p.y, e,
                                      stream, tiles)
            .is_ok();
      });
      const std::string label = "sm90 gemm e4m3 (" + tiles_label(tiles) + " tiles)";
      std::printf("  %-34s %9.2f us %7.1f TFLOP/s  %.2fx\n", label.c_str(), us, us > 0 ? flops / us * 1e-6 : 0.0,
                  us > 0 ? base_us / us : 0.0);
    }
    cudaFree(xc);
    for (uint8_t* w8 : wc) cudaFree(w8);
    cudaFree(scales);
  }
  if (p.shape.name != "gate_up" || N % 128 != 0) return;
  const int64_t I = N / 2;
  const double unfused_us = time_graph(stream, reps, [&](int i) {
    return cuda::linear(blas, p.x, T, K, p.w[static_cast<size_t>(i % copies)], N, p.y, p.shape.kind).is_ok() &&
           cuda::silu_mul(static_cast<const bf16*>(p.y), T, I, act, stream) == cudaSuccess;
  });
  // SiLU x up of linear()'s bf16 output: the fused form's reference.
  check(cudaMemsetAsync(p.y, 0, p.y_bytes, stream), "clear y");
  if (!cuda::linear(blas, p.x, T, K, p.w[0], N, p.y, p.shape.kind).is_ok()) die("linear() failed");
  check(cuda::silu_mul(static_cast<const bf16*>(p.y), T, I, act, stream), "silu_mul");
  std::vector<bf16> a_ref(static_cast<size_t>(T * I)), a_own(a_ref.size());
  check(cudaMemcpyAsync(a_ref.data(), act, a_ref.size() * sizeof(bf16), cudaMemcpyDeviceToHost, stream), "act");
  check(cudaStreamSynchronize(stream), "act");
  std::vector<float> fr(a_ref.size()), fo(a_own.size());
  for (size_t i = 0; i < fr.size(); ++i) fr[i] = tern::bf16_to_f32(a_ref[i]);
  for (const cuda::Sm90Tiles& tiles : kSm90Tiles) {
    check(cudaMemsetAsync(act, 0, a_own.size() * sizeof(bf16), stream), "clear act");
    const tern::Status first =
        cuda::sm90_linear(p.x, T, K, p.w[0], N, act, cuda::Sm90Epilogue::kSiluMul, stream, tiles);
    if (!first.is_ok()) {
      std::printf("  sm90 SiLU x up %s: %s\n", tiles_label(tiles).c_str(), first.to_string().c_str());
      continue;
    }
    check(cudaMemcpyAsync(a_own.data(), act, a_own.size() * sizeof(bf16), cudaMemcpyDeviceToHost, stream), "act");
    check(cudaStreamSynchronize(stream), "act");
    for (size_t i = 0; i < fo.size(); ++i) fo[i] = tern::bf16_to_f32(a_own[i]);
    const double fused_us = time_graph(stream, reps, [&](int i) {
      return cuda::sm90_linear(p.x, T, K, p.w[static_cast<size_t>(i % copies)], N, act, cuda::Sm90Epilogue::kSiluMul,
                               stream, tiles)
          .is_ok();
    });
    const std::string label = "sm90 SiLU x up, " + tiles_label(tiles) + " tiles";
    std::printf("  %-34s %9.2f us against linear() + silu_mul %.2f us (%.2fx)  diff %.1e\n", label.c_str(), fused_us,
                unfused_us, fused_us > 0 ? unfused_us / fused_us : 0.0, max_rel_diff(fo, fr));
  }
}

// int4 weights of the problem's shape, `copies` of them: random codes, zeros in [0, 15] and fp16 scales that
// keep the products near the bf16 weights' size; each against the dequantized form then linear().
void run_int4(const Problem& p, cublasHandle_t blas, cudaStream_t stream, int reps, double base_us) {
  const int64_t T = p.rows, K = p.shape.in, N = p.shape.out;
  const int copies = static_cast<int>(p.w.size());
  std::mt19937 rng(static_cast<uint32_t>(T * 131 + N));
  std::uniform_int_distribution<int> byte(0, 255), nibble(0, 15);
  std::vector<cuda::Int4Weights> w;
  std::vector<void*> owned;
  for (int c = 0; c < copies; ++c) {
    std::vector<uint8_t> codes(static_cast<size_t>(N * K / 2)), zeros(static_cast<size_t>(N * K / 32));
    std::vector<uint16_t> scales(zeros.size());
    for (uint8_t& b : codes) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& z : zeros) z = static_cast<uint8_t>(nibble(rng));
    for (uint16_t& d : scales) d = tern::f32_to_f16(0.01f);
    owned.push_back(upload(codes.data(), codes.size()));
    owned.push_back(upload(scales.data(), scales.size() * sizeof(uint16_t)));
    owned.push_back(upload(zeros.data(), zeros.size()));
    w.push_back({static_cast<uint8_t*>(owned[owned.size() - 3]), static_cast<uint16_t*>(owned[owned.size() - 2]),
                 static_cast<uint8_t*>(owned.back())});
  }
  bf16* dequantized = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&dequantized), static_cast<size_t>(N * K) * sizeof(bf16)), "dequantized");
  const int most = static_cast<int>(std::min<int64_t>(cuda::kInt4MaxSplits, K / 128));
  float* partials = nullptr;
  int* counters = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&partials), static_cast<size_t>(most * T * N) * sizeof(float)), "partials");
  check(cudaMalloc(reinterpret_cast<void**>(&counters), 1024 * sizeof(int)), "counters");
  check(cudaMemset(counters, 0, 1024 * sizeof(int)), "counters");
  const cuda::Int4GemmScratch scratch{partials, static_cast<size_t>(most * T * N), counters, 1024};
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  const int automatic = cuda::int4_gemm_splits(T, K, N, prop.multiProcessorCount, scratch);
  const cuda::GemvOutput form = cuda::gemv_output_of(p.shape.kind);
  const auto dequantize_then_linear = [&](int i) {
    return cuda::dequantize_int4_rows(w[static_cast<size_t>(i % copies)], N, K, dequantized, stream) == cudaSuccess &&
           cuda::linear(blas, p.x, T, K, dequantized, N, p.y, p.shape.kind).is_ok();
  };
  const auto tensor_cores = [&](int splits) {
    return [&, splits](int i) {
      return cuda::int4_gemm(p.x, T, K, w[static_cast<size_t>(i % copies)], N, p.y, form, splits, scratch, stream) ==
             cudaSuccess;
    };
  };
  const auto output_of = [&](const auto& call) {
    check(cudaMemsetAsync(p.y, 0, p.y_bytes, stream), "clear y");
    if (!call(0)) die("int4 product failed");
    check(cudaStreamSynchronize(stream), "int4 product");
    return download_y(p);
  };
  const std::vector<float> ref = output_of(dequantize_then_linear);
  const double flops = 2.0 * static_cast<double>(T) * static_cast<double>(K) * static_cast<double>(N);
  const auto report = [&](const std::string& label, double us, double diff) {
    std::printf("  %-34s %9.2f us %7.1f TFLOP/s  %.2fx", label.c_str(), us, flops / us * 1e-6, base_us / us);
    if (diff >= 0) std::printf("  diff %.1e", diff);
    std::printf("\n");
  };
  report("int4: dequantized, then linear()", time_graph(stream, reps, dequantize_then_linear), -1);
  for (int splits : {automatic, 1}) {
    const std::vector<float> got = output_of(tensor_cores(splits));
    report("int4_gemm, " + std::to_string(splits) + " K slice" + (splits > 1 ? "s" : ""),
           time_graph(stream, reps, tensor_cores(splits)), max_rel_diff(got, ref));
    if (automatic == 1) break;
  }
  cudaFree(counters);
  cudaFree(partials);
  cudaFree(dequantized);
  for (void* q : owned) cudaFree(q);
}

void run_problem(const Problem& p, cublasHandle_t blas, cublasLtHandle_t lt, void* workspace, size_t ws_bytes,
                 cudaStream_t stream, int candidates, int reps, const std::vector<int64_t>& k_splits,
                 float* partials, bool sm90, bool int4, bf16* act) {
  const int64_t T = p.rows, K = p.shape.in, N = p.shape.out;
  const double flops = 2.0 * static_cast<double>(T) * static_cast<double>(K) * static_cast<double>(N);
  const int copies = static_cast<int>(p.w.size());
  const auto clear_y = [&] { check(cudaMemsetAsync(p.y, 0, p.y_bytes, stream), "clear y"); };

  // linear() as a step runs it: the reference output first, then its time.
  clear_y();
  if (!cuda::linear(blas, p.x, T, K, p.w[0], N, p.y, p.shape.kind).is_ok()) die("linear() failed");
  check(cudaStreamSynchronize(stream), "linear()");
  const std::vector<float> ref = download_y(p);
  const double base_us = time_graph(stream, reps, [&](int i) {
    return cuda::linear(blas, p.x, T, K, p.w[static_cast<size_t>(i % copies)], N, p.y, p.shape.kind).is_ok();
  });
  const char* kind = p.shape.kind == cuda::GemmOut::kBf16 ? "bf16" : "add f32";
  std::printf("%-8s %5ld x %5ld -> %5ld (%s)\n", p.shape.name.c_str(), static_cast<long>(T), static_cast<long>(K),
              static_cast<long>(N), kind);
  std::printf("  %-34s %9.2f us %7.1f TFLOP/s\n", "linear() (cublasGemmEx, default)", base_us,
              flops / base_us * 1e-6);
  // The added shapes' reference is y = x W^T (y starts at zero), so the partials' sum compares with it.
  for (int64_t sp : k_splits) run_k_splits(p, blas, stream, static_cast<int>(sp), reps, partials, ref, base_us);
  if (sm90) run_sm90(p, blas, stream, reps, ref, base_us, act);
  if (int4) run_int4(p, blas, stream, reps, base_us);
  if (candidates == 0) return;

  // cuBLASLt's view of the same problem (gemm_tuned's layout: D[N, T] = op_T(W) . x).
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)), "transa");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)), "transb");
  const cudaDataType_t c_type = p.shape.kind == cuda::GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  check(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K), "a");
  check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, static_cast<uint64_t>(K), static_cast<uint64_t>(T), K), "b");
  check(cublasLtMatrixLayoutCreate(&lc, c_type, static_cast<uint64_t>(N), static_cast<uint64_t>(T), N), "c");
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                             sizeof(ws_bytes)),
        "workspace preference");
  std::vector<cublasLtMatmulHeuristicResult_t> found(static_cast<size_t>(candidates));
  int count = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, candidates, found.data(), &count),
        "heuristic");
  const float alpha = 1.0f, beta = p.shape.kind == cuda::GemmOut::kAddF32 ? 1.0f : 0.0f;
  double best_us = 1e30;
  int best = -1;
  for (int i = 0; i < count; ++i) {
    const cublasLtMatmulHeuristicResult_t& h = found[static_cast<size_t>(i)];
    if (h.state != CUBLAS_STATUS_SUCCESS) continue;
    const auto run = [&](int copy) {
      return cublasLtMatmul(lt, desc, &alpha, p.w[static_cast<size_t>(copy % copies)], la, p.x, lb, &beta, p.y, lc,
                            p.y, lc, &h.algo, workspace, ws_bytes, stream) == CUBLAS_STATUS_SUCCESS;
    };
    clear_y();
    if (!run(0) || cudaStreamSynchronize(stream) != cudaSuccess) {
      std::printf("  candidate %2d: does not run\n", i);
      continue;
    }
    const double diff = max_rel_diff(download_y(p), ref);
    const double us = time_graph(stream, reps, run);
    if (us > 0 && us < best_us) {
      best_us = us;
      best = i;
    }
    std::printf("  candidate %2d: id %3d tile %3u stages %3u cluster %3u split-k %2u waves %5.2f %9.2f us %7.1f "
                "TFLOP/s  diff %.1e\n",
                i, algo_attr<int>(h.algo, CUBLASLT_ALGO_CONFIG_ID), algo_attr<uint32_t>(h.algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                algo_attr<uint32_t>(h.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                static_cast<unsigned>(algo_attr<uint16_t>(h.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)),
                algo_attr<uint32_t>(h.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), h.wavesCount, us,
                us > 0 ? flops / us * 1e-6 : 0.0, diff);
  }
  if (best >= 0) {
    std::printf("  best: candidate %d, %.2f us against %.2f (%.2fx)\n", best, best_us, base_us, base_us / best_us);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
}

int64_t positive(const char* flag, const std::string& value) {
  const int64_t v = std::atoll(value.c_str());
  if (v < 1) die(std::string(flag) + " takes a positive number, not '" + value + "'");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string rows_arg = "2048,4096", shapes_arg = "qkv,o,gate_up,down";
  std::string k_splits_arg;
  bool sm90 = false, int4 = false;
  int64_t candidates = 64, reps = 20, copies = 16, hidden = 1024, q_dim = 2048, kv_dim = 256, inter = 3072;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help") {
      std::printf("usage: tern_gemm_bench [--rows 2048,4096] [--shapes qkv,o,gate_up,down] [--candidates 64] "
                  "[--reps 20] [--copies 16] [--hidden 1024] [--q-dim 2048] [--kv-dim 256] [--intermediate 3072] "
                  "[--k-splits 2,3,4] [--sm90 1]\n");
      return 0;
    }
    if (i + 1 >= argc) die("unknown or incomplete argument '" + a + "' (--help)");
    const std::string v = argv[++i];
    if (a == "--rows") rows_arg = v;
    else if (a == "--shapes") shapes_arg = v;
    else if (a == "--candidates") candidates = v == "0" ? 0 : positive("--candidates", v);  // 0: none
    else if (a == "--k-splits") k_splits_arg = v;
    else if (a == "--sm90") sm90 = v != "0";
    else if (a == "--int4") int4 = v != "0";
    else if (a == "--reps") reps = positive("--reps", v);
    else if (a == "--copies") copies = positive("--copies", v);
    else if (a == "--hidden") hidden = positive("--hidden", v);
    else if (a == "--q-dim") q_dim = positive("--q-dim", v);
    else if (a == "--kv-dim") kv_dim = positive("--kv-dim", v);
    else if (a == "--intermediate") inter = positive("--intermediate", v);
    else die("unknown argument '" + a + "' (--help)");
  }
  std::vector<int64_t> row_counts;
  for (const std::string& s : tern::bench::comma_list(rows_arg)) row_counts.push_back(positive("--rows", s));
  std::vector<int64_t> k_splits;
  if (!k_splits_arg.empty()) {
    for (const std::string& s : tern::bench::comma_list(k_splits_arg)) k_splits.push_back(positive("--k-splits", s));
  }
  std::vector<Shape> shapes;
  for (const std::string& s : tern::bench::comma_list(shapes_arg)) {
    if (s == "qkv") shapes.push_back({s, hidden, q_dim + 2 * kv_dim, cuda::GemmOut::kBf16});
    else if (s == "o") shapes.push_back({s, q_dim, hidden, cuda::GemmOut::kAddF32});
    else if (s == "gate_up") shapes.push_back({s, hidden, 2 * inter, cuda::GemmOut::kBf16});
    else if (s == "down") shapes.push_back({s, inter, hidden, cuda::GemmOut::kAddF32});
    else if (s == "o-bf16") shapes.push_back({s, q_dim, hidden, cuda::GemmOut::kBf16});
    else if (s == "down-bf16") shapes.push_back({s, inter, hidden, cuda::GemmOut::kBf16});
    else die("unknown shape '" + s + "' (qkv, o, gate_up, down, o-bf16, down-bf16)");
  }

  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  check(cublasCreate(&blas), "cublasCreate");
  check(cublasLtCreate(&lt), "cublasLtCreate");
  constexpr size_t kWorkspace = size_t{32} << 20;
  void* workspace = nullptr;
  check(cudaMalloc(&workspace, kWorkspace), "workspace");
  check(cublasSetStream(blas, stream), "cublasSetStream");
  check(cublasSetWorkspace(blas, workspace, kWorkspace), "cublasSetWorkspace");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  std::printf("%s, %d SMs; %ld graph-captured calls a time, %ld weight copies\n", prop.name, prop.multiProcessorCount,
              static_cast<long>(reps), static_cast<long>(copies));

  std::mt19937 rng(11);
  for (const Shape& s : shapes) {
    std::vector<bf16*> weights;
    for (int64_t c = 0; c < copies; ++c) {
      const std::vector<bf16> w = random_bf16(static_cast<size_t>(s.in * s.out), rng, 0.05f);
      weights.push_back(static_cast<bf16*>(upload(w.data(), w.size() * sizeof(bf16))));
    }
    for (int64_t rows : row_counts) {
      const std::vector<bf16> x = random_bf16(static_cast<size_t>(rows * s.in), rng, 1.0f);
      Problem p;
      p.rows = rows;
      p.shape = s;
      p.x = static_cast<bf16*>(upload(x.data(), x.size() * sizeof(bf16)));
      p.w = weights;
      p.y_bytes = static_cast<size_t>(rows * s.out) * (s.kind == cuda::GemmOut::kBf16 ? sizeof(bf16) : sizeof(float));
      check(cudaMalloc(&p.y, p.y_bytes), "y");
      int64_t most_splits = 0;
      for (int64_t sp : k_splits) most_splits = std::max(most_splits, sp);
      float* partials = nullptr;
      if (most_splits > 0) {
        const size_t bytes = static_cast<size_t>(most_splits * rows * s.out) * sizeof(float);
        check(cudaMalloc(reinterpret_cast<void**>(&partials), bytes), "partials");
      }
      bf16* act = nullptr;  // SiLU x up's output for gate|up
      if (sm90) check(cudaMalloc(reinterpret_cast<void**>(&act), static_cast<size_t>(rows * s.out / 2) * 2), "act");
      run_problem(p, blas, lt, workspace, kWorkspace, stream, static_cast<int>(candidates), static_cast<int>(reps),
                  k_splits, partials, sm90, int4, act);
      cudaFree(act);
      cudaFree(partials);
      cudaFree(p.x);
      cudaFree(p.y);
    }
    for (bf16* w : weights) cudaFree(w);
  }
  cudaFree(workspace);
  cublasLtDestroy(lt);
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
  return 0;
}
