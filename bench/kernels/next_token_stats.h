// How far one form of a model moves the next-token distributions of
// another: mean KL(reference || form) in nats and the share of positions
// whose most likely tokens agree (top-1), over rows of logits of the same
// positions. Shared by tern_fp8_quality (CPU) and tern_gpu_quality (GPU).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tern::bench {

inline std::vector<double> log_softmax(const float* x, size_t n) {
  const double m = *std::max_element(x, x + n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(x[i] - m);
  const double lse = m + std::log(sum);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] - lse;
  return out;
}

// The lowest index of the largest value.
inline int32_t argmax(const float* x, size_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

struct NextTokenStats {
  double kl_sum = 0;
  int64_t positions = 0, same_top = 0;

  // `rows` positions of `vocab` logits each, the reference's and the form's.
  void add(const float* reference, const float* form, size_t rows, size_t vocab) {
    for (size_t t = 0; t < rows; ++t) {
      const float* a = reference + t * vocab;
      const float* b = form + t * vocab;
      const std::vector<double> la = log_softmax(a, vocab), lb = log_softmax(b, vocab);
      double kl = 0;
      for (size_t i = 0; i < vocab; ++i) kl += std::exp(la[i]) * (la[i] - lb[i]);
      kl_sum += kl;
      same_top += argmax(a, vocab) == argmax(b, vocab) ? 1 : 0;
      ++positions;
    }
  }
  double mean_kl() const { return positions > 0 ? kl_sum / static_cast<double>(positions) : 0; }
  double top1() const { return positions > 0 ? static_cast<double>(same_top) / static_cast<double>(positions) : 0; }
};

}  // namespace tern::bench
