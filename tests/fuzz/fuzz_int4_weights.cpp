// libFuzzer target for the int4 layer loaders (AWQ GEMM, GPTQ, compressed-
// tensors pack-quantized): the first four bytes pick the scheme and its
// settings and the layer's width, the rest is a safetensors file holding the
// layer "l". Any input must give an error, or a layer of exactly the size its
// dtype takes; the bf16 and the block loaders must agree on success. A
// violation traps.
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/checkpoint.h"
#include "formats/int4_weights.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  tern::Int4Config c;
  c.scheme = static_cast<tern::Int4Scheme>((data[0] & 0x0F) % 3);
  c.symmetric = (data[0] & 0x10) != 0;
  c.act_order = (data[0] & 0x20) != 0;
  c.zero_minus_one = (data[0] & 0x40) != 0;
  c.group_size = 8 * static_cast<int64_t>(data[1] % 32);  // 0: one group per row
  const int64_t out = 1 + data[2] % 64, in = 1 + data[3];

  auto file = tern::SafetensorsFile::parse(std::span<const uint8_t>(data + 4, size - 4), "fuzz.safetensors");
  if (!file.is_ok()) return 0;
  auto ckpt = tern::Checkpoint::from_safetensors(std::move(file).value());
  if (!ckpt.is_ok()) return 0;

  auto layer = tern::load_int4_linear(*ckpt, c, "l", out, in);
  auto bf16 = tern::dequantize_int4_linear(*ckpt, c, "l", out, in);
  check(layer.is_ok() == bf16.is_ok());
  if (!layer.is_ok()) {
    check(!layer.status().message().empty() && layer.status().message() == bf16.status().message());
    return 0;
  }
  check(bf16->size() == static_cast<size_t>(out * in));
  switch (layer->dtype) {
    case tern::DType::kBF16:
      check(layer->data.size() == static_cast<size_t>(out * in * 2));
      break;
    case tern::DType::kQ4_0:
    case tern::DType::kQ8_0:
      check(in % 32 == 0);
      check(layer->data.size() == static_cast<size_t>(out * (in / 32) * tern::dtype_block_bytes(layer->dtype)));
      break;
    default:
      check(false);
  }
  return 0;
}
