// The reference kernel set.
#include "backend/cpu/kernel_set.h"

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

}  // namespace tern::cpu
