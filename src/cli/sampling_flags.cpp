// Sampling flags into SamplingParams.
#include "cli/sampling_flags.h"

namespace tern::cli {

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f) {
  cmd.add_option("--temperature", f.temperature, "Sampling temperature; 0 is greedy (default: generation_config.json)");
  cmd.add_option("--top-p", f.top_p, "Nucleus sampling mass (default: generation_config.json)");
  cmd.add_option("--top-k", f.top_k, "Sample among the k most likely tokens; 0 disables");
  cmd.add_option("--min-p", f.min_p, "Drop tokens less likely than min-p times the most likely one");
  cmd.add_option("--repetition-penalty", f.repetition_penalty, "Penalty > 1 for tokens already seen");
  cmd.add_option("--seed", f.seed, "Random seed, for reproducible sampling");
  cmd.add_option("--stop", f.stop, "Stop when this text appears (repeatable); it is not printed");
  cmd.add_flag("--ignore-eos", f.ignore_eos, "Keep generating past end-of-sequence tokens");
}

SamplingParams sampling_params(const SamplingFlags& f, const GenerationDefaults& d, int64_t max_tokens) {
  SamplingParams p;
  bool do_sample = d.do_sample.value_or(true);
  p.temperature = f.temperature.value_or(do_sample ? d.temperature.value_or(1.0) : 0.0);
  p.top_p = f.top_p.value_or(d.top_p.value_or(1.0));
  p.top_k = f.top_k.value_or(d.top_k.value_or(0));
  p.min_p = f.min_p.value_or(0.0);
  p.repetition_penalty = f.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0));
  p.seed = f.seed;
  p.max_tokens = max_tokens;
  p.ignore_eos = f.ignore_eos;
  p.stop = f.stop;
  return p;
}

}  // namespace tern::cli
