// The FP8 linear layers' kernels (gemm_fp8.h): per-token e4m3
// quantization of the activations for the tensor-core GEMM, the scales
// applied to its unscaled fp32 sums, the two fused forms that do both
// around the MLP (the residual add and RMSNorm, SiLU * up), and the
// weights dequantized to bf16 for the fallback.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/rmsnorm_row.cuh"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/gemm_fp8.h"

namespace tern::cuda {
namespace {

constexpr int kQuantThreads = 256;

// Four values' e4m3 codes of v / s in one word, the first in the low byte.
__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d, float s) {
  return static_cast<uint32_t>(f32_to_e4m3(a / s)) | static_cast<uint32_t>(f32_to_e4m3(b / s)) << 8 |
         static_cast<uint32_t>(f32_to_e4m3(c / s)) << 16 | static_cast<uint32_t>(f32_to_e4m3(d / s)) << 24;
}

// One block per row: the row's largest magnitude, then its codes (the row
// is read twice; the second pass finds it in L1/L2).
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows_kernel(const bf16* x, int64_t cols, uint8_t* q, float* scales) {
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * cols;
  uint8_t* qr = q + row * cols;
  float amax = 0.0f;
  for (int64_t k = threadIdx.x; k < cols; k += kQuantThreads) amax = fmaxf(amax, fabsf(load_bf16(xr + k)));
  const float a = block_max(amax);
  if (a == 0.0f) {  // a zero row (or one of NaNs, which the model never makes): scale 0, codes 0
    for (int64_t k = threadIdx.x; k < cols; k += kQuantThreads) qr[k] = 0;
    if (threadIdx.x == 0) scales[row] = 0.0f;
    return;
  }
  const float s = a / 448.0f;  // correctly rounded division, as the host's
  for (int64_t k = threadIdx.x; k < cols; k += kQuantThreads) qr[k] = f32_to_e4m3(load_bf16(xr + k) / s);
  if (threadIdx.x == 0) scales[row] = s;
}

// The same for rows of cols % 8 == 0 up to 8 U units of 8 a thread
// (16-byte aligned rows): each thread's units loaded at once and kept, so
// the row is read once, and its codes leave 8 at a time. The maximum is
// exact in any order: the scale and codes are the form above's.
template <int U>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows_vec_kernel(const bf16* x, int cols, uint8_t* q, float* scales) {
  const int64_t row = blockIdx.x;
  const int units = cols / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * cols);
  uint4 v[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int j = threadIdx.x + kQuantThreads * k;
    v[k] = j < units ? xr[j] : make_uint4(0, 0, 0, 0);
  }
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const uint32_t words[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
    for (const uint32_t w : words) amax = fmaxf(amax, fmaxf(fabsf(lo_bf16(w)), fabsf(hi_bf16(w))));
  }
  const float a = block_max(amax);
  uint2* qr = reinterpret_cast<uint2*>(q + row * cols);
  const float s = a / 448.0f;
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int j = threadIdx.x + kQuantThreads * k;
    if (j >= units) break;
    qr[j] = a == 0.0f ? make_uint2(0, 0)
                      : make_uint2(e4m3x4(lo_bf16(v[k].x), hi_bf16(v[k].x), lo_bf16(v[k].y), hi_bf16(v[k].y), s),
                                   e4m3x4(lo_bf16(v[k].z), hi_bf16(v[k].z), lo_bf16(v[k].w), hi_bf16(v[k].w), s));
  }
  if (threadIdx.x == 0) scales[row] = a == 0.0f ? 0.0f : s;
}

__global__ void dequantize_rows_kernel(const uint8_t* w, const float* scales, int64_t rows, int64_t cols,
                                       bf16* out) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = e4m3x2_to_float2(w[i]).x;
    store_bf16(out + i, v * scales[i / cols]);
  }
}

