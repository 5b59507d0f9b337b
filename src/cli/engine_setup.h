// Shared by every subcommand that runs the engine (generate, bench, serve):
// the vLLM-named engine flags over EngineOptions (setup/engine_setup.h, which
// builds the engine from them). Every flag also reads TERN_<NAME> from the
// environment.
#pragma once

#include <CLI/CLI.hpp>

#include "setup/engine_setup.h"

namespace tern::cli {

// model_positional: the model may also come as the first positional argument
// (`tern serve ORG/NAME`, as `vllm serve` takes it).
// The flags that say which model is loaded and how (model, threads,
// quantization, CPU kernels, device): for subcommands that run the model
// without the engine (perplexity).
void add_model_options(CLI::App& cmd, EngineOptions& o, bool model_positional = false);
// --kv-cache-dtype alone (perplexity's cache takes it too).
void add_kv_cache_dtype_option(CLI::App& cmd, EngineOptions& o);
// Those and the engine's (batching, KV cache, CUDA graphs, logprob limits).
void add_engine_options(CLI::App& cmd, EngineOptions& o, bool model_positional = false);

}  // namespace tern::cli
