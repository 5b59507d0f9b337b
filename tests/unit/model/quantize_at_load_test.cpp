// --quantization at load: a model read from bf16 requantized in memory to a
// llama-quantize mix runs the quantized kernels and stays close to itself.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace tern