// The same values 16 codes at a time (cols a multiple of 16, so the 16 are
// one row's): one 16-byte load, two 16-byte stores. Bit for bit the
// kernel above: each code's value times its row's scale, rounded once.
__global__ void dequantize_rows16_kernel(const uint8_t* w, const float* scales, int64_t groups, int64_t cols,
                                         bf16* out) {
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 c = __ldg(reinterpret_cast<const uint4*>(w) + g);
    const float s = __ldg(scales + g * 16 / cols);
    const uint32_t words[4] = {c.x, c.y, c.z, c.w};
    uint32_t pairs[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 lo = e4m3x2_to_float2(words[j]), hi = e4m3x2_to_float2(words[j] >> 16);
      pairs[2 * j] = pack_bf16x2(lo.x * s, lo.y * s);
      pairs[2 * j + 1] = pack_bf16x2(hi.x * s, hi.y * s);
    }
    uint4* dst = reinterpret_cast<uint4*>(out) + 2 * g;
    dst[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    dst[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
  }
}

// Sums q * 4 .. q * 4 + 3 as floats: fp32 sums (one 16-byte load; a plain
// load, not the read-only path, since fp32 sums may be scaled in place) or
// bf16 ones (8 bytes, widened exactly).
__device__ __forceinline__ float4 load_quad(const float* sums, int64_t q) {
  return reinterpret_cast<const float4*>(sums)[q];
}
__device__ __forceinline__ float4 load_quad(const bf16* sums, int64_t q) {
  const uint2 w = __ldg(reinterpret_cast<const uint2*>(sums) + q);
  return make_float4(lo_bf16(w.x), hi_bf16(w.x), lo_bf16(w.y), hi_bf16(w.y));
}

// y[t, n] (=, or += for kAddF32) sums[t, n] * x_scales[t] * w_scales[n],
// four outputs of one row a thread (N a multiple of 4).
template <GemmOut kOut, typename S>
__global__ void scale_sums_kernel(const S* sums, int64_t quads, int64_t N, const float* x_scales,
                                  const float* w_scales, void* y) {
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < quads;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = q * 4 / N, n = q * 4 - t * N;
    const float4 v = load_quad(sums, q);
    const float4 ws = __ldg(reinterpret_cast<const float4*>(w_scales + n));
    const float xs = __ldg(x_scales + t);
    const float4 r = make_float4(v.x * xs * ws.x, v.y * xs * ws.y, v.z * xs * ws.z, v.w * xs * ws.w);
    if constexpr (kOut == GemmOut::kBf16) {
      reinterpret_cast<uint2*>(y)[q] = make_uint2(pack_bf16x2(r.x, r.y), pack_bf16x2(r.z, r.w));
    } else if constexpr (kOut == GemmOut::kF32) {
      reinterpret_cast<float4*>(y)[q] = r;
    } else {  // one rounding for the product and the add, as add_rmsnorm_e4m3 does
      float4* p = reinterpret_cast<float4*>(y) + q;
      const float4 old = *p;
      *p = make_float4(__fmaf_rn(v.x * xs, ws.x, old.x), __fmaf_rn(v.y * xs, ws.y, old.y),
                       __fmaf_rn(v.z * xs, ws.z, old.z), __fmaf_rn(v.w * xs, ws.w, old.w));
    }
  }
}

