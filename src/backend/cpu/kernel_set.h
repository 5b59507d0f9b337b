// KernelSet: the CPU ops a model's forward pass calls, as one table, so each
// model is written once and runs on any kernel set: the reference kernels
// (plain loops, the oracle) or an optimized set. Every set computes what the
// reference computes, within the tolerance its tests state. Sets are
// immutable and live for the whole program.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "backend/cpu/quant_pack.h"
#include "backend/cpu/reference_kernels.h"
#include "base/thread_pool.h"

namespace tern::cpu {

struct KernelSet {
  const char* name = "";
  // The contracts are the reference kernels' (reference_kernels.h).
  void (*embedding_lookup)(const WeightMatrix& table, std::span<const int32_t> ids, float* out) = nullptr;
  void (*linear)(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y) = nullptr;
  // Several matrices on the same x (q|k|v, gate|up) in one call, with the
  // bits of `linear` on each: ys[i] gets [T, ws[i]->rows]. nullptr: the
  // caller calls `linear` per matrix.
  void (*linear_many)(ThreadPool& pool, const float* x, int64_t num_tokens, std::span<const WeightMatrix* const> ws,
                      std::span<float* const> ys) = nullptr;
  void (*rmsnorm)(const float* x, int64_t num_tokens, const WeightVector& w, float eps, float* y) = nullptr;
  void (*rope_interleaved)(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                           std::span<const int64_t> positions, std::span<const float> inv_freq) = nullptr;
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out) = nullptr;
  void (*attention_batch)(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                          std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out) = nullptr;
  // The repacked copy of a weight matrix this set's `linear` reads through
  // WeightMatrix::packed (quant_pack.h), or nullptr when it reads w as is.
  // nullptr in a set that never repacks (the reference).
  std::unique_ptr<PackedWeight> (*pack)(const WeightMatrix& w) = nullptr;
};

// The reference kernels as a set: the oracle every other set is tested against.
const KernelSet& reference_kernel_set();
// The fastest kernels this CPU runs (linear_fast with exact fp32 activations:
// AVX-512 or AVX2 by runtime dispatch; quantized matrices repacked for the
// AVX2 GEMM where the CPU has AVX2), attention_batch_fast, silu_mul_fast,
// the reference for the other ops.
const KernelSet& optimized_kernel_set();

// The optimized set, except that where the CPU has AVX512_BF16 the
// activations are rounded to bf16 before their products with bf16 weights
// (vdpbf16ps), as Hugging Face's bf16 forward and llama.cpp's BF16 path
// round them, for a relative error of at most 2^-9 of sum |x||w| per output
// (linear_kernels.h, Activations::kBf16); its `pack` repacks bf16 layer
// matrices into 16-row panels for an outer-product kernel. About twice the
// optimized set's bf16 prefill rate. Elsewhere, and for other weight types,
// it is the optimized set.
const KernelSet& fast_kernel_set();

// What --cpu-kernels auto (the default) runs: the fast set where the CPU
// has AVX512_BF16 and is an AMD one (Zen 4 and 5, whose bf16 products run
// at twice the fp32 multiply-add rate: the fast set's bf16 prefill is about
// twice the optimized set's there), the optimized set elsewhere (on Intel's
// AVX512_BF16 cores vdpbf16ps does not outrun two fp32 FMAs a cycle, and the
// fast set measured 0.80-0.94x the optimized one; docs/benchmarks.md).
const KernelSet& auto_kernel_set();

// "auto", "reference", "optimized" or "fast" (what --cpu-kernels takes);
// nullptr for any other name. "auto" gives auto_kernel_set(), named by the
// set it picked.
const KernelSet* kernel_set_named(std::string_view name);

}  // namespace tern::cpu
