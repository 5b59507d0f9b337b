// `tern convert`: a Hugging Face ERNIE 4.5 folder into a GGUF file as
// llama.cpp's convert_hf_to_gguf.py writes it, so llama.cpp and tern (tern
// serve --model X.gguf) both load it. The model half is
// model/ernie4_5/gguf_convert.h, the tokenizer half tokenizer/gguf_vocab.h.
#include <cstdio>

#include "base/logging.h"
#include "base/mapped_file.h"
#include "cli/commands.h"
#include "formats/gguf_types.h"
#include "model/ernie4_5/gguf_convert.h"
#include "model/model_config.h"
#include "tokenizer/gguf_vocab.h"

namespace tern::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "tern convert: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

void add_convert_command(CLI::App& app, ConvertOptions& o) {
  auto* cmd = app.add_subcommand("convert", "Convert a Hugging Face model folder into a GGUF file (as llama.cpp does)");
  cmd->add_option("--model,-m", o.model, "Model folder (Hugging Face layout)")->required();
  cmd->add_option("--outfile,-o", o.outfile, "GGUF file to write")->required();
  cmd->add_option("--outtype", o.outtype,
                  "Weight type: f32, f16, bf16, q8_0 (every matrix, token_embd and output too), or auto (the "
                  "checkpoint's 16-bit type, else f16); norms stay f32. Other quantized types: tern quantize")
      ->capture_default_str();
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str();
}

int run_convert(const ConvertOptions& o) {
  configure_logging(LogFormat::kText, o.log_level);
  auto outtype = ernie45::parse_out_type(o.outtype);
  if (!outtype.is_ok()) return fail(outtype.status());
  // The vocabulary is padded to the model's vocab_size, as the converter does.
  const std::string config_path = o.model + "/config.json";
  auto text = read_text_file(config_path);
  if (!text.is_ok()) return fail(text.status());
  auto config = parse_model_config(*text, config_path);
  if (!config.is_ok()) return fail(config.status());
  auto vocab = gguf_vocab_from_hf(o.model, config->vocab_size);
  if (!vocab.is_ok()) return fail(vocab.status());
  auto done = ernie45::convert_to_gguf(o.model, *outtype, *vocab, o.outfile);
  if (!done.is_ok()) return fail(done.status());
  std::fprintf(stderr, "tern convert: wrote %s: %zu tensors, %s parameters, weights %s, %llu bytes\n",
               o.outfile.c_str(), done->num_tensors, done->size_label.c_str(),
               std::string(ggml_type_name(done->weight_type)).c_str(), static_cast<unsigned long long>(done->bytes));
  return 0;
}

}  // namespace tern::cli
