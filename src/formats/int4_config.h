// The int4 weight-only schemes of Hugging Face checkpoints as config.json's
// quantization_config names them: AutoAWQ's GEMM packing, GPTQ (AutoGPTQ and
// GPTQModel) and compressed-tensors' pack-quantized W4A16. The text is
// untrusted: every field is type-checked, and anything tern cannot load
// exactly (other bit widths or packings, activation quantization, mixed
// schemes) is refused with the field and the value at fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tern {

enum class Int4Scheme {
  kAwqGemm,           // quant_method "awq", version "gemm"
  kGptq,              // quant_method "gptq"
  kCompressedTensors  // quant_method "compressed-tensors", format "pack-quantized"
};

struct Int4Config {
  Int4Scheme scheme = Int4Scheme::kAwqGemm;
  // Input channels that share one scale (and zero point); 0 when one group
  // spans the whole row (group_size -1, or compressed-tensors' "channel").
  int64_t group_size = 128;
  // Zero point fixed at 8 (GPTQ sym, compressed-tensors symmetric): no
  // zero-point tensor is read (GPTQ's qzeros must then hold 8 everywhere).
  bool symmetric = false;
  // GPTQ desc_act, compressed-tensors actorder "group": g_idx (weight_g_idx)
  // maps input channels to groups in any order.
  bool act_order = false;
  // GPTQ checkpoints of format "gptq" (v1, the default) store zero point - 1
  // in qzeros; "gptq_v2" stores the zero point itself.
  bool zero_minus_one = false;

  // Input channels per group for a row of `in_features`.
  int64_t group_width(int64_t in_features) const { return group_size > 0 ? group_size : in_features; }
};

// "awq", "gptq", "compressed-tensors": quant_method, and what --quantization takes.
std::string_view int4_method_name(Int4Scheme scheme);
// "AWQ (GEMM)", "GPTQ", "compressed-tensors pack-quantized": for messages and logs.
std::string_view int4_scheme_label(Int4Scheme scheme);
// "AWQ (GEMM), 4-bit, group 128, asymmetric": one line for the start-up log.
std::string describe_int4_config(const Int4Config& config);

// config.json's quantization_config, or nullopt when it has none (a plain
// float checkpoint). kUnsupported for a quant_method or setting tern does
// not load (named in the message); kParse / kOutOfRange for malformed fields.
// `source` names the file in errors.
Result<std::optional<Int4Config>> parse_int4_config(std::string_view config_json, const std::string& source);

}  // namespace tern
