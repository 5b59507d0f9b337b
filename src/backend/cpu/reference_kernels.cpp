// Reference CPU kernels. Every dot product keeps 16 independent fp32 partial
// sums (lane l adds the products j = l mod 16, in order) and adds them up in a
// fixed tree: g++ vectorizes that without -ffast-math, and an output element
// gets the same bits whether computed alone (decode) or in a tile of tokens
// (prefill), on any number of threads, with or without AVX2.
#include "backend/cpu/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/quant_reference.h"
#include "base/bf16.h"
#include "base/fp8_e4m3.h"

namespace tern::cpu {
namespace {

constexpr int kLanes = 16;  // partial sums per dot product (4 SSE / 2 AVX registers)
constexpr int64_t kTokenTile = 32;  // tokens sharing one pass over a group of weight rows
constexpr int kRowTile = 4;         // weight rows computed together, kept hot in L1 over a token tile

inline float bits_to_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint32_t f32_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// Same values as f16_to_f32 for all 65536 inputs, but branch-free so the dot
// loop vectorizes: subnormals come from an exact int->float conversion, no
// denormal float arithmetic (so it holds under flush-to-zero too).
inline float f16_to_f32_vectorizable(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t abs = h & 0x7fffu;
  uint32_t normal = (abs << 13) + ((127u - 15u) << 23);
  uint32_t special = (abs << 13) | 0x7f800000u;  // inf and NaN keep their payload
  uint32_t subnormal = f32_to_bits(static_cast<float>(abs) * 0x1p-24f);
  uint32_t bits = abs < 0x400u ? subnormal : (abs >= 0x7c00u ? special : normal);
  return bits_to_f32(bits | sign);
}

struct F32Weights {
  using Elem = float;
  static float to_f32(float v) { return v; }
};
struct Bf16Weights {
  using Elem = uint16_t;
  static float to_f32(uint16_t v) { return bf16_to_f32(v); }
};
struct F16Weights {
  using Elem = uint16_t;
  static float to_f32(uint16_t v) { return f16_to_f32_vectorizable(v); }
};

[[gnu::always_inline]] inline float reduce_lanes(float (&acc)[kLanes]) {
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

// sum_j x[j] * w[j] in fp32: lane l sums the products j = l (mod 16) in order.
template <typename W>
[[gnu::always_inline]] inline float dot(const float* x, const typename W::Elem* w, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l] * W::to_f32(w[j + l]);
  }
  for (int l = 0; j + l < n; ++l) acc[l] += x[j + l] * W::to_f32(w[j + l]);
  return reduce_lanes(acc);
}

// dot() of x with kRowTile consecutive rows (stride n) at once: the same
// arithmetic per row, bit for bit, but each x element is loaded once for all
// rows and the independent partial sums hide the add latency.
template <typename W>
[[gnu::always_inline]] inline void dot_rows(const float* x, const typename W::Elem* w, int64_t n, float* out) {
  float acc[kRowTile][kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int r = 0; r < kRowTile; ++r) {
      for (int l = 0; l < kLanes; ++l) acc[r][l] += x[j + l] * W::to_f32(w[r * n + j + l]);
    }
  }
  for (int r = 0; r < kRowTile; ++r) {
    for (int l = 0; j + l < n; ++l) acc[r][l] += x[j + l] * W::to_f32(w[r * n + j + l]);
    out[r] = reduce_lanes(acc[r]);
  }
}

inline float sum_squares(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l] * x[j + l];
  }
  for (int l = 0; j + l < n; ++l) acc[l] += x[j + l] * x[j + l];
  return reduce_lanes(acc);
}

template <typename W>
void rmsnorm_rows(const float* x, int64_t num_tokens, const typename W::Elem* w, int64_t n, float eps, float* y) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* xt = x + t * n;
    float* yt = y + t * n;
    float mean = sum_squares(xt, n) / static_cast<float>(n);
    float inv_rms = 1.0f / std::sqrt(mean + eps);
    // HF order: the normalized activation first, then the weight.
    for (int64_t j = 0; j < n; ++j) yt[j] = W::to_f32(w[j]) * (xt[j] * inv_rms);
  }
}

