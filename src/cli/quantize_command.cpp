// `tern quantize IN.gguf OUT.gguf TYPE`: llama-quantize's job for the types
// tern reads. The work is model/gguf_quantize.h; this file parses the
// arguments and prints what was written.
#include <cstdio>
#include <map>

#include "base/logging.h"
#include "cli/commands.h"
#include "formats/gguf.h"
#include "model/gguf_quantize.h"

namespace tern::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "tern quantize: %s\n", s.to_string().c_str());
  return 1;
}

std::string type_list() {
  std::string text = "Quantization type (llama-quantize's names):";
  for (const QuantMixInfo& m : quant_mixes()) {
    text += "\n  " + std::string(m.name) + " (file type " + std::to_string(static_cast<uint32_t>(m.mix)) +
            "): " + std::string(m.about);
  }
  return text;
}

}  // namespace

void add_quantize_command(CLI::App& app, QuantizeOptions& o) {
  auto* cmd = app.add_subcommand(
      "quantize", "Requantize a GGUF file's matrices (as llama-quantize does); norms stay f32, every key is kept");
  cmd->add_option("input", o.input, "GGUF file to read (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K matrices)")
      ->required();
  cmd->add_option("output", o.output, "GGUF file to write (not the input)")->required();
  // Checked by run_quantize, so an unknown type gets the same error as from the library.
  cmd->add_option("type", o.type, type_list())->required();
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str();
}

int run_quantize(const QuantizeOptions& o) {
  configure_logging(LogFormat::kText, o.log_level);
  auto mix = parse_quant_mix(o.type);
  if (!mix.is_ok()) return fail(mix.status());
  auto done = quantize_gguf(o.input, o.output, *mix);
  if (!done.is_ok()) return fail(done.status());
  auto written = GgufFile::open(o.output);
  if (!written.is_ok()) return fail(written.status());
  std::map<std::string_view, size_t> counts;
  for (const GgufTensor& t : written->tensors()) ++counts[ggml_type_name(t.type)];
  std::string types;
  for (const auto& [name, n] : counts) {
    types += (types.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(n);
  }
  std::fprintf(stderr,
               "tern quantize: wrote %s as %s: %zu tensors (%s), %zu requantized, %zu fell back to a type of "
               "smaller blocks; tensor data %.2f MiB -> %.2f MiB\n",
               o.output.c_str(), std::string(quant_mix_info(*mix).name).c_str(), done->num_tensors, types.c_str(),
               done->num_quantized, done->num_fallbacks, done->bytes_in / 1048576.0, done->bytes_out / 1048576.0);
  return 0;
}

}  // namespace tern::cli