// add_rmsnorm_e4m3 in add_rmsnorm's row form (rmsnorm_row.cuh: the same
// loads, sums and roundings), a block of W warps per row: the row, its
// delta's sums and the weights in registers; the normalized row as bf16
// pairs; its codes out as one word per 4 values.
template <int V, int W>
__global__ void __launch_bounds__(32 * W)
    add_rmsnorm_e4m3_row_kernel(float* x, Fp8Sums delta, const float* weight, float eps, uint8_t* codes,
                                float* scales) {
  constexpr int kT = 32 * W;
  constexpr int64_t kHidden = 4 * V * kT;
  const int t = threadIdx.x;
  const int64_t r = blockIdx.x;
  float4* xr = reinterpret_cast<float4*>(x + r * kHidden);
  const float4* w4 = reinterpret_cast<const float4*>(weight);
  float4 v[V], w[V];
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] = xr[t + kT * k];
  if (delta.sums != nullptr) {
    const float4* dr = reinterpret_cast<const float4*>(delta.sums + r * kHidden);
    const float4* ws4 = reinterpret_cast<const float4*>(delta.w_scales);
    const float xs = delta.x_scales[r];
    float4 d[V], ws[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      d[k] = dr[t + kT * k];
      ws[k] = ws4[t + kT * k];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      v[k] = make_float4(__fmaf_rn(d[k].x * xs, ws[k].x, v[k].x), __fmaf_rn(d[k].y * xs, ws[k].y, v[k].y),
                         __fmaf_rn(d[k].z * xs, ws[k].z, v[k].z), __fmaf_rn(d[k].w * xs, ws[k].w, v[k].w));
      xr[t + kT * k] = v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) w[k] = w4[t + kT * k];
  const float scale = block_rms_scale<V, W>(v, eps);
  uint32_t h[V][2];
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    h[k][0] = pack_bf16x2(v[k].x * scale * w[k].x, v[k].y * scale * w[k].y);
    h[k][1] = pack_bf16x2(v[k].z * scale * w[k].z, v[k].w * scale * w[k].w);
    amax = fmaxf(amax, fmaxf(fmaxf(fabsf(lo_bf16(h[k][0])), fabsf(hi_bf16(h[k][0]))),
                             fmaxf(fabsf(lo_bf16(h[k][1])), fabsf(hi_bf16(h[k][1])))));
  }
  amax = block_max(amax);
  uint32_t* cr = reinterpret_cast<uint32_t*>(codes + r * kHidden);
  if (amax == 0.0f) {  // as quantize_rows_kernel: scale 0, codes 0
#pragma unroll
    for (int k = 0; k < V; ++k) cr[t + kT * k] = 0;
    if (t == 0) scales[r] = 0.0f;
    return;
  }
  const float s = amax / 448.0f;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    cr[t + kT * k] = e4m3x4(lo_bf16(h[k][0]), hi_bf16(h[k][0]), lo_bf16(h[k][1]), hi_bf16(h[k][1]), s);
  }
  if (t == 0) scales[r] = s;
}

// The same for any width, one block per row (add_rmsnorm's block form: the
// same strides and block sum): the sums pass writes the row back, the
// normalized row is made twice (its maximum, then its codes) from the
// row each thread wrote itself.
__global__ void __launch_bounds__(kQuantThreads)
    add_rmsnorm_e4m3_kernel(float* x, Fp8Sums delta, const float* weight, int64_t hidden, float eps, uint8_t* codes,
                            float* scales) {
  const int64_t r = blockIdx.x;
  float* xr = x + r * hidden;
  float sum_sq = 0.0f;
  if (delta.sums != nullptr) {
    const float* dr = delta.sums + r * hidden;
    const float xs = delta.x_scales[r];
    for (int64_t j = threadIdx.x; j < hidden; j += kQuantThreads) {
      const float v = __fmaf_rn(dr[j] * xs, delta.w_scales[j], xr[j]);
      xr[j] = v;
      sum_sq += v * v;
    }
  } else {
    for (int64_t j = threadIdx.x; j < hidden; j += kQuantThreads) sum_sq += xr[j] * xr[j];
  }
  const float total = block_sum(sum_sq);
  const float scale = 1.0f / sqrtf(total / static_cast<float>(hidden) + eps);
  float amax = 0.0f;
  for (int64_t j = threadIdx.x; j < hidden; j += kQuantThreads) {
    amax = fmaxf(amax, fabsf(round_bf16(xr[j] * scale * weight[j])));
  }
  const float a = block_max(amax);
  uint8_t* cr = codes + r * hidden;
  if (a == 0.0f) {
    for (int64_t j = threadIdx.x; j < hidden; j += kQuantThreads) cr[j] = 0;
    if (threadIdx.x == 0) scales[r] = 0.0f;
    return;
  }
  const float s = a / 448.0f;
  for (int64_t j = threadIdx.x; j < hidden; j += kQuantThreads) {
    cr[j] = f32_to_e4m3(round_bf16(xr[j] * scale * weight[j]) / s);
  }
  if (threadIdx.x == 0) scales[r] = s;
}

