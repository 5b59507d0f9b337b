// A model argument into a local path, downloading from the hub when needed.
#include "setup/model_source.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "hub/download_progress.h"
#include "hub/hub_client.h"

namespace tern {

Result<ModelSource> resolve_model_source(const std::string& model) {
  std::error_code ec;
  if (model.empty() || std::filesystem::exists(model, ec)) return ModelSource{model, ""};
  auto ref = hub::parse_repo_ref(model);
  if (!ref.is_ok()) {
    return not_found("no model at '" + model + "': no such file or folder, and not a Hugging Face repo name "
                     "(ORG/NAME[@REVISION][:FILE])");
  }
  hub::HubSettings settings = hub::hub_settings_from(hub::process_environment());
  hub::FetchOptions options;
  options.progress_bar = hub::stderr_is_terminal();
  auto snapshot = hub::fetch_snapshot(*ref, options, settings);
  if (!snapshot.is_ok()) {
    return Status(snapshot.status().code(), snapshot.status().message() + " (no local file or folder '" + model +
                                                "' either)");
  }
  spdlog::info("hub: {} at commit {} in {}", ref->repo_id, snapshot->commit, snapshot->folder);
  return ModelSource{snapshot->model_path, ref->repo_id};
}

}  // namespace tern
