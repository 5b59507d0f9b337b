// Names and sizes of tensor element types. The names are the safetensors
// spellings, which GGUF conversion and error messages reuse.
#include "formats/dtype.h"

#include <array>
#include <utility>

namespace tern {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kI16, "I16", 2},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
    {DType::kBool, "BOOL", 1},
}};

const DTypeInfo* info_of(DType t) {
  for (const auto& info : kDTypes) {
    if (info.type == t) return &info;
  }
  return nullptr;
}

}  // namespace

std::string_view dtype_name(DType t) {
  const DTypeInfo* info = info_of(t);
  return info != nullptr ? info->name : "UNKNOWN";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

size_t dtype_size(DType t) {
  const DTypeInfo* info = info_of(t);
  return info != nullptr ? info->size : 0;
}

}  // namespace tern
