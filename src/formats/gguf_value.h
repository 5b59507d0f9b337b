// One GGUF metadata value: a scalar of one of the twelve scalar types, a
// string, or a flat array of one of those (arrays of arrays are refused by
// the reader and cannot be built). Shared by the reader and the writer.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "formats/gguf_types.h"

namespace tern {

class GgufValue {
 public:
  // One alternative per scalar type and one per array type. int8_t is
  // `signed char`, distinct from uint8_t and bool, so each C++ type names
  // exactly one GGUF type.
  using Storage =
      std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, uint64_t, int64_t,
                   double, std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>, std::vector<int16_t>,
                   std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>, std::vector<bool>,
                   std::vector<std::string>, std::vector<uint64_t>, std::vector<int64_t>, std::vector<double>>;

  GgufValue() = default;
  template <typename T>
  requires std::is_constructible_v<Storage, T&&> &&(!std::is_same_v<std::decay_t<T>, GgufValue>)GgufValue(T&& v)
      : v_(std::forward<T>(v)) {}                   // NOLINT: implicit, so `writer.add("k", uint32_t{3})` reads well
  GgufValue(const char* s) : v_(std::string(s)) {}  // NOLINT: a literal is a string, not a bool

  // kArray for arrays.
  GgufType type() const;
  // The element type of an array; type() for a scalar.
  GgufType element_type() const;
  bool is_array() const { return type() == GgufType::kArray; }
  // Elements of an array; 1 for a scalar.
  uint64_t size() const;

  // Null when the value holds another alternative.
  template <typename T>
  const T* get_if() const {
    return std::get_if<T>(&v_);
  }
  const Storage& storage() const { return v_; }

  // "u32", "array of string", ...: how types appear in every message.
  std::string type_string() const;

  bool operator==(const GgufValue&) const = default;

 private:
  Storage v_;
};

}  // namespace tern
