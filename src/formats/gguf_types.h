// The two type enumerations of a GGUF file: the type of a metadata value
// (GgufType, the spec's gguf_metadata_value_type) and the element type of a
// tensor (GgmlType, ggml's ggml_type ids) with each one's block layout, from
// which a tensor's byte size follows.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "formats/dtype.h"

namespace tern {

// Metadata value types; the numbers are the on-disk ids.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "u8", "string", "array", ...; "type 13" style text for an id out of range.
std::string_view gguf_type_name(GgufType t);
// The type for an on-disk id, or nullopt for an unknown one.
std::optional<GgufType> gguf_type_from_id(uint32_t id);
// Bytes of one value of a fixed-size type; 0 for kString and kArray.
uint64_t gguf_type_size(GgufType t);

// Tensor element types; the numbers are ggml's ids (ids ggml removed, 4, 5
// and 31-33, 36-38, are not listed and are refused like any unknown id).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

// How a ggml type lays out its elements: `block_size` elements (along the
// innermost dimension, ne[0]) are stored in `block_bytes` bytes.
struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // "F32", "Q4_K", ... as llama.cpp prints them
  uint32_t block_size;
  uint32_t block_bytes;
};

// The layout of a known type id, or nullptr for an unknown one.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// The layout of a listed type (never null).
const GgmlTypeInfo& ggml_type_info(GgmlType t);
std::string_view ggml_type_name(GgmlType t);

// Bytes of a tensor of type `t` with dims `ne` (ne[0] innermost), or nullopt
// when ne[0] is not a whole number of blocks, a dim is negative, or the size
// does not fit in 64 bits. An empty `ne` is a scalar (one element).
std::optional<uint64_t> ggml_tensor_bytes(GgmlType t, std::span<const int64_t> ne);

// The element types that both worlds share: the plain ones (F32, F16, BF16,
// F64, I8, I16, I32, I64) and the block-quantized ones tern computes with
// (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_K: same block bytes as ggml, so a tensor's
// data is used as is); nullopt for the others.
std::optional<DType> ggml_type_to_dtype(GgmlType t);
std::optional<GgmlType> dtype_to_ggml_type(DType t);

}  // namespace tern