template <typename W>
void row_to_f32(const typename W::Elem* w, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = W::to_f32(w[j]);
}

// Rows [r_begin, r_end) of y for all tokens. Token tiles outermost so a tile
// of x stays in cache while the rows stream past; within a tile each group of
// kRowTile weight rows is reused by every token.
template <typename W>
[[gnu::always_inline]] inline void linear_rows(const float* x, int64_t num_tokens, const typename W::Elem* w,
                                               int64_t rows, int64_t cols, float* y, int64_t r_begin,
                                               int64_t r_end) {
  float out[kRowTile];
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kTokenTile) {
    int64_t t1 = std::min(num_tokens, t0 + kTokenTile);
    int64_t r0 = r_begin;
    for (; r0 + kRowTile <= r_end; r0 += kRowTile) {
      for (int64_t t = t0; t < t1; ++t) {
        dot_rows<W>(x + t * cols, w + r0 * cols, cols, out);
        for (int r = 0; r < kRowTile; ++r) y[t * rows + r0 + r] = out[r];
      }
    }
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t r = r0; r < r_end; ++r) y[t * rows + r] = dot<W>(x + t * cols, w + r * cols, cols);
    }
  }
}

// linear_rows for a quantized matrix: per token tile, each group of kRowTile
// rows is dequantized into `rows_f32` (kRowTile * cols floats) and then
// multiplied exactly as an fp32 matrix would be.
[[gnu::always_inline]] inline void linear_rows_quant(const float* x, int64_t num_tokens, const WeightMatrix& w,
                                                     float* y, int64_t r_begin, int64_t r_end, float* rows_f32) {
  const int64_t cols = w.cols, rows = w.rows;
  const int64_t stride = row_bytes(w.dtype, cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  float out[kRowTile];
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kTokenTile) {
    const int64_t t1 = std::min(num_tokens, t0 + kTokenTile);
    int64_t r0 = r_begin;
    for (; r0 + kRowTile <= r_end; r0 += kRowTile) {
      for (int r = 0; r < kRowTile; ++r) dequantize_row(w.dtype, base + (r0 + r) * stride, cols, rows_f32 + r * cols);
      for (int64_t t = t0; t < t1; ++t) {
        dot_rows<F32Weights>(x + t * cols, rows_f32, cols, out);
        for (int r = 0; r < kRowTile; ++r) y[t * rows + r0 + r] = out[r];
      }
    }
    for (int64_t r = r0; r < r_end; ++r) {
      dequantize_row(w.dtype, base + r * stride, cols, rows_f32);
      for (int64_t t = t0; t < t1; ++t) y[t * rows + r] = dot<F32Weights>(x + t * cols, rows_f32, cols);
    }
  }
}

