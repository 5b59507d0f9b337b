// The reference and optimized kernel sets.
#include "backend/cpu/kernel_set.h"

#include "backend/cpu/activation_fast.h"
#include "backend/cpu/attention_fast.h"
#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/quant_pack.h"

namespace tern::cpu {

const KernelSet& reference_kernel_set() {
  static const KernelSet set = {
      .name = "reference",
      .embedding_lookup = embedding_lookup,
      .linear = linear,
      .rmsnorm = rmsnorm,
      .rope_interleaved = rope_interleaved,
      .silu_mul = silu_mul,
      .attention_batch = attention_batch,
  };
  return set;
}

namespace {

void linear_exact(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y) {
  linear_fast(pool, x, num_tokens, w, y);
}

void linear_many_exact(ThreadPool& pool, const float* x, int64_t num_tokens, std::span<const WeightMatrix* const> ws,
                       std::span<float* const> ys) {
  linear_fast_many(pool, x, num_tokens, ws, ys);
}

void linear_bf16x(ThreadPool& pool, const float* x, int64_t num_tokens, const WeightMatrix& w, float* y) {
  linear_fast(pool, x, num_tokens, w, y, LinearOptions{.activations = Activations::kBf16});
}

void linear_many_bf16x(ThreadPool& pool, const float* x, int64_t num_tokens, std::span<const WeightMatrix* const> ws,
                       std::span<float* const> ys) {
  linear_fast_many(pool, x, num_tokens, ws, ys, LinearOptions{.activations = Activations::kBf16});
}

// Only quantized matrices have a packed form, and only the AVX2 kernels read it.
std::unique_ptr<PackedWeight> pack_for_cpu(const WeightMatrix& w) {
  if (!is_quantized_weight_dtype(w.dtype) || best_cpu_isa() < CpuIsa::kAvx2) return nullptr;
  return pack_weight(w);
}

// The fast set also repacks bf16 matrices into 16-row panels where the CPU
// has AVX512_BF16 (the outer-product kernel, linear_avx512.cpp), the
// vocabulary-sized head included: at a decode step of a few tokens the
// panels read it faster than the dot-product kernel. The model gives the
// source's file pages back, and a tied embedding is looked up from the panels.
std::unique_ptr<PackedWeight> pack_for_fast(const WeightMatrix& w) {
  if (w.dtype == DType::kBF16) {
    if (!cpu_has_avx512_bf16()) return nullptr;
    return pack_bf16_panels(w);
  }
  return pack_for_cpu(w);
}

// A table with a panel copy is read from it (the same bf16 values), so its
// file pages can go back; any other table as the reference reads it.
void embedding_lookup_fast(const WeightMatrix& table, std::span<const int32_t> ids, float* out) {
  if (!is_bf16_panels(table.packed)) {
    embedding_lookup(table, ids, out);
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    bf16_panel_row_to_f32(*table.packed, ids[i], out + static_cast<int64_t>(i) * table.cols);
  }
}

}  // namespace

const KernelSet& optimized_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = reference_kernel_set();
    s.name = "optimized";
    s.linear = linear_exact;
    s.linear_many = linear_many_exact;
    s.pack = pack_for_cpu;
    s.attention_batch = attention_batch_fast;
    s.silu_mul = silu_mul_fast;
    return s;
  }();
  return set;
}

const KernelSet& fast_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = optimized_kernel_set();
    s.name = "fast";
    s.embedding_lookup = embedding_lookup_fast;
    s.linear = linear_bf16x;
    s.linear_many = linear_many_bf16x;
    s.pack = pack_for_fast;
    return s;
  }();
  return set;
}

const KernelSet& auto_kernel_set() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool amd = __builtin_cpu_is("amd");
#else
  static const bool amd = false;
#endif
  return amd && cpu_has_avx512_bf16() ? fast_kernel_set() : optimized_kernel_set();
}

const KernelSet* kernel_set_named(std::string_view name) {
  if (name == "auto") return &auto_kernel_set();
  if (name == "reference") return &reference_kernel_set();
  if (name == "optimized") return &optimized_kernel_set();
  if (name == "fast") return &fast_kernel_set();
  return nullptr;
}

}  // namespace tern::cpu
