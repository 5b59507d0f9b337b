// One int4 linear layer of a checkpoint, found by the layer's prefix
// ("model.layers.0.mlp.up_proj"), checked and dequantized to bf16. The
// layer's weight is W [out, in] (PyTorch's layout); groups = ceil(in /
// group width) input channels share a scale and a zero point, and
// W[o][i] = (q - z) * s with q and z unsigned 4-bit. Layouts, by scheme:
//
//   AWQ GEMM   qweight [in, out/8] I32: nibble n of word [i][j] is output
//              8j + {0,2,4,6,1,3,5,7}[n]; qzeros [groups, out/8] I32, same
//              order; scales [groups, out]; groups = in / width exactly.
//   GPTQ       qweight [in/8, out] I32: nibble n of word [k][o] is input
//              8k + n; qzeros [groups, out/8] I32: nibble n of word [g][j]
//              is output 8j + n, holding z - 1 in "gptq" (v1) checkpoints;
//              scales [groups, out]; g_idx [in] I32, the group of each input
//              (required with act order, else absent or i / width).
//   compressed-tensors pack-quantized
//              weight_packed [out, ceil(in/8)] I32: nibble n of word [o][k]
//              is input 8k + n, stored as the signed value + 8;
//              weight_scale [out, groups]; weight_shape [2] = {out, in};
//              asymmetric: weight_zero_point [ceil(out/8), groups] I32,
//              nibble n of word [j][g] is output 8j + n, signed + 8;
//              actorder "group": weight_g_idx [in] I32, as GPTQ's g_idx.
//
// Scales may be F16, BF16 or F32 (AWQ and GPTQ write F16). Symmetric
// schemes have z = 8. Every tensor's presence, dtype and shape is checked
// before anything is read, and errors name the tensor and what was wrong.
//
// Most layers are ggml blocks exactly: with groups of consecutive input
// channels a multiple of 32 wide and scales that fp16 holds, a symmetric
// layer is Q4_0 (d = s, the nibble q, z = 8) and any other Q8_0 (d = s, the
// int8 q - z). load_int4_linear keeps those as blocks, the rest as bf16.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "formats/checkpoint.h"
#include "formats/dtype.h"
#include "formats/int4_config.h"

namespace tern {

// The tensor whose presence makes `prefix` an int4 layer of `scheme`:
// prefix + ".qweight" (AWQ, GPTQ) or ".weight_packed" (compressed-tensors).
std::string int4_marker_tensor(Int4Scheme scheme, std::string_view prefix);

// The layer `prefix` of `ckpt`, W [out_features, in_features], dequantized
// to bf16 (row-major, round to nearest even). Errors: kNotFound for a
// missing tensor; kInvalidArgument for a wrong shape or dtype, a layer
// width the packing cannot hold, or values out of range (g_idx, GPTQ sym
// zero points other than 8, non-finite scales). `used` (if given) receives
// the names of the tensors read.
Result<std::vector<uint16_t>> dequantize_int4_linear(const Checkpoint& ckpt, const Int4Config& config,
                                                     std::string_view prefix, int64_t out_features,
                                                     int64_t in_features, std::vector<std::string>* used = nullptr);

// A layer as a CPU model keeps it: out_features rows of in_features values
// in `dtype`, each row whole blocks (ggml's byte layout) or bf16 values.
struct Int4Layer {
  DType dtype = DType::kBF16;  // kQ4_0, kQ8_0 (values exact) or kBF16 (rounded to bf16)
  std::vector<uint8_t> data;
};

// As dequantize_int4_linear, checked the same way, but kept as Q4_0 or Q8_0
// blocks where they hold the values exactly (see above), else bf16.
Result<Int4Layer> load_int4_linear(const Checkpoint& ckpt, const Int4Config& config, std::string_view prefix,
                                   int64_t out_features, int64_t in_features,
                                   std::vector<std::string>* used = nullptr);

}  // namespace tern