// The same loops compiled twice: for baseline x86-64 (SSE2) and, chosen at
// run time, for AVX2. FMA stays off in both, so no multiply-add is fused and
// both give identical bits: the oracle does not depend on the machine.
template <typename W>
void linear_rows_portable(const float* x, int64_t num_tokens, const typename W::Elem* w, int64_t rows,
                          int64_t cols, float* y, int64_t r_begin, int64_t r_end) {
  linear_rows<W>(x, num_tokens, w, rows, cols, y, r_begin, r_end);
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename W>
__attribute__((target("avx2"))) void linear_rows_avx2(const float* x, int64_t num_tokens,
                                                      const typename W::Elem* w, int64_t rows, int64_t cols,
                                                      float* y, int64_t r_begin, int64_t r_end) {
  linear_rows<W>(x, num_tokens, w, rows, cols, y, r_begin, r_end);
}
__attribute__((target("avx2"))) void linear_rows_quant_avx2(const float* x, int64_t num_tokens,
                                                            const WeightMatrix& w, float* y, int64_t r_begin,
                                                            int64_t r_end, float* rows_f32) {
  linear_rows_quant(x, num_tokens, w, y, r_begin, r_end, rows_f32);
}
bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif
void linear_rows_quant_portable(const float* x, int64_t num_tokens, const WeightMatrix& w, float* y,
                                int64_t r_begin, int64_t r_end, float* rows_f32) {
  linear_rows_quant(x, num_tokens, w, y, r_begin, r_end, rows_f32);
}

void linear_rows_quant_dispatch(bool portable, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y,
                                int64_t r_begin, int64_t r_end) {
  std::vector<float> rows_f32(static_cast<size_t>(kRowTile * w.cols));
#if defined(__x86_64__) && defined(__GNUC__)
  if (!portable && cpu_has_avx2()) {
    linear_rows_quant_avx2(x, num_tokens, w, y, r_begin, r_end, rows_f32.data());
    return;
  }
#endif
  (void)portable;
  linear_rows_quant_portable(x, num_tokens, w, y, r_begin, r_end, rows_f32.data());
}

template <typename W>
void linear_rows_dispatch(bool portable, const float* x, int64_t num_tokens, const void* w, int64_t rows,
                          int64_t cols, float* y, int64_t r_begin, int64_t r_end) {
  const auto* wt = static_cast<const typename W::Elem*>(w);
#if defined(__x86_64__) && defined(__GNUC__)
  if (!portable && cpu_has_avx2()) {
    linear_rows_avx2<W>(x, num_tokens, wt, rows, cols, y, r_begin, r_end);
    return;
  }
#endif
  (void)portable;
  linear_rows_portable<W>(x, num_tokens, wt, rows, cols, y, r_begin, r_end);
}

void linear_impl(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y,
                 bool portable) {
  // Enough rows per chunk that waking a worker is worth it.
  const int64_t grain = std::max<int64_t>(16, 65536 / std::max<int64_t>(1, w.cols * num_tokens));
  pool.parallel_for(w.rows, grain, [&](int64_t begin, int64_t end) {
    if (is_quantized_weight_dtype(w.dtype)) {
      linear_rows_quant_dispatch(portable, x, num_tokens, w, y, begin, end);
      return;
    }
    switch (w.dtype) {
      case DType::kBF16:
        linear_rows_dispatch<Bf16Weights>(portable, x, num_tokens, w.data, w.rows, w.cols, y, begin, end);
        break;
      case DType::kF16:
        linear_rows_dispatch<F16Weights>(portable, x, num_tokens, w.data, w.rows, w.cols, y, begin, end);
        break;
      default:
        linear_rows_dispatch<F32Weights>(portable, x, num_tokens, w.data, w.rows, w.cols, y, begin, end);
        break;
    }
  });
}

// Causal attention of `group` consecutive query heads (q and out hold
// group * head_dim floats) that share the K/V head at `kv_offset`, over rows
// 0..len-1. Each K and V row is read once for the whole group. Per head the
// arithmetic and its order are fixed: scores in row order, max-subtracted
// exp summed in row order, then p * v accumulated in row order.
// Row `pos` of one kv head of `t` as fp32: in place for an fp32 cache, else
// dequantized into `buf` (head_dim floats), so an fp8 cache gives the same
// bits as an fp32 cache holding the dequantized values.
[[gnu::always_inline]] inline const float* kv_row(const KvRowTable& t, int64_t pos, int64_t kv_offset,
                                                  int64_t head_dim, float* buf) {
  if (t.is_bf16()) {
    const uint16_t* src = t.row_bf16(pos) + kv_offset;
    for (int64_t d = 0; d < head_dim; ++d) buf[d] = bf16_to_f32(src[d]);
    return buf;
  }
  if (!t.is_fp8()) return t.row(pos) + kv_offset;
  const uint8_t* src = t.row_fp8(pos) + kv_offset;
  for (int64_t d = 0; d < head_dim; ++d) buf[d] = fp8_e4m3_to_f32(src[d]) * t.scale;
  return buf;
}

[[gnu::always_inline]] inline void attend_group(const float* q, int64_t len, const KvRowTable& k,
                                                const KvRowTable& v, int64_t kv_offset, int64_t group,
                                                int64_t head_dim, float scale, float* probs, float* out) {
  // Dequantized K/V row of an fp8 or bf16 cache (head_dim is at most a few hundred).
  std::vector<float> row_buf(k.is_coded() || v.is_coded() ? static_cast<size_t>(head_dim) : 0);
  for (int64_t j = 0; j < len; ++j) {
    const float* kj = kv_row(k, j, kv_offset, head_dim, row_buf.data());
    for (int64_t g = 0; g < group; ++g) probs[g * len + j] = dot<F32Weights>(q + g * head_dim, kj, head_dim) * scale;
  }
  for (int64_t g = 0; g < group; ++g) {
    float* pg = probs + g * len;
    float max_score = -INFINITY;
    for (int64_t j = 0; j < len; ++j) max_score = std::max(max_score, pg[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < len; ++j) {
      pg[j] = std::exp(pg[j] - max_score);
      sum += pg[j];
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t j = 0; j < len; ++j) pg[j] *= inv_sum;
  }
  std::fill(out, out + group * head_dim, 0.0f);
  for (int64_t j = 0; j < len; ++j) {
    const float* vj = kv_row(v, j, kv_offset, head_dim, row_buf.data());
    for (int64_t g = 0; g < group; ++g) {
      const float p = probs[g * len + j];
      float* og = out + g * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) og[d] += p * vj[d];
    }
  }
}

// attend_group compiled for baseline x86-64 and for AVX2 (no FMA: same bits).
void attend_group_portable(const float* q, int64_t len, const KvRowTable& k, const KvRowTable& v,
                           int64_t kv_offset, int64_t group, int64_t head_dim, float scale, float* probs,
                           float* out) {
  attend_group(q, len, k, v, kv_offset, group, head_dim, scale, probs, out);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void attend_group_avx2(const float* q, int64_t len, const KvRowTable& k,
                                                       const KvRowTable& v, int64_t kv_offset, int64_t group,
                                                       int64_t head_dim, float scale, float* probs, float* out) {
  attend_group(q, len, k, v, kv_offset, group, head_dim, scale, probs, out);
}
#endif

}  // namespace

bool is_weight_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

size_t weight_element_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    default:
      return 0;
  }
}

