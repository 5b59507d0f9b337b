// Element types of tensors in model files, with their names as the
// safetensors header spells them, and ggml's block-quantized weight types
// (byte layouts identical to ggml's, so GGUF tensors are used in place).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tern {

enum class DType {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
  // Block-quantized: a row is a sequence of blocks of dtype_block_size
  // elements, each stored in dtype_block_bytes bytes (ggml's block_q8_0, ...).
  kQ8_0,
  kQ4_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,  // activations of the K-quant dot products; not used for weights by llama.cpp
};

// "F32", "F16", "BF16", ... as in safetensors headers; "Q8_0", "Q4_K", ... as
// llama.cpp prints the quantized types.
std::string_view dtype_name(DType t);
// The safetensors spellings only: quantized types are not safetensors dtypes,
// so a header naming one is refused like any unknown dtype.
std::optional<DType> dtype_from_name(std::string_view name);
// Bytes per element; 0 for the block-quantized types (use the block functions).
size_t dtype_size(DType t);

// Inline and constexpr so that modules which use DType without linking
// tern_formats (the CPU backend) can size rows.
constexpr bool is_quantized(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_K:
      return true;
    default:
      return false;
  }
}

// Elements per block: 32 for Q8_0/Q4_0, 256 for the K-quants, 1 for plain types.
constexpr int64_t dtype_block_size(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
      return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_K:
      return 256;
    default:
      return 1;
  }
}

// Bytes per block (per element for plain types; 0 for an unknown value).
constexpr int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
    case DType::kQ8_0:
      return 34;  // fp16 d, 32 x int8
    case DType::kQ4_0:
      return 18;  // fp16 d, 16 bytes of nibbles
    case DType::kQ4_K:
      return 144;  // fp16 d, dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
    case DType::kQ5_K:
      return 176;  // as Q4_K plus 32 bytes of fifth bits
    case DType::kQ6_K:
      return 210;  // 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, fp16 d
    case DType::kQ8_K:
      return 292;  // fp32 d, 256 x int8, 16 x int16 sums of 16
  }
  return 0;
}

}  // namespace tern
