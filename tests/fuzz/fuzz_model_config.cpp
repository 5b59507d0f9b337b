// libFuzzer target for config.json / generation_config.json parsing: any
// text must give an error or a config that keeps the promises the forward
// pass and the sampler rely on (dims in range, heads divisible, ids below
// vocab_size, sampling values in their ranges), and an int4
// quantization_config the layer loaders can trust (a group width of at
// least one channel). A violation traps.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "formats/int4_config.h"
#include "model/model_config.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

constexpr int64_t kMaxDim = int64_t{1} << 24;  // model_config.cpp's limit

bool dim_ok(int64_t d) { return d >= 1 && d <= kMaxDim; }

void check_model_config(const tern::ModelConfig& c) {
  // A supported class in `architectures` wins over model_type, which may then say anything.
  check(c.architecture == "Ernie4_5ForCausalLM" || c.architecture == "Ernie4_5_ForCausalLM");
  check(!c.model_type.empty());
  for (int64_t d : {c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads,
                    c.head_dim, c.max_position_embeddings}) {
    check(dim_ok(d));
  }
  check(c.num_heads % c.num_kv_heads == 0);
  check(c.head_dim % 2 == 0);
  check(c.q_dim() > 0 && c.kv_dim() > 0 && c.kv_dim() <= c.q_dim());
  check(c.rms_norm_eps > 0 && c.rope_theta > 0);
  check(!c.use_bias);
  check(c.torch_dtype == "bfloat16" || c.torch_dtype == "float16" || c.torch_dtype == "float32");
  check(c.bos_token_id >= 0 && c.bos_token_id < c.vocab_size);
  check(c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size);
  for (int32_t id : c.eos_token_ids) check(id >= 0 && id < c.vocab_size);
}

void check_generation_defaults(const tern::GenerationDefaults& g) {
  if (g.temperature) check(*g.temperature >= 0 && *g.temperature <= 1e6);
  if (g.top_p) check(*g.top_p > 0 && *g.top_p <= 1);
  if (g.top_k) check(*g.top_k >= 0);
  if (g.repetition_penalty) check(*g.repetition_penalty > 0 && *g.repetition_penalty <= 1e6);
  for (int32_t id : g.eos_token_ids) check(id >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto config = tern::parse_model_config(text, "config.json");
  if (config.is_ok()) {
    check_model_config(*config);
  } else {
    check(!config.status().message().empty());
  }

  auto int4 = tern::parse_int4_config(text, "config.json");
  if (int4.is_ok()) {
    if (int4->has_value()) {
      const tern::Int4Config& c = **int4;
      check(c.group_size >= 0 && c.group_width(4096) >= 1);
      check(!tern::describe_int4_config(c).empty());
    }
  } else {
    check(!int4.status().message().empty());
  }

  auto generation = tern::parse_generation_config(text, "generation_config.json");
  if (generation.is_ok()) {
    check_generation_defaults(*generation);
  } else {
    check(!generation.status().message().empty());
  }
  return 0;
}
