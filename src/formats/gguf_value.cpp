// GgufValue's type queries: the variant alternative maps to the GGUF type
// through the C++ type it holds.
#include "formats/gguf_value.h"

namespace tern {
namespace {

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {
  using Element = T;
};

template <typename T>
constexpr GgufType scalar_type() {
  if constexpr (std::is_same_v<T, uint8_t>) return GgufType::kU8;
  if constexpr (std::is_same_v<T, int8_t>) return GgufType::kI8;
  if constexpr (std::is_same_v<T, uint16_t>) return GgufType::kU16;
  if constexpr (std::is_same_v<T, int16_t>) return GgufType::kI16;
  if constexpr (std::is_same_v<T, uint32_t>) return GgufType::kU32;
  if constexpr (std::is_same_v<T, int32_t>) return GgufType::kI32;
  if constexpr (std::is_same_v<T, float>) return GgufType::kF32;
  if constexpr (std::is_same_v<T, bool>) return GgufType::kBool;
  if constexpr (std::is_same_v<T, std::string>) return GgufType::kString;
  if constexpr (std::is_same_v<T, uint64_t>) return GgufType::kU64;
  if constexpr (std::is_same_v<T, int64_t>) return GgufType::kI64;
  if constexpr (std::is_same_v<T, double>) return GgufType::kF64;
  return GgufType::kArray;  // no scalar maps here
}

}  // namespace

GgufType GgufValue::type() const {
  return std::visit(
      [](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (IsVector<T>::value) {
          return GgufType::kArray;
        } else {
          return scalar_type<T>();
        }
      },
      v_);
}

GgufType GgufValue::element_type() const {
  return std::visit(
      [](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (IsVector<T>::value) {
          return scalar_type<typename IsVector<T>::Element>();
        } else {
          return scalar_type<T>();
        }
      },
      v_);
}

uint64_t GgufValue::size() const {
  return std::visit(
      [](const auto& v) -> uint64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (IsVector<T>::value) {
          return v.size();
        } else {
          return 1;
        }
      },
      v_);
}

std::string GgufValue::type_string() const {
  if (!is_array()) return std::string(gguf_type_name(type()));
  return "array of " + std::string(gguf_type_name(element_type()));
}

}  // namespace tern
