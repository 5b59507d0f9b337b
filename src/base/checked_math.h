// Overflow-checked 64-bit arithmetic for code that sizes buffers from
// untrusted bytes (file headers, request fields). Each returns nullopt on
// overflow instead of wrapping.
#pragma once

#include <cstdint>
#include <optional>

namespace tern {

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Product of all dims; nullopt when any is negative or the product overflows.
template <typename Container>
std::optional<uint64_t> checked_product(const Container& dims) {
  uint64_t r = 1;
  for (auto d : dims) {
    if (d < 0) return std::nullopt;
    auto next = checked_mul(r, static_cast<uint64_t>(d));
    if (!next) return std::nullopt;
    r = *next;
  }
  return r;
}

}  // namespace tern
