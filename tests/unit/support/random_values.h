// Random inputs for kernel tests: uniform floats with zero left out, since
// zeros hide unwritten outputs and wrong indexing.
#pragma once

#include <random>
#include <vector>

namespace tern::testing {

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do {
      x = d(rng);
    } while (x == 0.0f);
  }
  return v;
}

}  // namespace tern::testing
