// --quantization as load_engine applies it to a loaded model: fp8 on the
// CPU (the FP8 values in fp32) and on CUDA (the runner told to quantize at
// upload, the model untouched), and the forms refused with an error that
// names the flag rather than ignored.
#include <gtest/gtest.h>

#include <string>

#include "model/ernie4_5/ernie4_5_model.h"
#include "setup/engine_setup.h"

namespace tern {
namespace {

const std::string kTiny = std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny";

std::unique_ptr<Ernie45Model> load() {
  auto m = Ernie45Model::load(kTiny, 2);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

TEST(ApplyQuantization, Fp8OnTheCpuHoldsTheFp8ValuesAndOnCudaLeavesItToTheUpload) {
  auto cpu = load();
  ASSERT_NE(cpu, nullptr);
  RunnerOptions run;
  ASSERT_TRUE(apply_quantization(*cpu, kTiny, "fp8", "cpu", run).is_ok());
  EXPECT_FALSE(run.fp8_weights);
  EXPECT_EQ(cpu->layer_weights()[0].q.dtype, DType::kF32);
  EXPECT_EQ(cpu->layer_weights()[2].down.dtype, DType::kF32);
  EXPECT_EQ(cpu->embedding().dtype, DType::kBF16);

  auto gpu = load();
  ASSERT_NE(gpu, nullptr);
  RunnerOptions gpu_run;
  ASSERT_TRUE(apply_quantization(*gpu, kTiny, "fp8", "cuda", gpu_run).is_ok());
  EXPECT_TRUE(gpu_run.fp8_weights);
  EXPECT_EQ(gpu->layer_weights()[0].q.dtype, DType::kBF16) << "CUDA quantizes as it uploads";
}

// --quantize-lm-head (run.fp8_lm_head): on the CPU the head gets FP8
// values of its own (the tied embedding stays the loaded table), beside the
// fp8 layers or the layers as loaded; on CUDA the model is untouched and the
// option goes on to the upload. With a llama-quantize mix, which gives the
// head a type of its own, it is refused, naming both flags.
TEST(ApplyQuantization, Fp8LmHeadBesideFp8OrFloatLayers) {
  for (const char* quantization : {"fp8", ""}) {
    auto cpu = load();
    ASSERT_NE(cpu, nullptr);
    RunnerOptions run;
    run.fp8_lm_head = true;
    ASSERT_TRUE(apply_quantization(*cpu, kTiny, quantization, "cpu", run).is_ok()) << quantization;
    EXPECT_EQ(cpu->lm_head().dtype, DType::kF32);
    EXPECT_NE(cpu->lm_head().data, cpu->embedding().data);
    EXPECT_EQ(cpu->embedding().dtype, DType::kBF16);
    EXPECT_EQ(cpu->layer_weights()[0].q.dtype, std::string(quantization) == "fp8" ? DType::kF32 : DType::kBF16);

    auto gpu = load();
    ASSERT_NE(gpu, nullptr);
    RunnerOptions gpu_run;
    gpu_run.fp8_lm_head = true;
    ASSERT_TRUE(apply_quantization(*gpu, kTiny, quantization, "cuda", gpu_run).is_ok());
    EXPECT_EQ(gpu_run.fp8_weights, std::string(quantization) == "fp8");
    EXPECT_EQ(gpu->lm_head().data, gpu->embedding().data) << "CUDA quantizes the head as it uploads";
  }
  for (const char* mix : {"q4_0", "q8_0"}) {
    auto m = load();
    ASSERT_NE(m, nullptr);
    RunnerOptions r;
    r.fp8_lm_head = true;
    const Status s = apply_quantization(*m, kTiny, mix, "cpu", r);
    ASSERT_FALSE(s.is_ok()) << mix;
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.message().find("--quantize-lm-head"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string("--quantization ") + mix), std::string::npos) << s.message();
    EXPECT_EQ(m->lm_head().data, m->embedding().data) << "nothing quantized";
  }
}

// q4_0 on CUDA quantizes on the host as on the CPU; the upload then takes
// the Q4_0 layer matrices as int4 weights.
TEST(ApplyQuantization, Q4_0OnCudaQuantizesOnTheHost) {
  auto m = load();
  ASSERT_NE(m, nullptr);
  RunnerOptions run;
  ASSERT_TRUE(apply_quantization(*m, kTiny, "q4_0", "cuda", run).is_ok());
  EXPECT_FALSE(run.fp8_weights);
  for (const Ernie45Model::LayerWeights& l : m->layer_weights()) {
    for (const cpu::WeightMatrix* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      EXPECT_EQ(w->dtype, DType::kQ4_0);
    }
  }
}

TEST(ApplyQuantization, RefusedFormsNameTheFlag) {
  auto m = load();
  ASSERT_NE(m, nullptr);
  RunnerOptions run;
  // A llama-quantize mix other than q4_0 is a CPU requantization: refused for CUDA, not ignored.
  Status mix_on_gpu = apply_quantization(*m, kTiny, "q8_0", "cuda", run);
  ASSERT_FALSE(mix_on_gpu.is_ok());
  EXPECT_NE(mix_on_gpu.message().find("--quantization q8_0"), std::string::npos) << mix_on_gpu.message();
  // An int4 scheme on a float model.
  Status awq = apply_quantization(*m, kTiny, "awq", "cpu", run);
  ASSERT_FALSE(awq.is_ok());
  EXPECT_NE(awq.message().find("--quantization awq"), std::string::npos) << awq.message();
  // fp8 of matrices that are quantized already (as a Q8_0 GGUF's are).
  ASSERT_TRUE(m->quantize(QuantMix::kQ8_0).is_ok());
  for (const char* device : {"cpu", "cuda"}) {
    RunnerOptions r;
    Status again = apply_quantization(*m, kTiny, "fp8", device, r);
    if (std::string(device) == "cpu") {
      ASSERT_FALSE(again.is_ok());
      EXPECT_NE(again.message().find("quantized already"), std::string::npos) << again.message();
    } else {
      // CUDA finds out at upload (cuda_host_weights -> quantize_fp8_matrix), with the same message.
      EXPECT_TRUE(again.is_ok());
      EXPECT_TRUE(r.fp8_weights);
    }
  }
  RunnerOptions none;
  EXPECT_TRUE(apply_quantization(*m, kTiny, "", "cuda", none).is_ok());
  EXPECT_FALSE(none.fp8_weights);
}

}  // namespace
}  // namespace tern
