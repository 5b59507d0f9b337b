// Names and sizes of tensor element types. The names are the safetensors
// spellings (and llama.cpp's for the quantized types), which GGUF conversion
// and error messages reuse.
#include "formats/dtype.h"

#include <array>
#include <utility>

namespace tern {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;  // 0: block-quantized, not a safetensors dtype
};

constexpr std::array<DTypeInfo, 16> kDTypes = {{
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
    {DType::kQ8_0, "Q8_0", 0},
    {DType::kQ4_0, "Q4_0", 0},
    {DType::kQ4_K, "Q4_K", 0},
    {DType::kQ5_K, "Q5_K", 0},
    {DType::kQ6_K, "Q6_K", 0},
    {DType::kQ8_K, "Q8_K", 0},
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
    if (info.size != 0 && info.name == name) return info.type;
  }
  return std::nullopt;
}

size_t dtype_size(DType t) {
  const DTypeInfo* info = info_of(t);
  return info != nullptr ? info->size : 0;
}

}  // namespace tern
