// Dequantization of int4 layers: each scheme's tensors are checked, then
// unpacked into one plain form (q per weight, z and s per group and output,
// the group of each input channel) from which bf16 values or ggml blocks
// are written.
// The tensors come from untrusted files: shapes are checked against the
// layer's width before any index is formed, and words are read with memcpy
// (safetensors only promises byte alignment).
#include "formats/int4_weights.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "base/bf16.h"
#include "base/checked_math.h"

namespace tern {
namespace {

// Output channel held by nibble n of an AWQ GEMM word (AutoAWQ's interleave,
// which suits its CUDA kernel's dequantization).
constexpr int kAwqColumnOfNibble[8] = {0, 2, 4, 6, 1, 3, 5, 7};

uint32_t word_at(const TensorView& t, int64_t index) {
  uint32_t w;
  std::memcpy(&w, t.data.data() + static_cast<size_t>(index) * 4, 4);
  return w;
}

uint32_t nibble(uint32_t word, int n) { return (word >> (4 * n)) & 0xFu; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The layer in one form: q [out][in] and z, s [groups][out]; group_of [in].
struct Unpacked {
  int64_t out = 0, in = 0, groups = 0;
  std::vector<uint8_t> q;
  std::vector<uint8_t> zero;
  std::vector<float> scale;
  std::vector<int32_t> group_of;
};

// Looks tensors of one layer up, checking dtype and shape, and keeps their names.
class LayerTensors {
 public:
  LayerTensors(const Checkpoint& ckpt, const Int4Config& config, std::string_view prefix)
      : ckpt_(ckpt), config_(config), prefix_(prefix) {}

  std::string name(std::string_view suffix) const { return prefix_ + "." + std::string(suffix); }
  bool has(std::string_view suffix) const { return ckpt_.find(name(suffix)) != nullptr; }

  // `layout` says what the scheme stores there, for the shape error.
  Result<const TensorView*> get(std::string_view suffix, const std::vector<int64_t>& shape,
                                std::initializer_list<DType> dtypes, std::string_view layout) {
    const std::string n = name(suffix);
    Result<const TensorView*> t = ckpt_.require(n, shape);
    if (!t.is_ok()) {
      const std::string what = std::string(int4_scheme_label(config_.scheme)) + " stores " + std::string(suffix) +
                               " as " + std::string(layout);
      return Status(t.status().code(), t.status().message() + " (" + what + ")");
    }
    bool dtype_ok = false;
    std::string expected;
    for (DType d : dtypes) {
      dtype_ok = dtype_ok || (*t)->dtype == d;
      expected += (expected.empty() ? "" : " or ") + std::string(dtype_name(d));
    }
    if (!dtype_ok) {
      return invalid_argument(where(n) + " has dtype " + std::string(dtype_name((*t)->dtype)) + ", expected " +
                              expected + " (" + std::string(int4_scheme_label(config_.scheme)) + ")");
    }
    used_.push_back(n);
    return t;
  }

  std::string where(const std::string& tensor) const { return ckpt_.file_of(tensor) + ": tensor '" + tensor + "'"; }
  std::vector<std::string>& used() { return used_; }

 private:
  const Checkpoint& ckpt_;
  const Int4Config& config_;
  std::string prefix_;
  std::vector<std::string> used_;
};

constexpr std::initializer_list<DType> kScaleDTypes = {DType::kF16, DType::kBF16, DType::kF32};

// scales laid out [groups][out] (transposed: [out][groups]) into u.scale.
Status read_scales(const TensorView& t, bool out_major, Unpacked& u, const LayerTensors& names) {
  u.scale.resize(static_cast<size_t>(u.groups * u.out));
  const size_t esize = dtype_size(t.dtype);
  for (int64_t g = 0; g < u.groups; ++g) {
    for (int64_t o = 0; o < u.out; ++o) {
      const int64_t index = out_major ? o * u.groups + g : g * u.out + o;
      const uint8_t* p = t.data.data() + static_cast<size_t>(index) * esize;
      float s = 0;
      uint16_t h = 0;
      if (t.dtype == DType::kF32) {
        std::memcpy(&s, p, 4);
      } else {
        std::memcpy(&h, p, 2);
        s = t.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      if (!std::isfinite(s)) {
        return invalid_argument(names.where(t.name) + " holds a non-finite scale at " +
                                (out_major ? "[" + std::to_string(o) + ", " + std::to_string(g) + "]"
                                           : "[" + std::to_string(g) + ", " + std::to_string(o) + "]"));
      }
      u.scale[static_cast<size_t>(g * u.out + o)] = s;
    }
  }
  return Status::ok();
}

// Groups of consecutive input channels: group_of[i] = i / width.
void contiguous_groups(Unpacked& u, int64_t width) {
  u.group_of.resize(static_cast<size_t>(u.in));
  for (int64_t i = 0; i < u.in; ++i) u.group_of[static_cast<size_t>(i)] = static_cast<int32_t>(i / width);
}

// The group of each input channel: consecutive groups of `width`, or the
// tensor `suffix` ([in] int32, GPTQ's g_idx, compressed-tensors'
// weight_g_idx) under act order; without act order that tensor may be
// present but must say the same. `setting` names the config field for messages.
Status read_group_index(LayerTensors& t, std::string_view suffix, std::string_view setting, const Int4Config& c,
                        int64_t width, Unpacked& u) {
  contiguous_groups(u, width);
  if (!c.act_order && !t.has(suffix)) return Status::ok();
  TERN_ASSIGN_OR_RETURN(const TensorView* g_idx, t.get(suffix, {u.in}, {DType::kI32}, "[in_features] int32"));
  for (int64_t i = 0; i < u.in; ++i) {
    const auto g = static_cast<int32_t>(word_at(*g_idx, i));
    if (g < 0 || g >= u.groups) {
      return invalid_argument(t.where(g_idx->name) + " maps input channel " + std::to_string(i) + " to group " +
                              std::to_string(g) + ", outside [0, " + std::to_string(u.groups) + ")");
    }
    if (!c.act_order && g != u.group_of[static_cast<size_t>(i)]) {
      return unsupported(t.where(g_idx->name) + " puts input channel " + std::to_string(i) + " in group " +
                         std::to_string(g) + ", not " + std::to_string(u.group_of[static_cast<size_t>(i)]) +
                         ": the channels are reordered (act order) but quantization_config's " + std::string(setting) +
                         " does not say so");
    }
    u.group_of[static_cast<size_t>(i)] = g;
  }
  return Status::ok();
}

Status unpack_awq(LayerTensors& t, const Int4Config& c, Unpacked& u) {
  const int64_t width = c.group_width(u.in);
  if (u.out % 8 != 0) {
    return invalid_argument(t.name("qweight") + ": out_features " + std::to_string(u.out) +
                            " is not a multiple of 8, which AWQ GEMM packs into each int32");
  }
  if (u.in % width != 0) {
    return invalid_argument(t.name("qweight") + ": group_size " + std::to_string(width) +
                            " does not divide in_features " + std::to_string(u.in) + " (AWQ GEMM stores whole groups)");
  }
  u.groups = u.in / width;
  const int64_t words = u.out / 8;
  TERN_ASSIGN_OR_RETURN(const TensorView* qweight,
                        t.get("qweight", {u.in, words}, {DType::kI32}, "[in_features, out_features / 8] int32"));
  TERN_ASSIGN_OR_RETURN(const TensorView* qzeros, t.get("qzeros", {u.groups, words}, {DType::kI32},
                                                        "[in_features / group_size, out_features / 8] int32"));
  TERN_ASSIGN_OR_RETURN(const TensorView* scales,
                        t.get("scales", {u.groups, u.out}, kScaleDTypes, "[in_features / group_size, out_features]"));
  TERN_RETURN_IF_ERROR(read_scales(*scales, /*out_major=*/false, u, t));
  contiguous_groups(u, width);
  u.q.resize(static_cast<size_t>(u.out * u.in));
  u.zero.resize(static_cast<size_t>(u.groups * u.out));
  for (int64_t i = 0; i < u.in; ++i) {
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t w = word_at(*qweight, i * words + j);
      for (int n = 0; n < 8; ++n) u.q[static_cast<size_t>((8 * j + kAwqColumnOfNibble[n]) * u.in + i)] = nibble(w, n);
    }
  }
  for (int64_t g = 0; g < u.groups; ++g) {
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t w = word_at(*qzeros, g * words + j);
      for (int n = 0; n < 8; ++n) u.zero[static_cast<size_t>(g * u.out + 8 * j + kAwqColumnOfNibble[n])] = nibble(w, n);
    }
  }
  return Status::ok();
}

Status unpack_gptq(LayerTensors& t, const Int4Config& c, Unpacked& u) {
  const int64_t width = c.group_width(u.in);
  if (u.in % 8 != 0 || u.out % 8 != 0) {
    return invalid_argument(t.name("qweight") + ": a " + std::to_string(u.out) + " x " + std::to_string(u.in) +
                            " layer does not fit GPTQ's packing, which needs in_features and out_features to be "
                            "multiples of 8");
  }
  u.groups = ceil_div(u.in, width);
  TERN_ASSIGN_OR_RETURN(const TensorView* qweight,
                        t.get("qweight", {u.in / 8, u.out}, {DType::kI32}, "[in_features / 8, out_features] int32"));
  TERN_ASSIGN_OR_RETURN(const TensorView* qzeros, t.get("qzeros", {u.groups, u.out / 8}, {DType::kI32},
                                                        "[ceil(in_features / group_size), out_features / 8] int32"));
  TERN_ASSIGN_OR_RETURN(const TensorView* scales, t.get("scales", {u.groups, u.out}, kScaleDTypes,
                                                        "[ceil(in_features / group_size), out_features]"));
  TERN_RETURN_IF_ERROR(read_scales(*scales, /*out_major=*/false, u, t));

  TERN_RETURN_IF_ERROR(read_group_index(t, "g_idx", "desc_act", c, width, u));

  u.q.resize(static_cast<size_t>(u.out * u.in));
  for (int64_t k = 0; k < u.in / 8; ++k) {
    for (int64_t o = 0; o < u.out; ++o) {
      const uint32_t w = word_at(*qweight, k * u.out + o);
      for (int n = 0; n < 8; ++n) u.q[static_cast<size_t>(o * u.in + 8 * k + n)] = nibble(w, n);
    }
  }
  u.zero.resize(static_cast<size_t>(u.groups * u.out));
  const uint32_t offset = c.zero_minus_one ? 1 : 0;
  for (int64_t g = 0; g < u.groups; ++g) {
    for (int64_t j = 0; j < u.out / 8; ++j) {
      const uint32_t w = word_at(*qzeros, g * (u.out / 8) + j);
      for (int n = 0; n < 8; ++n) {
        const uint32_t z = nibble(w, n) + offset;
        if (c.symmetric && z != 8) {
          return invalid_argument(t.where(qzeros->name) + " holds zero point " + std::to_string(z) + " at group " +
                                  std::to_string(g) + ", output " + std::to_string(8 * j + n) +
                                  ", but sym=true puts every zero point at 8" +
                                  (c.zero_minus_one ? " (stored as 7 in the \"gptq\" format; a \"gptq_v2\" checkpoint?)"
                                                    : " (a \"gptq\" v1 checkpoint, which stores 7?)"));
        }
        u.zero[static_cast<size_t>(g * u.out + 8 * j + n)] = static_cast<uint8_t>(z);
      }
    }
  }
  return Status::ok();
}

Status unpack_compressed_tensors(LayerTensors& t, const Int4Config& c, Unpacked& u) {
  const int64_t width = c.group_width(u.in);
  u.groups = ceil_div(u.in, width);
  const int64_t words = ceil_div(u.in, 8);
  TERN_ASSIGN_OR_RETURN(const TensorView* shape,
                        t.get("weight_shape", {2}, {DType::kI64, DType::kI32}, "[2] = {out_features, in_features}"));
  int64_t dims[2] = {0, 0};
  for (int d = 0; d < 2; ++d) {
    if (shape->dtype == DType::kI64) {
      std::memcpy(&dims[d], shape->data.data() + 8 * d, 8);
    } else {
      dims[d] = static_cast<int32_t>(word_at(*shape, d));
    }
  }
  if (dims[0] != u.out || dims[1] != u.in) {
    return invalid_argument(t.where(shape->name) + " says [" + std::to_string(dims[0]) + ", " +
                            std::to_string(dims[1]) + "], expected [" + std::to_string(u.out) + ", " +
                            std::to_string(u.in) + "] for this layer");
  }
  TERN_ASSIGN_OR_RETURN(const TensorView* packed, t.get("weight_packed", {u.out, words}, {DType::kI32},
                                                        "[out_features, ceil(in_features / 8)] int32"));
  TERN_ASSIGN_OR_RETURN(const TensorView* scales, t.get("weight_scale", {u.out, u.groups}, kScaleDTypes,
                                                        "[out_features, ceil(in_features / group_size)]"));
  TERN_RETURN_IF_ERROR(read_scales(*scales, /*out_major=*/true, u, t));
  TERN_RETURN_IF_ERROR(read_group_index(t, "weight_g_idx", "actorder", c, width, u));

  u.q.resize(static_cast<size_t>(u.out * u.in));
  for (int64_t o = 0; o < u.out; ++o) {
    for (int64_t k = 0; k < words; ++k) {
      const uint32_t w = word_at(*packed, o * words + k);
      for (int n = 0; n < 8 && 8 * k + n < u.in; ++n) u.q[static_cast<size_t>(o * u.in + 8 * k + n)] = nibble(w, n);
    }
  }
  u.zero.assign(static_cast<size_t>(u.groups * u.out), 8);
  if (c.symmetric) {
    if (t.has("weight_zero_point")) {
      return invalid_argument(t.name("weight_zero_point") +
                              " is present but the scheme is symmetric (weights.symmetric true): which is meant?");
    }
    return Status::ok();
  }
  const int64_t zero_rows = ceil_div(u.out, 8);
  TERN_ASSIGN_OR_RETURN(const TensorView* zp, t.get("weight_zero_point", {zero_rows, u.groups}, {DType::kI32},
                                                    "[ceil(out_features / 8), groups] int32 when asymmetric"));
  for (int64_t j = 0; j < zero_rows; ++j) {
    for (int64_t g = 0; g < u.groups; ++g) {
      const uint32_t w = word_at(*zp, j * u.groups + g);
      for (int n = 0; n < 8 && 8 * j + n < u.out; ++n) {
        u.zero[static_cast<size_t>(g * u.out + 8 * j + n)] = static_cast<uint8_t>(nibble(w, n));
      }
    }
  }
  return Status::ok();
}

Result<Unpacked> unpack(const Checkpoint& ckpt, const Int4Config& config, std::string_view prefix,
                        int64_t out_features, int64_t in_features, std::vector<std::string>* used) {
  if (out_features <= 0 || in_features <= 0 || !checked_mul(static_cast<uint64_t>(out_features),
                                                            static_cast<uint64_t>(in_features))) {
    return invalid_argument(std::string(prefix) + ": layer of " + std::to_string(out_features) + " x " +
                            std::to_string(in_features) + " weights");
  }
  LayerTensors tensors(ckpt, config, prefix);
  Unpacked u;
  u.out = out_features;
  u.in = in_features;
  switch (config.scheme) {
    case Int4Scheme::kAwqGemm:
      TERN_RETURN_IF_ERROR(unpack_awq(tensors, config, u));
      break;
    case Int4Scheme::kGptq:
      TERN_RETURN_IF_ERROR(unpack_gptq(tensors, config, u));
      break;
    case Int4Scheme::kCompressedTensors:
      TERN_RETURN_IF_ERROR(unpack_compressed_tensors(tensors, config, u));
      break;
  }
  if (used != nullptr) used->insert(used->end(), tensors.used().begin(), tensors.used().end());
  return u;
}

std::vector<uint16_t> to_bf16(const Unpacked& u) {
  std::vector<uint16_t> w(static_cast<size_t>(u.out * u.in));
  for (int64_t o = 0; o < u.out; ++o) {
    const uint8_t* q = u.q.data() + o * u.in;
    uint16_t* row = w.data() + o * u.in;
    for (int64_t i = 0; i < u.in; ++i) {
      const size_t gz = static_cast<size_t>(u.group_of[static_cast<size_t>(i)] * u.out + o);
      row[i] = f32_to_bf16(static_cast<float>(static_cast<int>(q[i]) - static_cast<int>(u.zero[gz])) * u.scale[gz]);
    }
  }
  return w;
}

// Q4_0 if every zero point is 8, else Q8_0, when every block of 32 inputs
// lies in one group and each scale is an fp16 value; nullopt otherwise.
std::optional<DType> block_dtype(const Unpacked& u) {
  constexpr int64_t kBlock = 32;
  if (u.in % kBlock != 0) return std::nullopt;
  for (int64_t i = 0; i < u.in; ++i) {
    if (u.group_of[static_cast<size_t>(i)] != u.group_of[static_cast<size_t>(i - i % kBlock)]) return std::nullopt;
  }
  for (float s : u.scale) {
    if (f16_to_f32(f32_to_f16(s)) != s) return std::nullopt;
  }
  for (uint8_t z : u.zero) {
    if (z != 8) return DType::kQ8_0;
  }
  return DType::kQ4_0;
}

std::vector<uint8_t> to_blocks(const Unpacked& u, DType dtype) {
  constexpr int64_t kBlock = 32;
  const int64_t block_bytes = dtype_block_bytes(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(u.out * (u.in / kBlock) * block_bytes));
  uint8_t* p = out.data();
  for (int64_t o = 0; o < u.out; ++o) {
    const uint8_t* q = u.q.data() + o * u.in;
    for (int64_t b = 0; b < u.in / kBlock; ++b, p += block_bytes, q += kBlock) {
      const size_t gz = static_cast<size_t>(u.group_of[static_cast<size_t>(b * kBlock)] * u.out + o);
      const uint16_t d = f32_to_f16(u.scale[gz]);
      std::memcpy(p, &d, 2);
      if (dtype == DType::kQ4_0) {  // byte j: input j in the low nibble, input j + 16 in the high
        for (int j = 0; j < 16; ++j) p[2 + j] = static_cast<uint8_t>(q[j] | q[j + 16] << 4);
      } else {
        for (int j = 0; j < 32; ++j) p[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q[j] - u.zero[gz]));
      }
    }
  }
  return out;
}

}  // namespace

