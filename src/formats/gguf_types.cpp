// Names and layouts of GGUF metadata types and ggml tensor types. The block
// layouts are ggml's (ggml/src/ggml.c type_traits); a wrong entry would make
// every tensor of that type fail the size check, which the tests catch.
#include "formats/gguf_types.h"

#include <array>

#include "base/checked_math.h"

namespace tern {
namespace {

constexpr std::array<std::string_view, 13> kGgufTypeNames = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

constexpr std::array<GgmlTypeInfo, 34> kGgmlTypes = {{
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},
    {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},
    {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ8_1, "Q8_1", 32, 40},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},
    {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},
    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},
    {GgmlType::kMXFP4, "MXFP4", 32, 17},
    {GgmlType::kNVFP4, "NVFP4", 64, 36},
    {GgmlType::kQ1_0, "Q1_0", 128, 18},
}};

struct DTypePair {
  GgmlType ggml;
  DType dtype;
};

constexpr std::array<DTypePair, 14> kDTypePairs = {{
    {GgmlType::kF32, DType::kF32},
    {GgmlType::kF16, DType::kF16},
    {GgmlType::kBF16, DType::kBF16},
    {GgmlType::kF64, DType::kF64},
    {GgmlType::kI8, DType::kI8},
    {GgmlType::kI16, DType::kI16},
    {GgmlType::kI32, DType::kI32},
    {GgmlType::kI64, DType::kI64},
    {GgmlType::kQ8_0, DType::kQ8_0},
    {GgmlType::kQ4_0, DType::kQ4_0},
    {GgmlType::kQ4_K, DType::kQ4_K},
    {GgmlType::kQ5_K, DType::kQ5_K},
    {GgmlType::kQ6_K, DType::kQ6_K},
    {GgmlType::kQ8_K, DType::kQ8_K},
}};

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  const auto id = static_cast<uint32_t>(t);
  return id < kGgufTypeNames.size() ? kGgufTypeNames[id] : std::string_view("unknown");
}

std::optional<GgufType> gguf_type_from_id(uint32_t id) {
  if (id >= kGgufTypeNames.size()) return std::nullopt;
  return static_cast<GgufType>(id);
}

uint64_t gguf_type_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& info : kGgmlTypes) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType t) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
  return info != nullptr ? *info : kGgmlTypes[0];  // unreachable for a listed enumerator
}

std::string_view ggml_type_name(GgmlType t) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
  return info != nullptr ? info->name : std::string_view("unknown");
}

std::optional<uint64_t> ggml_tensor_bytes(GgmlType t, std::span<const int64_t> ne) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
  if (info == nullptr) return std::nullopt;
  const int64_t ne0 = ne.empty() ? 1 : ne[0];
  if (ne0 < 0 || ne0 % info->block_size != 0) return std::nullopt;
  auto rows = checked_product(ne.empty() ? ne : ne.subspan(1));
  if (!rows) return std::nullopt;
  auto row_bytes = checked_mul(static_cast<uint64_t>(ne0) / info->block_size, info->block_bytes);
  if (!row_bytes) return std::nullopt;
  return checked_mul(*row_bytes, *rows);
}

std::optional<DType> ggml_type_to_dtype(GgmlType t) {
  for (const DTypePair& p : kDTypePairs) {
    if (p.ggml == t) return p.dtype;
  }
  return std::nullopt;
}

std::optional<GgmlType> dtype_to_ggml_type(DType t) {
  for (const DTypePair& p : kDTypePairs) {
    if (p.dtype == t) return p.ggml;
  }
  return std::nullopt;
}

}  // namespace tern
