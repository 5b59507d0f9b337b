// Linear-layer formats for AVX-512 (Zen 4, Ice Lake and later Xeons),
// plugged into the shared loop nest of linear_tiling.h; the bf16 dot-product
// format also needs AVX512_BF16. This whole file is compiled for that ISA;
// linear_kernels.cpp enters it only after checking the CPU (and checks
// AVX512_BF16 separately before using bf16_dot). It includes no project
// header with inline functions, so no non-template code is compiled here for
// two ISAs at once.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")
// g++ 12's AVX-512 intrinsics fill don't-care lanes from _mm512_undefined_*,
// which it then reports as maybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/linear_isa.h"
#include "backend/cpu/linear_tiling.h"

namespace tern::cpu::linear_isa {
namespace {

// The scalar tails below use an explicit fma: left as `s += a * b`, g++ may
// contract it in one tile instantiation and not another, and an output's bits
// would then depend on the tile (decode vs prefill) it was computed in.
inline float bf16_bits_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Register budget (32 zmm): MR*NR accumulators + the NR widened weight
// vectors per step (two each for split bf16) + the x vectors of one token.
struct Avx512Common {
  using Vec = __m512;
  static constexpr int kMR = 4;
  static Vec zero() { return _mm512_setzero_ps(); }
  static float hsum(Vec v) { return _mm512_reduce_add_ps(v); }
};

// bf16 weights with exact fp32 x, split per 32-element chunk into its 16 even
// then 16 odd elements (see Bf16Split in linear_avx2.cpp): each 512-bit load
// of 32 bf16 widens to two fp32 vectors with one shift and one mask.
struct Bf16Split : Avx512Common {
  using XElem = float;
  using WElem = uint16_t;
  static constexpr int kStep = 32;
  static constexpr int kParts = 2;
  static constexpr int nr_for(int mr) { return mr == 1 ? 8 : mr == 2 ? 6 : 4; }
  static Vec madd(Vec acc, Vec x, Vec w) { return _mm512_fmadd_ps(x, w, acc); }
  static void load_x(const float* p, Vec (&v)[2]) {
    v[0] = _mm512_loadu_ps(p);
    v[1] = _mm512_loadu_ps(p + 16);
  }
  static void load_w(const uint16_t* p, Vec (&v)[2]) {
    const __m512i pairs = _mm512_loadu_si512(p);
    v[0] = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
    v[1] = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static float tail(const float* x, const uint16_t* w, int64_t k0, int64_t k_len) {
    float s = 0.0f;
    for (int64_t k = k0; k < k_len; ++k) s = __builtin_fmaf(x[k], bf16_bits_to_f32(w[k]), s);
    return s;
  }
};

// bf16 weights and x rounded to bf16: vdpbf16ps adds the products of two
// consecutive K elements (an exact bf16*bf16 product each) into every fp32
// lane, so neither side is widened and one instruction does 32 MACs.
struct Bf16Dot : Avx512Common {
  using XElem = uint16_t;
  using WElem = uint16_t;
  static constexpr int kStep = 32;
  static constexpr int kParts = 1;
  static constexpr int nr_for(int mr) { return mr <= 2 ? 8 : 6; }
  static Vec madd(Vec acc, Vec x, Vec w) { return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w); }
  static void load_x(const uint16_t* p, Vec (&v)[1]) { v[0] = _mm512_castsi512_ps(_mm512_loadu_si512(p)); }
  static void load_w(const uint16_t* p, Vec (&v)[1]) { v[0] = _mm512_castsi512_ps(_mm512_loadu_si512(p)); }
  static float tail(const uint16_t* x, const uint16_t* w, int64_t k0, int64_t k_len) {
    float s = 0.0f;
    for (int64_t k = k0; k < k_len; ++k) s = __builtin_fmaf(bf16_bits_to_f32(x[k]), bf16_bits_to_f32(w[k]), s);
    return s;
  }
};

struct F16 : Avx512Common {
  using XElem = float;
  using WElem = uint16_t;
  static constexpr int kStep = 16;
  static constexpr int kParts = 1;
  static constexpr int nr_for(int mr) { return mr <= 2 ? 8 : 6; }
  static Vec madd(Vec acc, Vec x, Vec w) { return _mm512_fmadd_ps(x, w, acc); }
  static void load_x(const float* p, Vec (&v)[1]) { v[0] = _mm512_loadu_ps(p); }
  static void load_w(const uint16_t* p, Vec (&v)[1]) {
    v[0] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float tail(const float* x, const uint16_t* w, int64_t k0, int64_t k_len) {
    float s = 0.0f;
    for (int64_t k = k0; k < k_len; ++k) s = __builtin_fmaf(x[k], _cvtsh_ss(w[k]), s);
    return s;
  }
};

struct F32 : Avx512Common {
  using XElem = float;
  using WElem = float;
  static constexpr int kStep = 16;
  static constexpr int kParts = 1;
  static constexpr int nr_for(int mr) { return mr <= 2 ? 8 : 6; }
  static Vec madd(Vec acc, Vec x, Vec w) { return _mm512_fmadd_ps(x, w, acc); }
  static void load_x(const float* p, Vec (&v)[1]) { v[0] = _mm512_loadu_ps(p); }
  static void load_w(const float* p, Vec (&v)[1]) { v[0] = _mm512_loadu_ps(p); }
  static float tail(const float* x, const float* w, int64_t k0, int64_t k_len) {
    float s = 0.0f;
    for (int64_t k = k0; k < k_len; ++k) s = __builtin_fmaf(x[k], w[k], s);
    return s;
  }
};

// bf16 weights in 16-row panels (pack_bf16_panels): for each pair of
// columns (k, k+1), the 16 rows' (w[r][k], w[r][k+1]) pairs in one 64-byte
// line. One 4-byte broadcast of a token's (x[k], x[k+1]) meets a panel line
// in one vdpbf16ps, so each lane is one output row and nothing is summed
// across lanes: the outer-product form, MR tokens x NR panels per tile,
// with x and the panels read once per tile step. Each output keeps two
// partial sums (even and odd column pairs), each over K / 4 pairs, added at
// the end: the fp32 error stays within the dot-product form's bound.
constexpr int kPanelRows = 16;
constexpr int kPanelLine = 64;  // bytes per column pair of a panel

template <int MR, int NR>
[[gnu::always_inline]] inline void panel_tile(const LinearTask& task, int64_t t0, int64_t p0) {
  const int64_t pairs = (task.cols + 1) / 2;
  const auto* x = static_cast<const uint16_t*>(task.x) + t0 * task.x_stride;
  const auto* w = static_cast<const uint8_t*>(task.w) + p0 * pairs * kPanelLine;
  __m512 acc[2][MR][NR];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
      for (int n = 0; n < NR; ++n) acc[h][m][n] = _mm512_setzero_ps();
    }
  }
  auto step = [&](int h, int64_t kp) {
    __m512 wv[NR];
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) wv[n] = _mm512_castsi512_ps(_mm512_loadu_si512(w + (n * pairs + kp) * kPanelLine));
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      int32_t pair;
      std::memcpy(&pair, x + m * task.x_stride + 2 * kp, 4);
      const __m512 xv = _mm512_castsi512_ps(_mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int n = 0; n < NR; ++n) acc[h][m][n] = _mm512_dpbf16_ps(acc[h][m][n], (__m512bh)xv, (__m512bh)wv[n]);
    }
  };
  int64_t kp = 0;
  for (; kp + 2 <= pairs; kp += 2) {
    step(0, kp);
    step(1, kp + 1);
  }
  if (kp < pairs) step(0, kp);
  const int64_t rows = task.rows;
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    float* y = task.y + (t0 + m) * rows;
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) {
      const __m512 sum = _mm512_add_ps(acc[0][m][n], acc[1][m][n]);
      const int64_t r0 = (p0 + n) * kPanelRows;
      const int64_t left = rows - r0;
      const __mmask16 mask = left >= kPanelRows ? static_cast<__mmask16>(0xffff)
                                                : static_cast<__mmask16>((1u << left) - 1u);
      _mm512_mask_storeu_ps(y + r0, mask, sum);
    }
  }
}

