/* A program outside tern's tree that embeds it: built against an installed libtern (find_package or
 * pkg-config), it loads the model given on its command line and generates a few greedy tokens.
 * Prints "consumer: N tokens, ABI A" and exits 0 when that worked. */
#include <stdio.h>

#include <tern/tern.h>

int main(int argc, char** argv) {
  tern_model_options options = tern_model_options_default();
  tern_model* model = NULL;
  tern_sampling_params params;
  tern_request* request = NULL;
  const tern_output* output = NULL;
  const int32_t prompt[] = {629};
  size_t tokens = 0;

  if (argc != 2) return 2;
  if (tern_abi_version() != TERN_ABI_VERSION) {
    fprintf(stderr, "consumer: header ABI %d, library ABI %d\n", TERN_ABI_VERSION, tern_abi_version());
    return 1;
  }
  options.device = "cpu";
  options.kv_cache_bytes = 16 << 20;
  if (tern_model_load(argv[1], &options, &model) != TERN_OK) {
    fprintf(stderr, "consumer: %s\n", tern_last_error());
    return 1;
  }
  params = tern_sampling_params_default(model);
  params.temperature = 0.0;
  params.max_tokens = 5;
  params.ignore_eos = 1;
  if (tern_submit(model, prompt, 1, &params, NULL, NULL, &request) != TERN_OK) {
    fprintf(stderr, "consumer: %s\n", tern_last_error());
    return 1;
  }
  do {
    if (tern_request_next(request, -1, &output) != TERN_OK) {
      fprintf(stderr, "consumer: %s\n", tern_last_error());
      return 1;
    }
    tokens += output->num_tokens;
  } while (!output->request_finished);
  tern_request_free(request);
  tern_model_free(model);
  printf("consumer: %zu tokens, ABI %d, tern %s\n", tokens, tern_abi_version(), tern_version());
  return tokens == 5 ? 0 : 1;
}
