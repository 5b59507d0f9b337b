// The p-quantile of a sample for the CLI's reports (tern perplexity's KL
// divergences, tern bench's times to first token).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tern::cli {

// p in [0, 1], interpolated between the two nearest ranks (numpy's default
// and serve_bench.py's); 0 for an empty sample.
template <typename T>
double percentile(std::vector<T> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double x = p * static_cast<double>(v.size() - 1);
  const auto i = static_cast<size_t>(x);
  const double f = x - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

}  // namespace tern::cli
