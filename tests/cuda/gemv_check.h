// The GEMV of quantized weights (FP8, int4) against the CPU reference over
// the same weight values: inputs built in the form the kernel takes (bf16
// rows, SiLU * up of bf16 pairs, RMSNorm of fp32 residual rows), the CPU's
// linear over the bf16 rows the kernel should build, then the outputs
// compared as the tests' headers state: bf16 outputs as gpu_test_util.h
// (1e-2 relative L2 where the kernel built its own inputs), fp32 sums added
// into y or written (the LM head's form, with its folded argmax) within 2e-3.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "backend/cuda/kernels.h"
#include "base/bf16.h"
#include "base/thread_pool.h"
#include "engine/sampler.h"
#include "gpu_test_util.h"

namespace tern::test {

inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

inline cpu::WeightMatrix f32_matrix(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return cpu::WeightMatrix{DType::kF32, v.data(), rows, cols};
}

// What the q|k|v form (GemvOutput::kQkvRope) should produce on the CPU: the
// RMSNorm of `x` (T fp32 rows of w.cols) rounded to bf16, the product with
// w's [q_dim + 2 kv_dim] rows, then RoPE on q and k at `positions`.
struct QkvReference {
  std::vector<float> q, k, v;  // [T, q_dim], [T, kv_dim], [T, kv_dim]
};
inline QkvReference qkv_rope_reference(const std::vector<float>& x, const std::vector<float>& norm_weight,
                                       const cpu::WeightMatrix& w, int64_t T, int heads, int kv_heads,
                                       int head_dim, const std::vector<int32_t>& positions,
                                       const std::vector<float>& inv_freq) {
  ThreadPool pool(2);
  const int64_t K = w.cols, N = w.rows, q_dim = int64_t{heads} * head_dim, kv_dim = int64_t{kv_heads} * head_dim;
  std::vector<float> h(x.size()), out(static_cast<size_t>(T * N));
  cpu::rmsnorm(x.data(), T, cpu::WeightVector{DType::kF32, norm_weight.data(), K}, 1e-5f, h.data());
  h = round_bf16(h);
  cpu::linear(pool, h.data(), T, w, out.data());
  QkvReference ref;
  for (int64_t t = 0; t < T; ++t) {
    auto row = out.begin() + t * N;
    ref.q.insert(ref.q.end(), row, row + q_dim);
    ref.k.insert(ref.k.end(), row + q_dim, row + q_dim + kv_dim);
    ref.v.insert(ref.v.end(), row + q_dim + kv_dim, row + N);
  }
  const std::vector<int64_t> pos64(positions.begin(), positions.end());
  cpu::rope_interleaved(ref.q.data(), T, heads, head_dim, pos64, inv_freq);
  cpu::rope_interleaved(ref.k.data(), T, kv_heads, head_dim, pos64, inv_freq);
  return ref;
}

// p: the weights, input and output forms and the shape set; `weights` the
// [out_features, in_features] values the weights stand for.
inline void check_quantized_gemv(cuda::GemvParams p, const std::vector<float>& weights, int sm_count,
                                 const std::string& what, std::mt19937& rng) {
  ThreadPool pool(2);
  const int64_t T = p.num_tokens, K = p.in_features, N = p.out_features;
  p.eps = 1e-5f;
  std::vector<float> input;
  Bf16Data xb;
  std::vector<float> xf, nw;
  std::unique_ptr<DeviceArray<cuda::bf16>> d_xb;
  std::unique_ptr<DeviceArray<float>> d_xf, d_nw;
  if (p.input == cuda::GemvInput::kBf16) {
    xb = random_bf16(rng, static_cast<size_t>(T * K));
    input = xb.values;
    d_xb = std::make_unique<DeviceArray<cuda::bf16>>(xb.words);
    p.x_bf16 = d_xb->get();
  } else if (p.input == cuda::GemvInput::kSiluMul) {
    xb = random_bf16(rng, static_cast<size_t>(T * 2 * K), -6, 6);
    input.resize(static_cast<size_t>(T * K));
    for (int64_t t = 0; t < T; ++t) {
      const float* row = xb.values.data() + t * 2 * K;
      cpu::silu_mul(row, row + K, K, input.data() + t * K);
    }
    input = round_bf16(input);
    d_xb = std::make_unique<DeviceArray<cuda::bf16>>(xb.words);
    p.x_bf16 = d_xb->get();
  } else {
    xf = random_f32(rng, static_cast<size_t>(T * K), -3, 3);
    nw = random_f32(rng, static_cast<size_t>(K), 0.5f, 1.5f);
    input.resize(xf.size());
    cpu::rmsnorm(xf.data(), T, cpu::WeightVector{DType::kF32, nw.data(), K}, 1e-5f, input.data());
    input = round_bf16(input);
    d_xf = std::make_unique<DeviceArray<float>>(xf);
    d_nw = std::make_unique<DeviceArray<float>>(nw);
    p.x_f32 = d_xf->get();
    p.norm_weight = d_nw->get();
  }
  std::vector<float> ref(static_cast<size_t>(T * N));
  cpu::linear(pool, input.data(), T, f32_matrix(weights, N, K), ref.data());
  if (p.output == cuda::GemvOutput::kBf16) {
    DeviceArray<cuda::bf16> d_y(std::vector<cuda::bf16>(ref.size(), kNanBf16));
    p.y = d_y.get();
    TERN_ASSERT_CUDA(cuda::gemv(p, sm_count, nullptr));
    const std::vector<float> got = to_f32(d_y.download());
    if (p.input == cuda::GemvInput::kBf16) {
      expect_bf16_close(got, ref, what);
    } else {
      EXPECT_LT(relative_l2(got, ref), 1e-2) << what;
    }
  } else if (p.output == cuda::GemvOutput::kF32) {
    // The LM head's form: the logits written, and each token's folded argmax
    // key names the host argmax of the row written.
    DeviceArray<float> d_y(std::vector<float>(ref.size(), NAN));
    DeviceArray<uint64_t> d_keys(std::vector<uint64_t>(static_cast<size_t>(T), 0));
    p.y = d_y.get();
    p.argmax_keys = d_keys.get();
    TERN_ASSERT_CUDA(cuda::gemv(p, sm_count, nullptr));
    const std::vector<float> got = d_y.download();
    EXPECT_LT(relative_l2(got, ref), 2e-3) << what;
    const std::vector<uint64_t> keys = d_keys.download();
    for (int64_t t = 0; t < T; ++t) {
      const std::span<const float> row(got.data() + t * N, static_cast<size_t>(N));
      EXPECT_EQ(cuda::pick_of(keys[static_cast<size_t>(t)]), argmax(row)) << what << " token " << t;
    }
  } else {
    const std::vector<float> y0 = random_f32(rng, ref.size(), -1, 1);
    DeviceArray<float> d_y(y0);
    p.y = d_y.get();
    TERN_ASSERT_CUDA(cuda::gemv(p, sm_count, nullptr));
    std::vector<float> got = d_y.download();
    for (size_t i = 0; i < got.size(); ++i) got[i] -= y0[i];
    EXPECT_LT(relative_l2(got, ref), 2e-3) << what << " (added into y)";
  }
}

// The q|k|v form (GemvOutput::kQkvRope) of quantized weights: p holds the
// weights, with `weights` the [q_dim + 2 kv_dim, in_features] values they
// stand for. The RMSNorm of random fp32 rows goes in, q comes back in y and
// k and v in their slots (token t in slot T - 1 - t), each checked against the
// CPU's linear over the bf16-rounded norm rows, then RoPE.
inline void check_quantized_gemv_qkv_rope(cuda::GemvParams p, const std::vector<float>& weights, int64_t T,
                                          int heads, int kv_heads, int head_dim, const std::string& what,
                                          std::mt19937& rng) {
  const int64_t K = p.in_features, q_dim = int64_t{heads} * head_dim, kv_dim = int64_t{kv_heads} * head_dim;
  const int64_t N = q_dim + 2 * kv_dim;
  std::vector<float> x = random_f32(rng, static_cast<size_t>(T * K), -3, 3);
  std::vector<float> nw = random_f32(rng, static_cast<size_t>(K), 0.5f, 1.5f);
  std::vector<int32_t> positions(static_cast<size_t>(T)), slots(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    positions[static_cast<size_t>(t)] = static_cast<int32_t>(100 * t + 7);
    slots[static_cast<size_t>(t)] = static_cast<int32_t>(T - 1 - t);
  }
  const std::vector<float> inv_freq = cpu::rope_inv_freq(head_dim, 500000.0);
  DeviceArray<float> d_x(x), d_nw(nw), d_freq(inv_freq);
  DeviceArray<int32_t> d_pos(positions), d_slots(slots);
  DeviceArray<cuda::bf16> d_y(std::vector<cuda::bf16>(static_cast<size_t>(T * N), kNanBf16));
  DeviceArray<cuda::bf16> d_k(std::vector<cuda::bf16>(static_cast<size_t>(T * kv_dim), kNanBf16));
  DeviceArray<cuda::bf16> d_v(std::vector<cuda::bf16>(static_cast<size_t>(T * kv_dim), kNanBf16));
  p.input = cuda::GemvInput::kRmsNorm;
  p.output = cuda::GemvOutput::kQkvRope;
  p.x_f32 = d_x.get();
  p.norm_weight = d_nw.get();
  p.eps = 1e-5f;
  p.num_tokens = T;
  p.out_features = N;
  p.y = d_y.get();
  p.heads = {heads, kv_heads, head_dim};
  p.places = {d_pos.get(), d_slots.get(), d_freq.get()};
  p.planes = {d_k.get(), d_v.get()};
  TERN_ASSERT_CUDA(cuda::gemv(p, 132, nullptr));

  const QkvReference ref =
      qkv_rope_reference(x, nw, f32_matrix(weights, N, K), T, heads, kv_heads, head_dim, positions, inv_freq);
  const std::vector<cuda::bf16> y = d_y.download(), k_got = d_k.download(), v_got = d_v.download();
  std::vector<float> q_got, k_slot, v_slot;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < q_dim; ++j) q_got.push_back(bf16_to_f32(y[static_cast<size_t>(t * N + j)]));
    const int64_t slot = slots[static_cast<size_t>(t)];
    for (int64_t j = 0; j < kv_dim; ++j) {
      k_slot.push_back(bf16_to_f32(k_got[static_cast<size_t>(slot * kv_dim + j)]));
      v_slot.push_back(bf16_to_f32(v_got[static_cast<size_t>(slot * kv_dim + j)]));
    }
  }
  EXPECT_LT(relative_l2(q_got, ref.q), 1e-2) << what << " q";
  EXPECT_LT(relative_l2(k_slot, ref.k), 1e-2) << what << " k";
  EXPECT_LT(relative_l2(v_slot, ref.v), 1e-2) << what << " v";
}

}  // namespace tern::test
