// The quantized linear path: quantizes x into the calling thread's scratch
// (in parallel over tokens when there are many), splits the weight rows over
// the pool, and holds the portable kernels (plain C++, the same integer sums
// as the SIMD ones) that also serve CPUs without AVX2.
#include "backend/cpu/quant_linear.h"

#include <algorithm>
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
constexpr int64_t kRowUnit = 16;

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

}  // namespace

void linear_quantized(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y,
                      CpuIsa isa) {
  if (num_tokens <= 0 || w.rows <= 0) return;
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
