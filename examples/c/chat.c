/* chat.c: load a model, ask it one question through its chat template, and stream the answer to stdout.
 *
 *   chat MODEL [QUESTION] [MAX_TOKENS] [DEVICE]
 *
 * DEVICE is auto (the default: CUDA when this build has it and a GPU is present), cuda or cpu.
 * Exits 0 when the answer ended normally (a stop or the length limit), 1 with the library's message otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern/tern.h>

static int fail(const char* what, tern_status status) {
  fprintf(stderr, "chat: %s: %s (%s)\n", what, tern_last_error(), tern_status_name(status));
  return 1;
}

int main(int argc, char** argv) {
  const char* question = argc > 2 ? argv[2] : "Hello! Who are you?";
  tern_model_options options = tern_model_options_default();
  tern_model* model = NULL;
  tern_chat_message messages[1];
  char* prompt = NULL;
  int32_t* ids = NULL;
  size_t num_ids = 0;
  tern_sampling_params params;
  tern_request* request = NULL;
  const tern_output* output = NULL;
  tern_status status;
  tern_finish_reason finish = TERN_FINISH_NONE;

  if (argc < 2) {
    fprintf(stderr, "usage: chat MODEL [QUESTION] [MAX_TOKENS] [DEVICE]\n");
    return 2;
  }
  options.device = argc > 4 ? argv[4] : "auto";
  options.kv_cache_bytes = 64 << 20;
  status = tern_model_load(argv[1], &options, &model);
  if (status != TERN_OK) return fail("loading the model", status);
  {
    tern_model_info info;
    if (tern_model_get_info(model, &info) == TERN_OK) fprintf(stderr, "[running on %s]\n", info.device);
  }

  messages[0].role = "user";
  messages[0].content = question;
  status = tern_apply_chat_template(model, messages, 1, 1, NULL, &prompt);
  if (status != TERN_OK) return fail("applying the chat template", status);
  status = tern_tokenize(model, prompt, strlen(prompt), 0, &ids, &num_ids);
  if (status != TERN_OK) return fail("tokenizing", status);

  params = tern_sampling_params_default(model);
  params.temperature = 0.0;
  params.max_tokens = argc > 3 ? atoi(argv[3]) : 64;
  status = tern_submit(model, ids, num_ids, &params, NULL, NULL, &request);
  if (status != TERN_OK) return fail("submitting", status);

  /* Pull the answer piece by piece: each piece is whole UTF-8 characters. */
  for (;;) {
    status = tern_request_next(request, -1, &output);
    if (status != TERN_OK) return fail("reading the answer", status);
    fwrite(output->text, 1, output->text_length, stdout);
    fflush(stdout);
    if (output->finish_reason != TERN_FINISH_NONE) finish = output->finish_reason;
    if (output->request_finished) break;
  }
  printf("\n");
  fprintf(stderr, "[%lld prompt tokens, %lld generated, finish: %s]\n", (long long)output->usage.prompt_tokens,
          (long long)output->usage.completion_tokens,
          finish == TERN_FINISH_STOP ? "stop" : finish == TERN_FINISH_LENGTH ? "length" : "other");

  tern_request_free(request);
  tern_free(ids);
  tern_free(prompt);
  tern_model_free(model);
  return finish == TERN_FINISH_STOP || finish == TERN_FINISH_LENGTH ? 0 : 1;
}