// Four columns of a gate|up row's SiLU products as silu_mul_e4m3 makes them:
// gate and up rounded to bf16 as scale_sums_kernel<kBf16> rounds them, the
// products as silu_mul rounds them; amax takes their largest magnitude.
__device__ __forceinline__ uint2 silu_quad(float4 g, float4 u, float4 gs, float4 us, float xs, float& amax) {
  const uint32_t gw[2] = {pack_bf16x2(g.x * xs * gs.x, g.y * xs * gs.y), pack_bf16x2(g.z * xs * gs.z, g.w * xs * gs.w)};
  const uint32_t uw[2] = {pack_bf16x2(u.x * xs * us.x, u.y * xs * us.y), pack_bf16x2(u.z * xs * us.z, u.w * xs * us.w)};
  uint32_t pw[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float g0 = lo_bf16(gw[h]), g1 = hi_bf16(gw[h]), u0 = lo_bf16(uw[h]), u1 = hi_bf16(uw[h]);
    pw[h] = pack_bf16x2(g0 / (1.0f + expf(-g0)) * u0, g1 / (1.0f + expf(-g1)) * u1);
    amax = fmaxf(amax, fmaxf(fabsf(lo_bf16(pw[h])), fabsf(hi_bf16(pw[h]))));
  }
  return make_uint2(pw[0], pw[1]);
}

// silu_mul_e4m3, one block per row: each thread takes 4 columns at a time
// (16-byte loads of the gate and up sums and their weight scales), makes
// their products (silu_quad; kept as bf16 in shared memory: inter * 2
// bytes), then the row's codes as quantize_rows_kernel makes them.
template <typename S>
__global__ void __launch_bounds__(kQuantThreads)
    silu_mul_e4m3_kernel(const S* sums, Fp8Sums gu, int inter, uint8_t* codes, float* scales) {
  extern __shared__ uint2 products[];  // [inter / 4]: 4 bf16 each
  const int64_t r = blockIdx.x;
  const int quads = inter / 4;
  const S* g = sums + r * 2 * inter;
  const S* u = g + inter;
  const float4* gs4 = reinterpret_cast<const float4*>(gu.w_scales);
  const float4* us4 = gs4 + quads;
  const float xs = gu.x_scales[r];
  float amax = 0.0f;
  for (int q = threadIdx.x; q < quads; q += kQuantThreads) {
    products[q] = silu_quad(load_quad(g, q), load_quad(u, q), gs4[q], us4[q], xs, amax);
  }
  const float a = block_max(amax);  // its barrier also makes the products visible
  uint32_t* cr = reinterpret_cast<uint32_t*>(codes + r * inter);
  if (a == 0.0f) {
    for (int q = threadIdx.x; q < quads; q += kQuantThreads) cr[q] = 0;
    if (threadIdx.x == 0) scales[r] = 0.0f;
    return;
  }
  const float s = a / 448.0f;
  for (int q = threadIdx.x; q < quads; q += kQuantThreads) {
    const uint2 p = products[q];
    cr[q] = e4m3x4(lo_bf16(p.x), hi_bf16(p.x), lo_bf16(p.y), hi_bf16(p.y), s);
  }
  if (threadIdx.x == 0) scales[r] = s;
}

