// The quantized linear path: quantizes x into the calling thread's scratch
// (in parallel over tokens when there are many), splits the weight rows over
// the pool, and holds the portable kernels (plain C++, the same integer sums
// as the SIMD ones) that also serve CPUs without AVX2.
#include "backend/cpu/quant_linear.h"

#include <algorithm>
#include <span>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/quant_isa.h"
#include "backend/cpu/quant_tiling.h"
#include "backend/cpu/row_split.h"
#include "base/bf16.h"

namespace tern::cpu {
namespace quant_isa {
namespace {

inline float fp16(uint16_t h) { return f16_to_f32(h); }

// d = max|x| / 127 and q = nearest-even(x * 127 / max|x|), as the AVX2 set.
void quantize_q8a(const float* x, int64_t n, void* out) {
  auto* y = static_cast<BlockQ8A*>(out);
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float amax = 0.0f;
    for (int i = 0; i < kQK8_0; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = amax / 127.0f;
    for (int i = 0; i < kQK8_0; ++i) y[b].qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  }
}

void quantize_q8k(const float* x, int64_t n, void* out) {
  auto* y = static_cast<BlockQ8K*>(out);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float amax = 0.0f;
    for (int i = 0; i < kQKK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = amax / 127.0f;
    for (int i = 0; i < kQKK; ++i) y[b].qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
    for (int s = 0; s < kQKK / 16; ++s) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * s + i];
      y[b].bsums[s] = static_cast<int16_t>(sum);
    }
  }
}

// Portable kernels: one token at a time (the compiler gets no help from MR).
template <class Dot>
struct Portable {
  template <int MR>
  static void dot(const uint8_t* w, const uint8_t* x, int64_t x_row_bytes, int64_t blocks, float* out) {
    for (int m = 0; m < MR; ++m) out[m] = Dot::row(w, x + m * x_row_bytes, blocks);
  }
};

struct DotQ8_0 {
  static float row(const uint8_t* wp, const uint8_t* xp, int64_t blocks) {
    const auto* w = reinterpret_cast<const BlockQ8_0*>(wp);
    const auto* x = reinterpret_cast<const BlockQ8A*>(xp);
    float sum = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      int sumi = 0;
      for (int i = 0; i < kQK8_0; ++i) sumi += w[b].qs[i] * x[b].qs[i];
      sum += fp16(w[b].d) * x[b].d * static_cast<float>(sumi);
    }
    return sum;
  }
};

struct DotQ4_0 {
  static float row(const uint8_t* wp, const uint8_t* xp, int64_t blocks) {
    const auto* w = reinterpret_cast<const BlockQ4_0*>(wp);
    const auto* x = reinterpret_cast<const BlockQ8A*>(xp);
    float sum = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      int sumi = 0;
      for (int i = 0; i < kQK8_0 / 2; ++i) {
        sumi += ((w[b].qs[i] & 0xF) - 8) * x[b].qs[i] + ((w[b].qs[i] >> 4) - 8) * x[b].qs[i + 16];
      }
      sum += fp16(w[b].d) * x[b].d * static_cast<float>(sumi);
    }
    return sum;
  }
};

// Q4_K and Q5_K: sum_j sc_j (q . x)_j scaled by d, minus dmin sum_j m_j (bsums of sub-block j).
template <bool kFifthBit>
struct DotK4 {
  using Block = std::conditional_t<kFifthBit, BlockQ5K, BlockQ4K>;
  static float row(const uint8_t* wp, const uint8_t* xp, int64_t blocks) {
    const auto* w = reinterpret_cast<const Block*>(wp);
    const auto* x = reinterpret_cast<const BlockQ8K*>(xp);
    float sum = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      int sumi = 0, summ = 0;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        decode_k4_scale(j, w[b].scales, &sc, &m);
        const int c = j / 2, shift = 4 * (j % 2);
        int dot = 0;
        for (int l = 0; l < 32; ++l) {
          int q = (w[b].qs[32 * c + l] >> shift) & 0xF;
          if constexpr (kFifthBit) q |= ((w[b].qh[l] >> j) & 1) << 4;
          dot += q * x[b].qs[32 * j + l];
        }
        sumi += sc * dot;
        summ += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
      }
      sum += fp16(w[b].d) * x[b].d * static_cast<float>(sumi) - fp16(w[b].dmin) * x[b].d * static_cast<float>(summ);
    }
    return sum;
  }
};