// Tiles of MR tokens over panels [p_begin, p_end), NR panels at a time,
// the last ones narrower.
template <int MR, int NR>
void panel_tiles(const LinearTask& task, int64_t t0, int64_t p_begin, int64_t p_end) {
  int64_t p = p_begin;
  for (; p + NR <= p_end; p += NR) panel_tile<MR, NR>(task, t0, p);
  if constexpr (NR > 1) {
    if (p < p_end) panel_tiles<MR, NR - 1>(task, t0, p, p_end);
  }
}

template <int MR>
void panel_token_tail(const LinearTask& task, int64_t t0, int mr, int64_t p_begin, int64_t p_end) {
  if constexpr (MR >= 1) {
    if (mr == MR) {
      panel_tiles<MR, 3>(task, t0, p_begin, p_end);
      return;
    }
    panel_token_tail<MR - 1>(task, t0, mr, p_begin, p_end);
  }
}

// Panels of 3 (48 rows) stay in L2 while every group of 4 tokens passes.
void bf16_panel_rows(const LinearTask& task, int64_t r_begin, int64_t r_end) {
  constexpr int kMR = 4, kNR = 3;
  const int64_t p_begin = r_begin / kPanelRows, p_end = (r_end + kPanelRows - 1) / kPanelRows;
  const int64_t full = task.num_tokens / kMR * kMR;
  const int rest = static_cast<int>(task.num_tokens - full);
  for (int64_t p = p_begin; p < p_end; p += kNR) {
    const int64_t p1 = p + kNR < p_end ? p + kNR : p_end;
    for (int64_t t0 = 0; t0 < full; t0 += kMR) panel_tiles<kMR, kNR>(task, t0, p, p1);
    if (rest > 0) panel_token_tail<kMR - 1>(task, full, rest, p, p1);
  }
}