bool is_quantized_weight_dtype(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void weight_row_to_f32(const WeightMatrix& w, int64_t row, float* out) {
  if (is_quantized_weight_dtype(w.dtype)) {
    dequantize_row(w.dtype, static_cast<const uint8_t*>(w.data) + row * row_bytes(w.dtype, w.cols), w.cols, out);
    return;
  }
  int64_t offset = row * w.cols;
  switch (w.dtype) {
    case DType::kBF16:
      row_to_f32<Bf16Weights>(static_cast<const uint16_t*>(w.data) + offset, w.cols, out);
      break;
    case DType::kF16:
      row_to_f32<F16Weights>(static_cast<const uint16_t*>(w.data) + offset, w.cols, out);
      break;
    default:
      row_to_f32<F32Weights>(static_cast<const float*>(w.data) + offset, w.cols, out);
      break;
  }
}

std::vector<float> weight_vector_to_f32(const WeightVector& w) {
  std::vector<float> out(static_cast<size_t>(w.size));
  weight_row_to_f32(WeightMatrix{w.dtype, w.data, 1, w.size}, 0, out.data());
  return out;
}

void embedding_lookup(const WeightMatrix& table, std::span<const int32_t> ids, float* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    weight_row_to_f32(table, ids[i], out + static_cast<int64_t>(i) * table.cols);
  }
}

void linear(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y) {
  linear_impl(pool, x, num_tokens, w, y, /*portable=*/false);
}

void linear_portable(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y) {
  linear_impl(pool, x, num_tokens, w, y, /*portable=*/true);
}

