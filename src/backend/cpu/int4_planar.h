// The GPU's int4 weight form (W4A16): a matrix as planar arrays of 4-bit
// codes, fp16 block scales and 8-bit block zeros, made on the host from the
// blocks the CPU keeps an int4 matrix in (Q4_0 for symmetric checkpoints and
// --quantization q4_0, Q8_0 holding q4 - zero for asymmetric ones), with
// exactly the values weight_row_to_f32 gives. Planar so a GPU lane's 16-byte
// load is 32 codes and a block's scale and zero are one load each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/status.h"

namespace tern::cpu {

constexpr int kInt4Block = 32;  // elements per scale / zero (Q4_0's and Q8_0's block)

// Element (r, c) = (q - z) * d in fp32, with q the nibble of c (byte
// r * cols / 2 + c / 2, the low nibble for even c), and d (fp16 bits) and
// z those of block (r, c / kInt4Block), stored row-major in `scales` and
// `zeros`. (q - z) is an integer in [-255, 15] and d an fp16, so the
// product is exact in fp32 as it is on the CPU.
struct Int4Matrix {
  int64_t rows = 0, cols = 0;  // cols a multiple of kInt4Block
  std::vector<uint8_t> nibbles;
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;
  float value(int64_t r, int64_t c) const;
};

// The int4 form of `w`: from Q4_0 (z = 8), or from Q8_0 when every block's
// codes fit [-z, 15 - z] for one z >= 0 (z = max(0, -min), so a block may
// span at most 15 steps): an int4 checkpoint's q4 - zero always does.
// Errors (Unsupported, naming `what` and the first block that does not
// fit): any other dtype, a Q8_0 block that does not fit.
Result<Int4Matrix> to_int4_matrix(const WeightMatrix& w, const std::string& what);
// Whether to_int4_matrix takes `w` (the dtype and, for Q8_0, every block's
// span), without building it.
bool int4_representable(const WeightMatrix& w);

}  // namespace tern::cpu
