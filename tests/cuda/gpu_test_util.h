// Helpers for the GPU tests: device arrays that free themselves, random bf16
// data kept both as device words and as the fp32 values they stand for, and
// error measures with the tolerance in the failure message.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels.h"
#include "base/bf16.h"

namespace tern::test {

#define TERN_ASSERT_CUDA(expr)                                                        \
  do {                                                                                \
    const cudaError_t e_ = (expr);                                                    \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);            \
  } while (0)

// A device array of n T's, freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) p_ = nullptr;
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void upload(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// A quiet NaN in bf16, to poison outputs so that an unwritten element fails.
constexpr cuda::bf16 kNanBf16 = 0x7fc0;

// Random values rounded to bf16: `words` for the device, `values` the same numbers in fp32.
struct Bf16Data {
  std::vector<cuda::bf16> words;
  std::vector<float> values;
};

inline Bf16Data random_bf16(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  Bf16Data out;
  out.words.resize(n);
  out.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    out.words[i] = f32_to_bf16(d(rng));
    out.values[i] = bf16_to_f32(out.words[i]);
  }
  return out;
}

inline std::vector<float> random_f32(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<float> to_f32(const std::vector<cuda::bf16>& words) {
  std::vector<float> v(words.size());
  for (size_t i = 0; i < words.size(); ++i) v[i] = bf16_to_f32(words[i]);
  return v;
}

// ||got - ref|| / ||ref|| in float64; NaN anywhere gives infinity.
inline double relative_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Largest |got - ref| / (rel * |ref| + abs); <= 1 passes. NaN gives infinity.
inline double worst_violation(const std::vector<float>& got, const std::vector<float>& ref, double rel, double abs) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    worst = std::max(worst, err / (rel * std::fabs(ref[i]) + abs));
  }
  return worst;
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// bf16 output of fp32 math: each element within 1/128 of its size (two
// bf16 roundings) plus a little of the tensor's scale for cancellation.
inline void expect_bf16_close(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const double scale = max_abs(ref);
  const double l2 = relative_l2(got, ref);
  const double worst = worst_violation(got, ref, 1.0 / 128, 2e-3 * scale);
  EXPECT_LT(l2, 1e-2) << what << ": relative L2 error";
  EXPECT_LE(worst, 1.0) << what << ": worst element vs |err| <= |ref|/128 + 2e-3 * " << scale;
}

// The attention heads of a test shape, and the KV block size.
struct Shape {
  int num_heads, num_kv_heads, head_dim, block_size;
};

// rope_store_kv's params for T tokens of q|k|v rows (stride apart) into the K/V planes k, v.
inline cuda::RopeKvParams rope_params(const Shape& s, int64_t T, cuda::bf16* qkv, int64_t stride,
                                      const int32_t* positions, const int32_t* slots, const float* inv_freq,
                                      cuda::bf16* k, cuda::bf16* v) {
  cuda::RopeKvParams p;
  p.qkv = qkv;
  p.row_stride = stride;
  p.num_tokens = T;
  p.heads = {s.num_heads, s.num_kv_heads, s.head_dim};
  p.places = {positions, slots, inv_freq};
  p.planes = cuda::KvPlanes{k, v, nullptr, nullptr};
  return p;
}

}  // namespace tern::test