struct DotQ6K {
  static float row(const uint8_t* wp, const uint8_t* xp, int64_t blocks) {
    const auto* w = reinterpret_cast<const BlockQ6K*>(wp);
    const auto* x = reinterpret_cast<const BlockQ8K*>(xp);
    float sum = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      int sumi = 0;
      for (int s = 0; s < 16; ++s) {
        const int h = s / 8, g = (s % 8) / 2;  // element 16s + i = 128h + 32g + l
        int dot = 0;
        for (int i = 0; i < 16; ++i) {
          const int l = 16 * (s % 2) + i;
          const int lo = (w[b].ql[64 * h + l + 32 * (g & 1)] >> (4 * (g >> 1))) & 0xF;
          const int hi = (w[b].qh[32 * h + l] >> (2 * g)) & 3;
          dot += (lo | (hi << 4)) * x[b].qs[16 * s + i];
        }
        sumi += w[b].scales[s] * (dot - 32 * x[b].bsums[s]);
      }
      sum += fp16(w[b].d) * x[b].d * static_cast<float>(sumi);
    }
    return sum;
  }
};

}  // namespace

const QuantKernels& portable_quant_kernels() {
  static const QuantKernels kernels{
      .q8_0 = &quant_rows<Portable<DotQ8_0>>,
      .q4_0 = &quant_rows<Portable<DotQ4_0>>,
      .q4_k = &quant_rows<Portable<DotK4<false>>>,
      .q5_k = &quant_rows<Portable<DotK4<true>>>,
      .q6_k = &quant_rows<Portable<DotQ6K>>,
      .quantize_q8a = &quantize_q8a,
      .quantize_q8k = &quantize_q8k,
  };
  return kernels;
}

}  // namespace quant_isa

namespace {

using quant_isa::QuantKernels;

// Output rows per unit of the parallel split (row_split.h).
constexpr int64_t kRowUnit = 16;  // a multiple of kPackRows

std::vector<uint8_t>& thread_scratch() {
  thread_local std::vector<uint8_t> scratch;
  return scratch;
}

const QuantKernels& kernels_for(CpuIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa >= CpuIsa::kAvx2) return quant_isa::avx2_quant_kernels();
#endif
  (void)isa;
  return quant_isa::portable_quant_kernels();
}

#if defined(__x86_64__) && defined(__GNUC__)
// Packed matrices that take the same quantized x: Q8_0 / Q4_0 (BlockQ8S) or
// the K-quants (BlockQ8KS).
bool k_family(DType dtype) { return dtype_block_size(dtype) == kQKK; }

quant_isa::PackedRowsFn packed_rows_fn(const quant_isa::PackedKernels& k, DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return k.q8_0;
    case DType::kQ4_0:
      return k.q4_0;
    case DType::kQ4_K:
      return k.q4_k;
    case DType::kQ5_K:
      return k.q5_k;
    default:
      return k.q6_k;
  }
}

// The packed kernels for `isa` (at least kAvx2): vpdpbusd where the CPU has
// AVX512-VNNI and kAvx512 is allowed, else vpmaddubsw; the same bits.
const quant_isa::PackedKernels& packed_kernels_for(CpuIsa isa) {
  static const bool vnni = best_cpu_isa() >= CpuIsa::kAvx512 && __builtin_cpu_supports("avx512vnni");
  return vnni && isa >= CpuIsa::kAvx512 ? quant_isa::vnni_packed_kernels() : quant_isa::avx2_packed_kernels();
}

// The GEMM over packed matrices of one family and width, all on x: x
// quantized once with its block sums, then the row groups of every matrix,
// end to end, split over the pool in one call.
void linear_packed(ThreadPool& pool, const float* x, int64_t num_tokens, std::span<const PackedWeight* const> ws,
                   std::span<float* const> ys, CpuIsa isa) {
  const quant_isa::PackedKernels& k = packed_kernels_for(isa);
  const PackedWeight& w0 = *ws[0];
  const bool k_quant = k_family(w0.dtype);
  const int64_t x_block_bytes = k_quant ? sizeof(quant_isa::BlockQ8KS) : sizeof(quant_isa::BlockQ8S);
  const quant_isa::QuantizeFn quantize = k_quant ? k.quantize_q8ks : k.quantize_q8s;
  const int64_t x_row_bytes = w0.blocks * x_block_bytes;
  const int64_t cols = w0.cols;

  std::vector<uint8_t>& xq = thread_scratch();
  const auto x_bytes = static_cast<size_t>(num_tokens * x_row_bytes);
  if (xq.size() < x_bytes) xq.resize(x_bytes);
  const int64_t token_grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, cols));
  pool.parallel_for(num_tokens, token_grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) quantize(x + t * cols, cols, xq.data() + t * x_row_bytes);
  });

  constexpr size_t kMaxMatrices = 4;
  struct Part {
    quant_isa::PackedTask task;
    quant_isa::PackedRowsFn fn;
    int64_t first_group;
  };
  Part parts[kMaxMatrices];
  int64_t groups = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    parts[i] = Part{{.x = xq.data(), .x_row_bytes = x_row_bytes, .num_tokens = num_tokens, .w = ws[i], .y = ys[i]},
                    packed_rows_fn(k, ws[i]->dtype), groups};
    groups += ws[i]->groups;
  }
  split_rows(pool, groups * kPackRows, cols, num_tokens, kRowUnit, [&](int64_t first, int64_t end) {
    const int64_t g0 = first / kPackRows, g1 = end / kPackRows;
    for (size_t i = 0; i < ws.size(); ++i) {
      const Part& p = parts[i];
      const int64_t lo = std::max(g0, p.first_group), hi = std::min(g1, p.first_group + p.task.w->groups);
      if (lo < hi) p.fn(p.task, lo - p.first_group, hi - p.first_group);
    }
  });
}

