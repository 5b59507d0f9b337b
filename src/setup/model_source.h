// The model argument of serve, generate, chat and bench: a local model folder
// or GGUF file, or a Hugging Face hub repo (ORG/NAME[@REVISION][:FILE]) that
// is fetched into the HF cache first. A local path that exists wins.
#pragma once

#include <string>

#include "base/status.h"

namespace tern {

struct ModelSource {
  std::string path;  // the folder or GGUF file to load
  std::string name;  // the repo id for a hub model (the served model name); empty for a local path
};

// Fetches a hub model (progress bar on a terminal, else log lines). Errors
// say when the argument is neither an existing path nor a repo name.
Result<ModelSource> resolve_model_source(const std::string& model);

}  // namespace tern
