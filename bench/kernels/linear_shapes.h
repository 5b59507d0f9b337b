// The full-size ERNIE-4.5-0.3B's linear layers, as the CPU microbenchmarks
// time them (tern_cpu_linear_bench, tern_onednn_bench), and their comma
// list arguments.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

namespace tern::bench {

struct LayerShape {
  const char* name;
  int64_t in, out;  // K, N
};

inline constexpr LayerShape kLayerShapes[] = {
    // 16 q heads and 2 kv heads of 128: q|k|v 1024 -> 2048 + 256 + 256, o 2048 -> 1024.
    {"qkv", 1024, 2560}, {"o", 2048, 1024}, {"gate_up", 1024, 6144}, {"down", 3072, 1024}, {"lm_head", 1024, 103424},
};

// "1,8,512" -> {1, 8, 512}.
inline std::vector<int> parse_int_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

}  // namespace tern::bench
