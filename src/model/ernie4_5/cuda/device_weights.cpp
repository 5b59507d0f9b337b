// DeviceModel's weights on the GPU: each layer matrix in the form the
// options and its host dtype give (bf16, FP8 e4m3 with row scales, planar
// int4), the embedding, the LM head (bf16, and its FP8 form with
// --quantize-lm-head, whose use decide_fp8_head settles once the workspace
// is planned), the norms and the rotary frequencies.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/fp8_quant.h"
#include "backend/cpu/int4_planar.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "base/bf16.h"
#include "formats/dtype.h"
#include "model/ernie4_5/cuda/device_model_impl.h"

namespace tern::cuda {
namespace {

// Appends the rows of `w` as bf16 to `out`.
void append_bf16(const cpu::WeightMatrix& w, std::vector<bf16>& out) {
  const size_t n = static_cast<size_t>(w.rows * w.cols);
  const size_t at = out.size();
  out.resize(at + n);
  if (w.dtype == DType::kBF16) {
    std::memcpy(out.data() + at, w.data, n * sizeof(bf16));
    return;
  }
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    cpu::weight_row_to_f32(w, r, row.data());
    bf16* dst = out.data() + at + static_cast<size_t>(r * w.cols);
    for (int64_t c = 0; c < w.cols; ++c) dst[c] = f32_to_bf16(row[static_cast<size_t>(c)]);
  }
}

Status upload_matrices(DeviceModel::Impl& m, std::initializer_list<const cpu::WeightMatrix*> parts, DeviceBuffer& out,
                       const char* what, std::vector<bf16>& staging) {
  staging.clear();
  for (const cpu::WeightMatrix* w : parts) append_bf16(*w, staging);
  TERN_RETURN_IF_ERROR(out.allocate(staging.size() * sizeof(bf16), what));
  TERN_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(out.as<void>(), staging.data(), staging.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  m.use.weight_bytes += static_cast<int64_t>(out.bytes());
  return Status::ok();
}

// The parts' rows as e4m3 codes into `out` and their scales into `scales`
// (each part quantized on its own: the scales are per row, so a fused
// matrix's rows get what its parts' rows would).
Status upload_fp8(DeviceModel::Impl& m, std::initializer_list<const cpu::WeightMatrix*> parts, DeviceBuffer& out,
                  DeviceBuffer& scales, const char* what) {
  std::vector<uint8_t> codes;
  std::vector<float> row_scales;
  for (const cpu::WeightMatrix* w : parts) {
    TERN_ASSIGN_OR_RETURN(const cpu::Fp8Matrix q, cpu::quantize_fp8_matrix(*w, what));
    codes.insert(codes.end(), q.values.begin(), q.values.end());
    row_scales.insert(row_scales.end(), q.scales.begin(), q.scales.end());
  }
  TERN_RETURN_IF_ERROR(out.allocate(codes.size(), what));
  TERN_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.as<void>(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
  TERN_RETURN_IF_ERROR(scales.allocate(row_scales.size() * sizeof(float), what));
  TERN_CUDA_RETURN_IF_ERROR(cudaMemcpy(scales.as<void>(), row_scales.data(), row_scales.size() * sizeof(float),
                                       cudaMemcpyHostToDevice));
  m.use.weight_bytes += static_cast<int64_t>(out.bytes() + scales.bytes());
  return Status::ok();
}

template <typename T>
Status upload_array(DeviceModel::Impl& m, const std::vector<T>& v, DeviceBuffer& out, const char* what) {
  TERN_RETURN_IF_ERROR(out.allocate(v.size() * sizeof(T), what));
  TERN_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.as<void>(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  m.use.weight_bytes += static_cast<int64_t>(out.bytes());
  return Status::ok();
}

// The parts' rows in the int4 form (cpu::to_int4_matrix), appended: a
// block never crosses a row, so a fused matrix's codes, scales and zeros
// are its parts' one after the other.
Status upload_int4(DeviceModel::Impl& m, std::initializer_list<const cpu::WeightMatrix*> parts,
                   DeviceModel::Impl::Matrix& out, const char* what) {
  std::vector<uint8_t> codes, zeros;
  std::vector<uint16_t> scales;
  for (const cpu::WeightMatrix* w : parts) {
    TERN_ASSIGN_OR_RETURN(const cpu::Int4Matrix q, cpu::to_int4_matrix(*w, what));
    codes.insert(codes.end(), q.nibbles.begin(), q.nibbles.end());
    scales.insert(scales.end(), q.scales.begin(), q.scales.end());
    zeros.insert(zeros.end(), q.zeros.begin(), q.zeros.end());
  }
  TERN_RETURN_IF_ERROR(upload_array(m, codes, out.w, what));
  TERN_RETURN_IF_ERROR(upload_array(m, scales, out.scale, what));
  TERN_RETURN_IF_ERROR(upload_array(m, zeros, out.zero, what));
  out.form = DeviceModel::Impl::Form::kInt4;
  ++m.int4_matrices;
  return Status::ok();
}

// A layer's matrix (its parts' rows appended) in the form the options and
// the parts' dtypes give: FP8 with fp8_weights; int4 when every part's
// blocks hold int4 values exactly (Q4_0, an int4 checkpoint's Q8_0); else
// bf16 (recording why a block-quantized part was not taken as int4).
Status upload_layer_matrix(DeviceModel::Impl& m, std::initializer_list<const cpu::WeightMatrix*> parts,
                           DeviceModel::Impl::Matrix& out, const char* what, std::vector<bf16>& staging) {
  if (m.fp8) {
    out.form = DeviceModel::Impl::Form::kFp8;
    return upload_fp8(m, parts, out.w, out.scale, what);
  }
  bool quantized = true, int4 = true, any_int4 = false;
  const cpu::WeightMatrix* float_part = nullptr;
  for (const cpu::WeightMatrix* w : parts) {
    quantized = quantized && cpu::is_quantized_weight_dtype(w->dtype);
    const bool part_int4 = cpu::int4_representable(*w);
    int4 = int4 && part_int4;
    any_int4 = any_int4 || part_int4;
    if (!cpu::is_quantized_weight_dtype(w->dtype) && float_part == nullptr) float_part = w;
  }
  if (int4) return upload_int4(m, parts, out, what);
  if (m.int4_declined.empty()) {
    if (quantized) {
      m.int4_declined = std::string(what) + " is held in blocks (" +
                        std::string(dtype_name(parts.begin()[0]->dtype)) +
                        ") whose values 4-bit codes with a zero per 32 cannot hold exactly: uploaded as bf16";
    } else if (any_int4 && float_part != nullptr) {
      // One matrix, one form: a fused matrix whose parts mix int4 blocks with float weights is bf16 whole.
      m.int4_declined = std::string(what) + " fuses int4-representable parts with a " +
                        std::string(dtype_name(float_part->dtype)) + " part: uploaded as bf16";
    }
  }
  return upload_matrices(m, parts, out.w, what, staging);
}

Status upload_floats(DeviceModel::Impl& m, const std::vector<float>& f, DeviceBuffer& out, const char* what) {
  TERN_RETURN_IF_ERROR(out.allocate(f.size() * sizeof(float), what));
  TERN_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.as<void>(), f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
  m.use.weight_bytes += static_cast<int64_t>(out.bytes());
  return Status::ok();
}

Status upload_vector(DeviceModel::Impl& m, const cpu::WeightVector& v, DeviceBuffer& out, const char* what) {
  return upload_floats(m, cpu::weight_vector_to_f32(v), out, what);
}

}  // namespace

Status DeviceModel::Impl::decide_fp8_head() {
  const int64_t H = config.hidden_size, V = config.vocab_size;
  // The GEMMs' share: rows up to the option's limit, on the FP8 tensor cores where they run the head's shape.
  // Beside bf16 or int4 layers the head's GEMMs are the only FP8 ones: fp8_gemm is made for them alone.
  const int64_t limit = options.fp8_lm_head_max_rows;
  std::string gemm_off;  // why larger steps' head GEMMs stay bf16, if they do
  if (limit <= gemv_tokens) {
    gemm_off = "FP8 head GEMMs limited to " + std::to_string(limit) + " rows";
  } else if (fp8 ? !fp8_tensor_cores : fp8_gemm == nullptr) {
    gemm_off = "no FP8 tensor-core GEMM here";
  } else if (V % 4 != 0) {
    gemm_off = "the vocabulary (" + std::to_string(V) + ") is not a multiple of 4";
  } else {
    const int64_t rows = std::min(head_capacity, gemm_rows(limit));
    if (fp8 && rows > fp8_tc_rows) {
      gemm_off = "its " + std::to_string(rows) + " rows exceed the FP8 tensor cores' " + std::to_string(fp8_tc_rows);
    } else if (!fp8_gemm->tensor_cores(std::min<int64_t>(64, rows), H, V, GemmOut::kF32)) {
      gemm_off = "no FP8 tensor-core GEMM for the LM head's shape here (cuBLASLt)";
    } else {
      fp8_head_gemm_rows = rows;
    }
  }
  if (!fp8 && fp8_head_gemm_rows > 0) {
    // The logit rows' e4m3 codes and scales, which the FP8 layers' scratch holds where there are FP8 layers.
    const auto R = static_cast<size_t>(fp8_head_gemm_rows);
    TERN_RETURN_IF_ERROR(fp8_x_codes.allocate(R * static_cast<size_t>(H), "FP8 LM-head input codes"));
    TERN_RETURN_IF_ERROR(fp8_x_scales.allocate(R * sizeof(float), "FP8 LM-head input scales"));
    use.workspace_bytes += static_cast<int64_t>(fp8_x_codes.bytes() + fp8_x_scales.bytes());
  }
  if (gemv_tokens == 0 && fp8_head_gemm_rows == 0) {
    fp8_head_note = "--quantize-lm-head not taken: no step runs the LM head on the GEMV (" + gemm_off +
                    " for the GEMMs); it stays bf16";
    use.weight_bytes -= static_cast<int64_t>(head8.w.bytes() + head8.scale.bytes());
    head8.w.reset();
    head8.scale.reset();
    return Status::ok();
  }
  if (fp8_head_gemm_rows < head_capacity) {
    fp8_head_note = "the LM head's GEMMs of " +
                    (fp8_head_gemm_rows > 0 ? "more than " + std::to_string(fp8_head_gemm_rows) + " rows"
                                            : std::string("any size")) +
                    " run on its bf16 form" + (gemm_off.empty() ? "" : " (" + gemm_off + ")");
  } else if (lm_head_own.bytes() > 0) {  // an untied head whose every step is FP8: its bf16 copy serves nothing
    use.weight_bytes -= static_cast<int64_t>(lm_head_own.bytes());
    lm_head_own.reset();
    lm_head = nullptr;
  }
  return Status::ok();
}

Status DeviceModel::Impl::upload_weights(const HostWeights& w) {
  const ModelConfig& c = config;
  std::vector<bf16> staging;
  TERN_RETURN_IF_ERROR(upload_matrices(*this, {&w.embedding}, embed, "the embedding", staging));
  if (w.lm_head.data == w.embedding.data) {
    lm_head = embed.as<bf16>();
  } else {
    TERN_RETURN_IF_ERROR(upload_matrices(*this, {&w.lm_head}, lm_head_own, "the LM head", staging));
    lm_head = lm_head_own.as<bf16>();
  }
  if (options.fp8_lm_head) {
    TERN_RETURN_IF_ERROR(upload_fp8(*this, {&w.lm_head}, head8.w, head8.scale, "the LM head"));
    head8.form = Form::kFp8;
  }
  TERN_RETURN_IF_ERROR(upload_vector(*this, w.final_norm, final_norm, "the final norm"));
  TERN_RETURN_IF_ERROR(upload_floats(*this, w.rope_inv_freq, inv_freq, "the rotary frequencies"));
  layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const HostLayerWeights& hw = w.layers[static_cast<size_t>(l)];
    Layer& d = layers[static_cast<size_t>(l)];
    TERN_RETURN_IF_ERROR(upload_vector(*this, hw.input_norm, d.input_norm, "an input norm"));
    TERN_RETURN_IF_ERROR(upload_vector(*this, hw.post_attention_norm, d.post_norm, "a post-attention norm"));
    TERN_RETURN_IF_ERROR(upload_layer_matrix(*this, {&hw.q, &hw.k, &hw.v}, d.qkv, "a fused q|k|v projection", staging));
    TERN_RETURN_IF_ERROR(upload_layer_matrix(*this, {&hw.o}, d.o, "an output projection", staging));
    TERN_RETURN_IF_ERROR(
        upload_layer_matrix(*this, {&hw.gate, &hw.up}, d.gate_up, "a fused gate|up projection", staging));
    TERN_RETURN_IF_ERROR(upload_layer_matrix(*this, {&hw.down}, d.down, "a down projection", staging));
  }
  return Status::ok();
}

}  // namespace tern::cuda