// The same with the row in registers where inter = 8 * blockDim.x, a
// multiple of 256 up to 8,192 (ERNIE-0.3B's 3,072 is 384 threads): each thread's two quads (q
// and q + blockDim.x) loaded at once and their products kept, so there is
// no shared-memory copy of the row and one barrier.
template <typename S>
__global__ void __launch_bounds__(1024)
    silu_mul_e4m3_reg_kernel(const S* sums, Fp8Sums gu, int inter, uint8_t* codes, float* scales) {
  const int64_t r = blockIdx.x;
  const int quads = inter / 4, q0 = threadIdx.x, q1 = threadIdx.x + blockDim.x;
  const S* g = sums + r * 2 * inter;
  const S* u = g + inter;
  const float4* gs4 = reinterpret_cast<const float4*>(gu.w_scales);
  const float4* us4 = gs4 + quads;
  const float xs = gu.x_scales[r];
  const float4 ga = load_quad(g, q0), gb = load_quad(g, q1), ua = load_quad(u, q0), ub = load_quad(u, q1);
  const float4 gsa = gs4[q0], gsb = gs4[q1], usa = us4[q0], usb = us4[q1];
  float amax = 0.0f;
  const uint2 pa = silu_quad(ga, ua, gsa, usa, xs, amax), pb = silu_quad(gb, ub, gsb, usb, xs, amax);
  amax = block_max(amax);
  uint32_t* cr = reinterpret_cast<uint32_t*>(codes + r * inter);
  const float s = amax / 448.0f;
  cr[q0] = amax == 0.0f ? 0u : e4m3x4(lo_bf16(pa.x), hi_bf16(pa.x), lo_bf16(pa.y), hi_bf16(pa.y), s);
  cr[q1] = amax == 0.0f ? 0u : e4m3x4(lo_bf16(pb.x), hi_bf16(pb.x), lo_bf16(pb.y), hi_bf16(pb.y), s);
  if (threadIdx.x == 0) scales[r] = amax == 0.0f ? 0.0f : s;
}

template <int V, int W>
cudaError_t launch_rmsnorm_e4m3_row(float* x, const Fp8Sums& delta, const float* weight, int64_t rows, float eps,
                                    uint8_t* codes, float* scales, cudaStream_t stream) {
  add_rmsnorm_e4m3_row_kernel<V, W>
      <<<static_cast<unsigned int>(rows), 32 * W, 0, stream>>>(x, delta, weight, eps, codes, scales);
  return cudaGetLastError();
}

template <typename S>
cudaError_t launch_silu_e4m3(const S* sums, const Fp8Sums& gu, int64_t rows, int64_t inter, uint8_t* codes,
                             float* scales, cudaStream_t stream) {
  const auto grid = static_cast<unsigned int>(rows);
  if (inter % 256 == 0 && inter <= 8192) {  // the row in registers, 8 columns a thread, whole warps
    silu_mul_e4m3_reg_kernel<S><<<grid, static_cast<unsigned int>(inter / 8), 0, stream>>>(
        sums, gu, static_cast<int>(inter), codes, scales);
    return cudaGetLastError();
  }
  silu_mul_e4m3_kernel<S><<<grid, kQuantThreads, static_cast<size_t>(inter) * 2, stream>>>(
      sums, gu, static_cast<int>(inter), codes, scales);
  return cudaGetLastError();
}

}  // namespace

cudaError_t add_rmsnorm_e4m3(float* x, const Fp8Sums& delta, const float* weight, int64_t rows, int64_t hidden,
                             float eps, uint8_t* codes, float* scales, cudaStream_t stream) {
  if (rows <= 0 || hidden <= 0) return cudaSuccess;
  if (rows > 0x7fffffff || delta.sums_bf16 != nullptr) return cudaErrorInvalidValue;  // a residual delta is fp32
  switch (hidden) {  // add_rmsnorm's row-form widths
    case 256: return launch_rmsnorm_e4m3_row<1, 2>(x, delta, weight, rows, eps, codes, scales, stream);
    case 512: return launch_rmsnorm_e4m3_row<1, 4>(x, delta, weight, rows, eps, codes, scales, stream);
    case 1024: return launch_rmsnorm_e4m3_row<2, 4>(x, delta, weight, rows, eps, codes, scales, stream);
    case 2048: return launch_rmsnorm_e4m3_row<4, 4>(x, delta, weight, rows, eps, codes, scales, stream);
    default: break;
  }
  add_rmsnorm_e4m3_kernel<<<static_cast<unsigned int>(rows), kQuantThreads, 0, stream>>>(x, delta, weight, hidden,
                                                                                          eps, codes, scales);
  return cudaGetLastError();
}

