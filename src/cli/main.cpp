// tern: command-line entry point. Each subcommand lives in its own file and
// registers its flags on a CLI11 sub-app; flags also read TERN_<NAME> from
// the environment.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/serve_command.h"

int main(int argc, char** argv) {
  CLI::App app{"tern: an inference server for ERNIE 4.5 language models"};
  app.set_version_flag("--version", std::string("tern ") + TERN_VERSION);
  app.require_subcommand(1);

  tern::cli::GenerateOptions generate;
  tern::cli::add_generate_command(app, generate);
  tern::cli::ServeOptions serve;
  tern::cli::add_serve_command(app, serve);
  tern::cli::BenchOptions bench;
  tern::cli::add_bench_command(app, bench);
  tern::cli::ConvertOptions convert;
  tern::cli::add_convert_command(app, convert);
  tern::cli::QuantizeOptions quantize;
  tern::cli::add_quantize_command(app, quantize);

  tern::cli::PerplexityOptions perplexity;
  tern::cli::add_perplexity_command(app, perplexity);

  tern::cli::ChatOptions chat;
  tern::cli::add_chat_command(app, chat);
  tern::cli::DownloadOptions download;
  tern::cli::add_download_command(app, download);

  CLI11_PARSE(app, argc, argv);
  if (app.got_subcommand("generate")) return tern::cli::run_generate(generate);
  if (app.got_subcommand("bench")) return tern::cli::run_bench(bench);
  if (app.got_subcommand("serve")) return tern::cli::run_serve(serve);
  if (app.got_subcommand("convert")) return tern::cli::run_convert(convert);
  if (app.got_subcommand("quantize")) return tern::cli::run_quantize(quantize);
  if (app.got_subcommand("perplexity")) return tern::cli::run_perplexity(perplexity);
  if (app.got_subcommand("chat")) return tern::cli::run_chat(chat);
  if (app.got_subcommand("download")) return tern::cli::run_download(download);
  return 0;
}
