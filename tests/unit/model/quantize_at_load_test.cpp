// --quantization at load: a model read from bf16 requantized in memory to a
// llama-quantize mix runs the quantized kernels and stays close to itself.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/fp8_quant.h"
#include "backend/cpu/kernel_set.h"
#include "model/ernie4_5/ernie4_5_model.h"

namespace tern {
namespace {

std::vector<float> last_logits(Ernie45Model& m) {
  const std::vector<int32_t> ids = {5, 17, 99, 3, 42, 7, 250, 11};
  std::vector<float> out(static_cast<size_t>(m.config().vocab_size));
  KvCache cache = m.make_cache(16);
  EXPECT_TRUE(m.forward(ids, cache, out).is_ok());
  return out;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(QuantizeAtLoad, MatricesTakeTheMixesTypesAndLogitsStayClose) {
  const std::string dir = std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny";
  auto plain = Ernie45Model::load(dir, 2);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  const std::vector<float> want = last_logits(*plain.value());
  // The tiny model's rows (64 and 192 values) do not split into 256-value
  // K-quant blocks: tern quantize writes llama-quantize's Q5_0 there, which
  // tern has no kernels for, so quantizing at load takes Q8_0 instead.
  for (auto [mix, type, bound] : {std::tuple{QuantMix::kQ8_0, DType::kQ8_0, 0.05},
                                  std::tuple{QuantMix::kQ4_0, DType::kQ4_0, 0.3},
                                  std::tuple{QuantMix::kQ4_K_M, DType::kQ8_0, 0.05}}) {
    for (const char* set : {"reference", "optimized"}) {
      auto m = Ernie45Model::load(dir, 2, *cpu::kernel_set_named(set));
      ASSERT_TRUE(m.is_ok());
      ASSERT_TRUE(m.value()->quantize(mix).is_ok());
      EXPECT_EQ(m.value()->layer_weights()[0].gate.dtype, type) << quant_mix_info(mix).name;
      EXPECT_EQ(m.value()->layer_weights()[2].down.dtype, type) << quant_mix_info(mix).name;
      EXPECT_EQ(m.value()->lm_head().data, m.value()->embedding().data) << "tied: one matrix";
      EXPECT_TRUE(cpu::is_quantized_weight_dtype(m.value()->embedding().dtype));
      const double err = relative_error(last_logits(*m.value()), want);
      EXPECT_LT(err, bound) << quant_mix_info(mix).name << " " << set;
      EXPECT_GT(err, 0.0) << "the quantized weights were used";
    }
  }
}

// --quantization fp8 on the CPU: every layer matrix holds exactly the fp32
// values of its e4m3 codes times its row scales (the GPU kernels' oracle);
// the embedding (tied LM head) stays bf16; both kernel sets agree.
TEST(QuantizeAtLoad, Fp8MatricesHoldTheDequantizedValues) {
  const std::string dir = std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny";
  auto plain = Ernie45Model::load(dir, 2);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  const std::vector<float> want = last_logits(*plain.value());
  std::vector<float> reference_logits;
  for (const char* set : {"reference", "optimized"}) {
    auto m = Ernie45Model::load(dir, 2, *cpu::kernel_set_named(set));
    ASSERT_TRUE(m.is_ok());
    ASSERT_TRUE(m.value()->quantize_fp8().is_ok());
    Ernie45Model& q = *m.value();
    EXPECT_EQ(q.embedding().dtype, plain.value()->embedding().dtype);
    EXPECT_EQ(q.lm_head().data, q.embedding().data);
    for (size_t l = 0; l < q.layer_weights().size(); ++l) {
      const auto& bw = plain.value()->layer_weights()[l];
      const auto& qw = q.layer_weights()[l];
      for (auto [b, f] : {std::pair{&bw.q, &qw.q}, {&bw.k, &qw.k}, {&bw.v, &qw.v}, {&bw.o, &qw.o},
                          {&bw.gate, &qw.gate}, {&bw.up, &qw.up}, {&bw.down, &qw.down}}) {
        ASSERT_EQ(f->dtype, DType::kF32);
        auto codes = cpu::quantize_fp8_matrix(*b, "w");
        ASSERT_TRUE(codes.is_ok());
        const auto* values = static_cast<const float*>(f->data);
        for (int64_t r = 0; r < f->rows; ++r) {
          std::vector<float> row(static_cast<size_t>(f->cols));
          cpu::dequantize_fp8_row(codes->values.data() + r * f->cols, codes->scales[static_cast<size_t>(r)], f->cols,
                                  row.data());
          for (int64_t c = 0; c < f->cols; ++c) ASSERT_EQ(values[r * f->cols + c], row[static_cast<size_t>(c)]);
        }
      }
    }
    const std::vector<float> got = last_logits(q);
    const double err = relative_error(got, want);
    EXPECT_LT(err, 0.1) << set;
    EXPECT_GT(err, 0.0) << "the FP8 values were used";
    if (reference_logits.empty()) {
      reference_logits = got;
    } else {
      EXPECT_LT(relative_error(got, reference_logits), 1e-4) << "optimized against reference kernels";
    }
  }
}

// set_fp8_activations (W8A8, the FP8 tensor-core GEMMs' reference): the
// layer matrices' inputs rounded to e4m3 move the logits a little further
// from bf16 than the FP8 weights alone, and turning it off restores W8A16.
TEST(QuantizeAtLoad, Fp8ActivationsMoveTheLogitsALittleMore) {
  const std::string dir = std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny";
  auto plain = Ernie45Model::load(dir, 2);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  const std::vector<float> want = last_logits(*plain.value());
  auto m = Ernie45Model::load(dir, 2);
  ASSERT_TRUE(m.is_ok());
  ASSERT_TRUE(m.value()->quantize_fp8().is_ok());
  const std::vector<float> w8a16 = last_logits(*m.value());
  m.value()->set_fp8_activations(true);
  const std::vector<float> w8a8 = last_logits(*m.value());
  m.value()->set_fp8_activations(false);
  EXPECT_EQ(last_logits(*m.value()), w8a16);
  EXPECT_GT(relative_error(w8a8, w8a16), 0.0) << "the activations were rounded";
  EXPECT_LT(relative_error(w8a8, want), 0.15);
}

// quantize_fp8(true) (tern_fp8_quality's FP8 LM head): the head's rows are
// their e4m3 values too, a tied model's head gets rows of its own while the
// embedding lookups keep the loaded table, and the logits move a little
// further than with the layers alone; both kernel sets agree. And
// quantize_lm_head_fp8: the same head, the layers as loaded.
TEST(QuantizeAtLoad, Fp8LmHeadHoldsTheDequantizedValues) {
  for (const char* name : {"ernie-tiny", "ernie-tiny-untied"}) {
    const std::string dir = std::string(TERN_TEST_DATA_DIR) + "/" + name;
    auto plain = Ernie45Model::load(dir, 2);
    ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
    const std::vector<float> want = last_logits(*plain.value());
    auto layers_only = Ernie45Model::load(dir, 2);
    ASSERT_TRUE(layers_only.is_ok());
    ASSERT_TRUE(layers_only.value()->quantize_fp8().is_ok());
    const std::vector<float> w8_layers = last_logits(*layers_only.value());
    std::vector<float> reference_logits;
    for (const char* set : {"reference", "optimized"}) {
      auto m = Ernie45Model::load(dir, 2, *cpu::kernel_set_named(set));
      ASSERT_TRUE(m.is_ok());
      ASSERT_TRUE(m.value()->quantize_fp8(/*lm_head=*/true).is_ok());
      const Ernie45Model& q = *m.value();
      EXPECT_EQ(q.embedding().dtype, plain.value()->embedding().dtype) << name;
      ASSERT_EQ(q.lm_head().dtype, DType::kF32) << name;
      EXPECT_NE(q.lm_head().data, q.embedding().data) << name;
      auto codes = cpu::quantize_fp8_matrix(plain.value()->lm_head(), "head");
      ASSERT_TRUE(codes.is_ok());
      const auto* values = static_cast<const float*>(q.lm_head().data);
      const int64_t rows = q.lm_head().rows, cols = q.lm_head().cols;
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        cpu::dequantize_fp8_row(codes->values.data() + r * cols, codes->scales[static_cast<size_t>(r)], cols,
                                row.data());
        for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(values[r * cols + c], row[static_cast<size_t>(c)]) << name;
      }
      const std::vector<float> got = last_logits(*m.value());
      EXPECT_GT(relative_error(got, w8_layers), 0.0) << name << ": the head's FP8 values were used";
      EXPECT_LT(relative_error(got, want), 0.1) << name << " " << set;
      if (reference_logits.empty()) {
        reference_logits = got;
      } else {
        EXPECT_LT(relative_error(got, reference_logits), 1e-4) << name << ": optimized against reference kernels";
      }
    }
    // The head alone (--quantize-lm-head beside float layers): the same head values, the layers as loaded.
    auto head_only = Ernie45Model::load(dir, 2);
    ASSERT_TRUE(head_only.is_ok());
    ASSERT_TRUE(head_only.value()->quantize_lm_head_fp8().is_ok());
    const Ernie45Model& h = *head_only.value();
    ASSERT_EQ(h.lm_head().dtype, DType::kF32) << name;
    EXPECT_NE(h.lm_head().data, h.embedding().data) << name;
    EXPECT_EQ(h.layer_weights()[0].q.dtype, plain.value()->layer_weights()[0].q.dtype) << name;
    auto codes = cpu::quantize_fp8_matrix(plain.value()->lm_head(), "head");
    ASSERT_TRUE(codes.is_ok());
    const int64_t cols = h.lm_head().cols;
    std::vector<float> row(static_cast<size_t>(cols));
    cpu::dequantize_fp8_row(codes->values.data(), codes->scales[0], cols, row.data());
    const auto* values = static_cast<const float*>(h.lm_head().data);
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(values[c], row[static_cast<size_t>(c)]) << name;
    const std::vector<float> got = last_logits(*head_only.value());
    EXPECT_GT(relative_error(got, want), 0.0) << name << ": the head's FP8 values were used";
    EXPECT_LT(relative_error(got, want), 0.1) << name;
  }
}

}  // namespace
}  // namespace tern