// True when the matrices can share one linear_packed call on this CPU.
bool packable_together(std::span<const WeightMatrix* const> ws, CpuIsa isa) {
  if (ws.empty() || ws.size() > 4 || std::min(isa, best_cpu_isa()) < CpuIsa::kAvx2) return false;
  for (const WeightMatrix* w : ws) {
    if (!is_quantized_weight_dtype(w->dtype) || w->packed == nullptr || w->packed->dtype != w->dtype ||
        w->cols != ws[0]->cols || k_family(w->dtype) != k_family(ws[0]->dtype)) {
      return false;
    }
  }
  return true;
}
#endif

}  // namespace

bool linear_quantized_many(ThreadPool& pool, const float* x, int64_t num_tokens,
                           std::span<const WeightMatrix* const> ws, std::span<float* const> ys, CpuIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (num_tokens <= 0 || ws.size() != ys.size() || !packable_together(ws, isa)) return false;
  const PackedWeight* packed[4];
  for (size_t i = 0; i < ws.size(); ++i) packed[i] = ws[i]->packed;
  linear_packed(pool, x, num_tokens, std::span<const PackedWeight* const>(packed, ws.size()), ys, isa);
  return true;
#else
  (void)pool, (void)x, (void)num_tokens, (void)ws, (void)ys, (void)isa;
  return false;
#endif
}

void linear_quantized(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y,
                      CpuIsa isa) {
  if (num_tokens <= 0 || w.rows <= 0) return;
#if defined(__x86_64__) && defined(__GNUC__)
  const WeightMatrix* one = &w;
  if (packable_together(std::span<const WeightMatrix* const>(&one, 1), isa)) {
    linear_packed(pool, x, num_tokens, std::span<const PackedWeight* const>(&w.packed, 1),
                  std::span<float* const>(&y, 1), isa);
    return;
  }
#endif
  const QuantKernels& k = kernels_for(std::min(isa, best_cpu_isa()));
  const bool k_quant = dtype_block_size(w.dtype) == kQKK;
  const int64_t blocks = w.cols / dtype_block_size(w.dtype);
  const int64_t x_block_bytes = k_quant ? sizeof(BlockQ8K) : sizeof(quant_isa::BlockQ8A);
  const quant_isa::QuantizeFn quantize = k_quant ? k.quantize_q8k : k.quantize_q8a;

  std::vector<uint8_t>& xq = thread_scratch();
  const auto x_bytes = static_cast<size_t>(num_tokens * blocks * x_block_bytes);
  if (xq.size() < x_bytes) xq.resize(x_bytes);
  const int64_t token_grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, w.cols));
  pool.parallel_for(num_tokens, token_grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) quantize(x + t * w.cols, w.cols, xq.data() + t * blocks * x_block_bytes);
  });

  quant_isa::QuantTask task{.x = xq.data(),
                            .x_row_bytes = blocks * x_block_bytes,
                            .num_tokens = num_tokens,
                            .w = static_cast<const uint8_t*>(w.data),
                            .w_row_bytes = blocks * dtype_block_bytes(w.dtype),
                            .rows = w.rows,
                            .blocks = blocks,
                            .y = y};
  quant_isa::QuantRowsFn rows_fn = nullptr;
  switch (w.dtype) {
    case DType::kQ8_0:
      rows_fn = k.q8_0;
      break;
    case DType::kQ4_0:
      rows_fn = k.q4_0;
      break;
    case DType::kQ4_K:
      rows_fn = k.q4_k;
      break;
    case DType::kQ5_K:
      rows_fn = k.q5_k;
      break;
    default:
      rows_fn = k.q6_k;
      break;
  }
  split_rows(pool, w.rows, w.cols, num_tokens, kRowUnit,
             [&](int64_t first, int64_t end) { rows_fn(task, first, end); });
}

}  // namespace tern::cpu