cudaError_t silu_mul_e4m3(const Fp8Sums& gu, int64_t rows, int64_t inter, uint8_t* codes, float* scales,
                          cudaStream_t stream) {
  if (rows <= 0 || inter <= 0) return cudaSuccess;
  const auto aligned = [](const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  const bool bf16_sums = gu.sums_bf16 != nullptr;
  if (rows > 0x7fffffff || inter % 4 != 0 || inter > kMaxSiluE4m3Inter || bf16_sums == (gu.sums != nullptr) ||
      !(bf16_sums ? aligned(gu.sums_bf16, 8) : aligned(gu.sums, 16)) || !aligned(gu.w_scales, 16) ||
      !aligned(codes, 4)) {
    return cudaErrorInvalidValue;
  }
  return bf16_sums ? launch_silu_e4m3(gu.sums_bf16, gu, rows, inter, codes, scales, stream)
                   : launch_silu_e4m3(gu.sums, gu, rows, inter, codes, scales, stream);
}

cudaError_t quantize_rows_e4m3(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scales,
                               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const auto grid = static_cast<unsigned int>(rows);
  if (cols % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 8 == 0) {
    const int c = static_cast<int>(std::min<int64_t>(cols, 1 << 30));
    if (cols <= 8 * kQuantThreads) {
      quantize_rows_vec_kernel<1><<<grid, kQuantThreads, 0, stream>>>(x, c, q, scales);
      return cudaGetLastError();
    }
    if (cols <= 4 * 8 * kQuantThreads) {
      quantize_rows_vec_kernel<4><<<grid, kQuantThreads, 0, stream>>>(x, c, q, scales);
      return cudaGetLastError();
    }
  }
  quantize_rows_kernel<<<grid, kQuantThreads, 0, stream>>>(x, cols, q, scales);
  return cudaGetLastError();
}

cudaError_t dequantize_e4m3_rows(const uint8_t* w, const float* scales, int64_t rows, int64_t cols, bf16* out,
                                 cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t total = rows * cols;
  const bool aligned = reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (cols % 16 == 0 && aligned) {
    const int64_t groups = total / 16;
    const auto blocks = static_cast<unsigned int>(std::min<int64_t>((groups + 255) / 256, 8192));
    dequantize_rows16_kernel<<<blocks, 256, 0, stream>>>(w, scales, groups, cols, out);
    return cudaGetLastError();
  }
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>((total + 255) / 256, 4096));
  dequantize_rows_kernel<<<blocks, 256, 0, stream>>>(w, scales, rows, cols, out);
  return cudaGetLastError();
}

namespace {

template <typename S>
cudaError_t launch_scale_sums(const S* sums, int64_t rows, int64_t cols, const float* x_scales, const float* w_scales,
                              void* y, GemmOut out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols % 4 != 0 || reinterpret_cast<uintptr_t>(sums) % (4 * sizeof(S)) != 0 ||
      reinterpret_cast<uintptr_t>(w_scales) % 16 != 0 || reinterpret_cast<uintptr_t>(y) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t quads = rows * cols / 4;
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>((quads + 255) / 256, 8192));
  switch (out) {
    case GemmOut::kBf16:
      scale_sums_kernel<GemmOut::kBf16, S><<<blocks, 256, 0, stream>>>(sums, quads, cols, x_scales, w_scales, y);
      break;
    case GemmOut::kF32:
      scale_sums_kernel<GemmOut::kF32, S><<<blocks, 256, 0, stream>>>(sums, quads, cols, x_scales, w_scales, y);
      break;
    case GemmOut::kAddF32:
      scale_sums_kernel<GemmOut::kAddF32, S><<<blocks, 256, 0, stream>>>(sums, quads, cols, x_scales, w_scales, y);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t scale_e4m3_sums(const float* sums, int64_t rows, int64_t cols, const float* x_scales,
                            const float* w_scales, void* y, GemmOut out, cudaStream_t stream) {
  return launch_scale_sums(sums, rows, cols, x_scales, w_scales, y, out, stream);
}

cudaError_t scale_e4m3_sums(const bf16* sums, int64_t rows, int64_t cols, const float* x_scales,
                            const float* w_scales, void* y, GemmOut out, cudaStream_t stream) {
  return launch_scale_sums(sums, rows, cols, x_scales, w_scales, y, out, stream);
}

}  // namespace tern::cuda
