/* parallel.c: several requests at once from several threads on one model, one of them cancelled.
 *
 *   parallel MODEL [THREADS]
 *
 * Each thread submits the same prompt, greedy, and collects its answer through a callback; the last thread
 * cancels its request as soon as the first piece arrives. All requests run in the engine's batches together.
 * Exits 0 when every finished answer is the same text and the cancelled one ended with "abort". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern/tern.h>

#define MAX_THREADS 16
#define MAX_TEXT 4096

typedef struct job {
  tern_model* model;
  int cancel_early;
  /* Filled by the callback (on the model's callback thread), read after `done` is set. */
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  tern_request* request;
  char text[MAX_TEXT];
  size_t text_length;
  tern_finish_reason finish;
  int done;
  tern_status status;
} job;

static void on_output(const tern_output* output, void* user_data) {
  job* j = (job*)user_data;
  pthread_mutex_lock(&j->mutex);
  if (j->text_length + output->text_length < MAX_TEXT) {
    memcpy(j->text + j->text_length, output->text, output->text_length);
    j->text_length += output->text_length;
  }
  if (output->finish_reason != TERN_FINISH_NONE) j->finish = output->finish_reason;
  /* Cancelling from inside the callback is allowed. */
  if (j->cancel_early && output->num_tokens > 0) tern_request_cancel(j->request);
  if (output->request_finished) {
    j->done = 1;
    pthread_cond_signal(&j->cond);
  }
  pthread_mutex_unlock(&j->mutex);
}

static void* run_job(void* arg) {
  job* j = (job*)arg;
  static const char prompt[] = "The weather today";
  int32_t* ids = NULL;
  size_t num_ids = 0;
  tern_sampling_params params = tern_sampling_params_default(j->model);
  params.temperature = 0.0;
  params.ignore_eos = 1;
  /* The cancelled request asks for the whole context, so it is surely still running when cancelled. */
  params.max_tokens = j->cancel_early ? 0 : 32;
  j->status = tern_tokenize(j->model, prompt, sizeof(prompt) - 1, 1, &ids, &num_ids);
  if (j->status != TERN_OK) return NULL;
  /* The callback may run before tern_submit returns: it reads j->request under the mutex. */
  pthread_mutex_lock(&j->mutex);
  j->status = tern_submit(j->model, ids, num_ids, &params, on_output, j, &j->request);
  pthread_mutex_unlock(&j->mutex);
  tern_free(ids);
  if (j->status != TERN_OK) return NULL;
  pthread_mutex_lock(&j->mutex);
  while (!j->done) pthread_cond_wait(&j->cond, &j->mutex);
  pthread_mutex_unlock(&j->mutex);
  tern_request_free(j->request);
  return NULL;
}

int main(int argc, char** argv) {
  int num_threads = argc > 2 ? atoi(argv[2]) : 4;
  tern_model_options options = tern_model_options_default();
  tern_model* model = NULL;
  job jobs[MAX_THREADS];
  pthread_t threads[MAX_THREADS];
  int i, ok = 1;
  tern_status status;

  if (argc < 2 || num_threads < 2 || num_threads > MAX_THREADS) {
    fprintf(stderr, "usage: parallel MODEL [THREADS: 2..%d]\n", MAX_THREADS);
    return 2;
  }
  options.device = "cpu";
  options.kv_cache_bytes = 64 << 20;
  status = tern_model_load(argv[1], &options, &model);
  if (status != TERN_OK) {
    fprintf(stderr, "parallel: %s\n", tern_last_error());
    return 1;
  }
  for (i = 0; i < num_threads; ++i) {
    memset(&jobs[i], 0, sizeof(jobs[i]));
    jobs[i].model = model;
    jobs[i].cancel_early = i == num_threads - 1;
    pthread_mutex_init(&jobs[i].mutex, NULL);
    pthread_cond_init(&jobs[i].cond, NULL);
    pthread_create(&threads[i], NULL, run_job, &jobs[i]);
  }
  for (i = 0; i < num_threads; ++i) pthread_join(threads[i], NULL);

  for (i = 0; i < num_threads; ++i) {
    const job* j = &jobs[i];
    printf("request %d: %s, %zu bytes: %.*s\n", i,
           j->status != TERN_OK ? "failed" : j->finish == TERN_FINISH_ABORT ? "cancelled" : "finished",
           j->text_length, (int)j->text_length, j->text);
    if (j->status != TERN_OK) ok = 0;
    if (j->cancel_early && j->finish != TERN_FINISH_ABORT) ok = 0;
    if (!j->cancel_early && (j->finish != TERN_FINISH_LENGTH || j->text_length != jobs[0].text_length ||
                             memcmp(j->text, jobs[0].text, j->text_length) != 0)) {
      ok = 0;
    }
  }
  for (i = 0; i < num_threads; ++i) {
    pthread_mutex_destroy(&jobs[i].mutex);
    pthread_cond_destroy(&jobs[i].cond);
  }
  tern_model_free(model);
  printf("%s\n", ok ? "all requests as expected" : "UNEXPECTED RESULTS");
  return ok ? 0 : 1;
}
