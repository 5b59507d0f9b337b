// tern: command-line entry point. Each subcommand lives in its own file and
// registers its flags on a CLI11 sub-app; every flag also reads TERN_<NAME>
// from the environment.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tern: an inference server for ERNIE 4.5 language models"};
  app.set_version_flag("--version", std::string("tern ") + TERN_VERSION);
  app.require_subcommand(1);

  tern::cli::GenerateOptions generate;
  tern::cli::add_generate_command(app, generate);

  CLI11_PARSE(app, argc, argv);
  if (app.got_subcommand("generate")) return tern::cli::run_generate(generate);
  return 0;
}