void rmsnorm(const float* x, int64_t num_tokens, const WeightVector& w, float eps, float* y) {
  switch (w.dtype) {
    case DType::kBF16:
      rmsnorm_rows<Bf16Weights>(x, num_tokens, static_cast<const uint16_t*>(w.data), w.size, eps, y);
      break;
    case DType::kF16:
      rmsnorm_rows<F16Weights>(x, num_tokens, static_cast<const uint16_t*>(w.data), w.size, eps, y);
      break;
    default:
      rmsnorm_rows<F32Weights>(x, num_tokens, static_cast<const float*>(w.data), w.size, eps, y);
      break;
  }
}

std::vector<float> rope_inv_freq(int64_t head_dim, double theta) {
  // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    float power = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
    inv[static_cast<size_t>(i)] = 1.0f / power;
  }
  return inv;
}

void rope_interleaved(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                      std::span<const int64_t> positions, std::span<const float> inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float pos = static_cast<float>(positions[static_cast<size_t>(t)]);
    float* xt = x + t * num_heads * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      // The angle is rounded to fp32 as HF's fp32 matmul does; cos and sin of
      // that fp32 angle are then computed accurately and rounded once.
      const float angle = inv_freq[static_cast<size_t>(i)] * pos;
      const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      for (int64_t h = 0; h < num_heads; ++h) {
        float* xh = xt + h * head_dim;
        float a = xh[2 * i], b = xh[2 * i + 1];
        xh[2 * i] = a * c - b * s;
        xh[2 * i + 1] = b * c + a * s;
      }
    }
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g * (1.0f / (1.0f + std::exp(-g))) * up[i];
  }
}

void attention(ThreadPool& pool, const float* q, std::span<const int64_t> positions, const KvRowTable& k,
               const KvRowTable& v, const AttentionShape& shape, float* out) {
  const AttentionSequence seq{0, static_cast<int64_t>(positions.size()), k, v};
  attention_batch(pool, q, positions, std::span<const AttentionSequence>(&seq, 1), shape, out);
}

AttentionCost attention_cost(std::span<const int64_t> positions, std::span<const AttentionSequence> seqs,
                             int64_t num_kv_heads) {
  AttentionCost cost;
  for (const AttentionSequence& seq : seqs) {
    for (int64_t r = seq.first_token; r < seq.first_token + seq.num_tokens; ++r) {
      const int64_t len = positions[static_cast<size_t>(r)] + 1;
      cost.rows += len * num_kv_heads;
      cost.max_len = std::max(cost.max_len, len);
    }
  }
  return cost;
}

void attention_batch(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                     std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out) {
  const int64_t head_dim = shape.head_dim;
  const int64_t q_dim = shape.num_heads * head_dim;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  // A unit of work is one token and one kv head: its `group` query heads.
  // Its cost is the number of K/V rows it reads; each thread takes a
  // contiguous run of units of about equal total cost.
  const auto [total_cost, max_len] = attention_cost(positions, seqs, shape.num_kv_heads);
  if (total_cost == 0) return;
  const int64_t parts = pool.num_threads();
  auto* group_fn = &attend_group_portable;
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx2()) group_fn = &attend_group_avx2;
#endif

  pool.parallel_for(parts, 1, [&](int64_t part_begin, int64_t part_end) {
    std::vector<float> probs(static_cast<size_t>(group * max_len));
    int64_t cost_before = 0;
    for (const AttentionSequence& seq : seqs) {
      for (int64_t r = seq.first_token; r < seq.first_token + seq.num_tokens; ++r) {
        const int64_t len = positions[static_cast<size_t>(r)] + 1;
        for (int64_t kvh = 0; kvh < shape.num_kv_heads; ++kvh) {
          const int64_t part = cost_before * parts / total_cost;
          cost_before += len;
          if (part < part_begin || part >= part_end) continue;
          const int64_t offset = kvh * group * head_dim;  // first q head of the group; q heads are contiguous
          group_fn(q + r * q_dim + offset, len, seq.k, seq.v, kvh * head_dim, group, head_dim, scale,
                   probs.data(), out + r * q_dim + offset);
        }
      }
    }
  });
}

}  // namespace tern::cpu
