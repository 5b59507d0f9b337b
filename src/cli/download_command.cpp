// `tern download ORG/NAME[@REVISION][:FILE] [--include PATTERN]...`: fetches
// a model's files (or those matching the patterns) from the Hugging Face hub
// into the HF cache, as `huggingface-cli download` does, checking the sha256
// of LFS blobs already cached, and prints the snapshot folder (or the chosen
// GGUF file) on stdout.
#include <cstdio>

#include "base/logging.h"
#include "cli/commands.h"
#include "hub/download_progress.h"
#include "hub/hub_client.h"

namespace tern::cli {

void add_download_command(CLI::App& app, DownloadOptions& o) {
  auto* cmd = app.add_subcommand("download",
                                 "Download a model from the Hugging Face hub into the HF cache (HF_HOME, HF_HUB_CACHE, "
                                 "HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE) and print its folder");
  cmd->add_option("repo", o.repo,
                  "ORG/NAME[@REVISION][:FILE]; FILE: one GGUF file of the repo, by name (model-Q4_K_M.gguf) or "
                  "quantization tag (Q4_K_M)")
      ->required();
  cmd->add_option("--include", o.include,
                  "Download only the files matching this shell-style pattern (repeatable), e.g. '*.json'; "
                  "default: the files the model needs");
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str();
}

int run_download(const DownloadOptions& o) {
  configure_logging(LogFormat::kText, o.log_level);
  auto ref = hub::parse_repo_ref(o.repo);
  if (!ref.is_ok()) {
    std::fprintf(stderr, "tern download: %s\n", ref.status().to_string().c_str());
    return 1;
  }
  hub::FetchOptions options;
  options.include = o.include;
  options.verify_cached = true;
  options.progress_bar = hub::stderr_is_terminal();
  auto snapshot = hub::fetch_snapshot(*ref, options, hub::hub_settings_from(hub::process_environment()));
  if (!snapshot.is_ok()) {
    std::fprintf(stderr, "tern download: %s\n", snapshot.status().to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "tern download: %s at commit %s: %zu files, %.1f MB downloaded\n", ref->repo_id.c_str(),
               snapshot->commit.c_str(), snapshot->files.size(), static_cast<double>(snapshot->downloaded_bytes) / 1e6);
  std::printf("%s\n", snapshot->model_path.c_str());
  return 0;
}

}  // namespace tern::cli
