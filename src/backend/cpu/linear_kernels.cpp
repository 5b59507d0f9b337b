// linear_fast: picks the instruction set and weight format, lays out the
// activations the chosen kernel reads (once per call, on the calling thread,
// into that thread's reused scratch), then splits the weight rows over the
// pool. The SIMD loops themselves live in linear_avx2.cpp / linear_avx512.cpp;
// quantized weights go to quant_linear.cpp.
#include "backend/cpu/linear_kernels.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/linear_isa.h"
#include "backend/cpu/quant_linear.h"
#include "backend/cpu/quant_pack.h"
#include "backend/cpu/row_split.h"
#include "base/bf16.h"

namespace tern::cpu {
namespace {

using linear_isa::IsaKernels;
using linear_isa::LinearTask;
using linear_isa::RowsFn;

#if defined(__x86_64__) && defined(__GNUC__)
bool cpu_has_avx2() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}
bool cpu_has_avx512() {
  static const bool has = cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq");
  return has;
}
#else
bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
#endif

// Rows per unit of the parallel split: a multiple of every tile width.
constexpr int64_t kRowUnit = 48;

// Activations rearranged for a kernel. Per thread, grown and never shrunk, so
// steady-state calls do not allocate.
struct Scratch {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};
Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Each `chunk`-element block of each row becomes its even elements then its
// odd ones (the order Bf16Split's weight widening produces); the last
// K % chunk elements stay in order.
const float* split_pairs(const float* x, int64_t num_tokens, int64_t cols, int chunk) {
  std::vector<float>& out = thread_scratch().f32;
  const auto n = static_cast<size_t>(num_tokens * cols);
  if (out.size() < n) out.resize(n);
  const int half = chunk / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* src = x + t * cols;
    float* dst = out.data() + t * cols;
    int64_t k = 0;
    for (; k + chunk <= cols; k += chunk) {
      for (int i = 0; i < half; ++i) {
        dst[k + i] = src[k + 2 * i];
        dst[k + half + i] = src[k + 2 * i + 1];
      }
    }
    for (; k < cols; ++k) dst[k] = src[k];
  }
  return out.data();
}

// x rounded to bf16, rows `stride` (cols rounded up to even) apart, the
// padding element zero: the panel kernel reads x in (k, k + 1) pairs.
const uint16_t* round_to_bf16_pairs(const IsaKernels& kernels, const float* x, int64_t num_tokens, int64_t cols,
                                    int64_t stride) {
  std::vector<uint16_t>& out = thread_scratch().bf16;
  const auto n = static_cast<size_t>(num_tokens * stride);
  if (out.size() < n) out.resize(n);
  if (kernels.round_bf16 != nullptr) {
    kernels.round_bf16(x, num_tokens, cols, stride, out.data());
    return out.data();
  }
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t k = 0; k < cols; ++k) out[static_cast<size_t>(t * stride + k)] = f32_to_bf16(x[t * cols + k]);
    if (stride > cols) out[static_cast<size_t>(t * stride + cols)] = 0;
  }
  return out.data();
}

const uint16_t* round_to_bf16(const IsaKernels& kernels, const float* x, int64_t num_tokens, int64_t cols) {
  return round_to_bf16_pairs(kernels, x, num_tokens, cols, cols);
}

#if defined(__x86_64__) && defined(__GNUC__)
const IsaKernels* kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return &linear_isa::avx512_kernels();
    case CpuIsa::kAvx2:
      return &linear_isa::avx2_kernels();
    default:
      return nullptr;
  }
}
#else
const IsaKernels* kernels_for(CpuIsa) { return nullptr; }
#endif

// The kernel for this weight dtype, with x laid out for it in `task`.
RowsFn prepare(const IsaKernels& kernels, const float* x, int64_t num_tokens, const WeightMatrix& w,
               Activations activations, bool has_bf16_dot, LinearTask& task) {
  task.x = x;
  task.x_stride = w.cols;
  switch (w.dtype) {
    case DType::kBF16:
      if (activations == Activations::kBf16 && has_bf16_dot && kernels.bf16_panels != nullptr &&
          w.packed != nullptr && w.packed->dtype == DType::kBF16) {
        task.x_stride = w.cols + w.cols % 2;
        task.x = round_to_bf16_pairs(kernels, x, num_tokens, w.cols, task.x_stride);
        task.w = w.packed->data.data();
        return kernels.bf16_panels;
      }
      if (activations == Activations::kBf16 && has_bf16_dot && kernels.bf16_dot != nullptr) {
        task.x = round_to_bf16(kernels, x, num_tokens, w.cols);
        return kernels.bf16_dot;
      }
      task.x = split_pairs(x, num_tokens, w.cols, kernels.pair_chunk);
      return kernels.bf16_exact;
    case DType::kF16:
      return kernels.f16;
    default:
      return kernels.f32;
  }
}

}  // namespace

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

CpuIsa best_cpu_isa() {
  if (cpu_has_avx512()) return CpuIsa::kAvx512;
  if (cpu_has_avx2()) return CpuIsa::kAvx2;
  return CpuIsa::kPortable;
}