// f32_to_bf16 (base/bf16.h) sixteen at a time: bits + 0x7fff + (bit 16),
// shifted down 16; a NaN keeps its top bits with the quiet bit set.
void round_bf16_rows(const float* x, int64_t num_tokens, int64_t cols, int64_t stride, uint16_t* out) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* src = x + t * cols;
    uint16_t* dst = out + t * stride;
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
      const __m512i b = _mm512_castps_si512(_mm512_loadu_ps(src + k));
      const __m512i high = _mm512_srli_epi32(b, 16);
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(bias, _mm512_and_si512(high, one))), 16);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, abs_mask), inf);
      r = _mm512_mask_or_epi32(r, nan, high, quiet);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), _mm512_cvtepi32_epi16(r));
    }
    for (; k < cols; ++k) {
      uint32_t bits;
      std::memcpy(&bits, src + k, 4);
      dst[k] = (bits & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((bits >> 16) | 0x40)
                                                   : static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
    if (stride > cols) dst[cols] = 0;
  }
}

}  // namespace

const IsaKernels& avx512_kernels() {
  static const IsaKernels kernels{
      .bf16_exact = &linear_rows<Bf16Split>,
      .bf16_dot = &linear_rows<Bf16Dot>,
      .f16 = &linear_rows<F16>,
      .f32 = &linear_rows<F32>,
      .pair_chunk = Bf16Split::kStep,
      .bf16_panels = &bf16_panel_rows,
      .round_bf16 = &round_bf16_rows,
  };
  return kernels;
}

}  // namespace tern::cpu::linear_isa

#pragma GCC pop_options
#endif  // x86-64 GCC/Clang
