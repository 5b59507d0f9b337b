// The reference and optimized kernel sets.
#include "backend/cpu/kernel_set.h"

#include "backend/cpu/linear_kernels.h"

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

}  // namespace

const KernelSet& optimized_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = reference_kernel_set();
    s.name = "optimized";
    s.linear = linear_exact;
    return s;
  }();
  return set;
}

const KernelSet* kernel_set_named(std::string_view name) {
  if (name == "reference") return &reference_kernel_set();
  if (name == "optimized") return &optimized_kernel_set();
  return nullptr;
}

}  // namespace tern::cpu