namespace {

// y = x . W^T for up to kMaxStacked unquantized matrices of one dtype and
// width (a packed one only alone): x is laid out once and one pool call
// covers all their rows, taken as one stacked matrix. Every output's
// arithmetic depends only on its own row and token, so the bits are those of
// one call per matrix.
constexpr size_t kMaxStacked = 4;

void linear_stacked(ThreadPool& pool, const IsaKernels& kernels, CpuIsa isa, const float* x, int64_t num_tokens,
                    std::span<const WeightMatrix* const> ws, std::span<float* const> ys, Activations activations) {
  const bool has_bf16_dot = isa == CpuIsa::kAvx512 && cpu_has_avx512_bf16();
  LinearTask tasks[kMaxStacked];
  int64_t first_row[kMaxStacked + 1] = {0};
  RowsFn rows_fn = nullptr;
  for (size_t i = 0; i < ws.size(); ++i) {
    const WeightMatrix& w = *ws[i];
    tasks[i] = LinearTask{.num_tokens = num_tokens, .w = w.data, .rows = w.rows, .cols = w.cols, .y = ys[i]};
    if (i == 0) {
      rows_fn = prepare(kernels, x, num_tokens, w, activations, has_bf16_dot, tasks[0]);
    } else {
      tasks[i].x = tasks[0].x;
      tasks[i].x_stride = tasks[0].x_stride;
    }
    first_row[i + 1] = first_row[i] + w.rows;
  }
  const auto count = static_cast<int64_t>(ws.size());
  const int64_t token_block = tokens_per_chunk(first_row[count], num_tokens, pool.num_threads());
  if (token_block >= num_tokens) {
    split_rows(pool, first_row[count], ws[0]->cols, num_tokens, kRowUnit, [&](int64_t first, int64_t end) {
      for (int64_t i = 0; i < count; ++i) {
        const int64_t lo = std::max(first, first_row[i]), hi = std::min(end, first_row[i + 1]);
        if (lo < hi) rows_fn(tasks[i], lo - first_row[i], hi - first_row[i]);
      }
    });
    return;
  }
  // Chunks of rows x tokens: each a task over its tokens' rows of x and y.
  const bool bf16_x = rows_fn == kernels.bf16_panels || rows_fn == kernels.bf16_dot;
  const int64_t x_bytes = bf16_x ? 2 : 4;
  split_rows_tokens(pool, first_row[count], ws[0]->cols, num_tokens, kRowUnit, token_block,
                    [&](int64_t first, int64_t end, int64_t t0, int64_t t1) {
                      for (int64_t i = 0; i < count; ++i) {
                        const int64_t lo = std::max(first, first_row[i]), hi = std::min(end, first_row[i + 1]);
                        if (lo >= hi) continue;
                        LinearTask part = tasks[i];
                        part.x = static_cast<const char*>(part.x) + t0 * part.x_stride * x_bytes;
                        part.num_tokens = t1 - t0;
                        part.y = part.y + t0 * part.rows;
                        rows_fn(part, lo - first_row[i], hi - first_row[i]);
                      }
                    });
}

}  // namespace

void linear_fast(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y,
                 const LinearOptions& options) {
  if (num_tokens <= 0 || w.rows <= 0) return;
  if (is_quantized_weight_dtype(w.dtype)) {
    linear_quantized(pool, x, num_tokens, w, y, options.max_isa);
    return;
  }
  const CpuIsa isa = std::min(options.max_isa, best_cpu_isa());
  const IsaKernels* kernels = kernels_for(isa);
  if (kernels == nullptr) {
    linear(pool, x, num_tokens, w, y);
    return;
  }
  const WeightMatrix* one[] = {&w};
  float* const out[] = {y};
  linear_stacked(pool, *kernels, isa, x, num_tokens, one, out, options.activations);
}

void linear_fast_many(ThreadPool& pool, const float* x, int64_t num_tokens, std::span<const WeightMatrix* const> ws,
                      std::span<float* const> ys, const LinearOptions& options) {
  if (linear_quantized_many(pool, x, num_tokens, ws, ys, options.max_isa)) return;
  const CpuIsa isa = std::min(options.max_isa, best_cpu_isa());
  const IsaKernels* kernels = kernels_for(isa);
  bool together = kernels != nullptr && num_tokens > 0 && ws.size() > 1 && ws.size() <= kMaxStacked &&
                  ws.size() == ys.size();
  for (size_t i = 0; together && i < ws.size(); ++i) {
    together = !is_quantized_weight_dtype(ws[i]->dtype) && ws[i]->dtype == ws[0]->dtype &&
               ws[i]->cols == ws[0]->cols && ws[i]->packed == nullptr;
  }
  if (!together) {
    for (size_t i = 0; i < ws.size(); ++i) linear_fast(pool, x, num_tokens, *ws[i], ys[i], options);
    return;
  }
  linear_stacked(pool, *kernels, isa, x, num_tokens, ws, ys, options.activations);
}

}  // namespace tern::cpu
