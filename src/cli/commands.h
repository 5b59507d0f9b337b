// The `tern` subcommands: their options and entry points.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace tern::cli {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  bool chat = false;
  int64_t max_tokens = 128;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool json = false;
  int threads = 0;
  std::string device = "cpu";
  std::string log_level = "warn";
};

void add_generate_command(CLI::App& app, GenerateOptions& options);
int run_generate(const GenerateOptions& options);

}  // namespace tern::cli
