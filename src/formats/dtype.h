// Element types of tensors in model files, with their names as the
// safetensors header spells them.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace tern {

enum class DType { kF32, kF16, kBF16, kF64, kI8, kU8, kI16, kI32, kI64, kBool };

// "F32", "F16", "BF16", ... as in safetensors headers.
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
size_t dtype_size(DType t);

}  // namespace tern