std::string int4_marker_tensor(Int4Scheme scheme, std::string_view prefix) {
  return std::string(prefix) + (scheme == Int4Scheme::kCompressedTensors ? ".weight_packed" : ".qweight");
}

Result<std::vector<uint16_t>> dequantize_int4_linear(const Checkpoint& ckpt, const Int4Config& config,
                                                     std::string_view prefix, int64_t out_features,
                                                     int64_t in_features, std::vector<std::string>* used) {
  TERN_ASSIGN_OR_RETURN(Unpacked u, unpack(ckpt, config, prefix, out_features, in_features, used));
  return to_bf16(u);
}

Result<Int4Layer> load_int4_linear(const Checkpoint& ckpt, const Int4Config& config, std::string_view prefix,
                                   int64_t out_features, int64_t in_features, std::vector<std::string>* used) {
  TERN_ASSIGN_OR_RETURN(Unpacked u, unpack(ckpt, config, prefix, out_features, in_features, used));
  Int4Layer layer;
  if (std::optional<DType> blocks = block_dtype(u)) {
    layer.dtype = *blocks;
    layer.data = to_blocks(u, *blocks);
    return layer;
  }
  const std::vector<uint16_t> w = to_bf16(u);
  layer.data.resize(w.size() * 2);
  std::memcpy(layer.data.data(), w.data(), layer.data.size());
  return layer;
}

}  // namespace tern
