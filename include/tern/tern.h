/* tern.h: the C API of tern, for programs that embed the engine (C99 and later, C++).
 *
 * One model handle owns a loaded model, its tokenizer and chat template, and a running engine (one engine thread
 * that batches every request in flight, on the GPU or the CPU). Requests are submitted as token ids with sampling
 * parameters and their output arrives either through a callback or through a pull iterator.
 *
 * Errors: every function that can fail returns a tern_status. TERN_OK is 0; on any other value,
 * tern_last_error() gives a message naming what was wrong. Nothing in this API aborts the process or lets a C++
 * exception cross into the caller.
 *
 * Threads: each function says what it allows. In short, one model may be used from any number of threads at once
 * (tokenize, template, submit, cancel); one request is read by one thread at a time.
 *
 * Lifetime: handles are opaque and freed by their own tern_*_free function. A request keeps what it needs of its
 * model, so a model may be freed before its requests (they are cancelled); freeing a request cancels it if it is
 * still running. Memory the library returns (tern_tokenize, tern_detokenize, tern_apply_chat_template) is freed
 * with tern_free.
 */
#ifndef TERN_TERN_H
#define TERN_TERN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TERN_API __declspec(dllexport)
#elif defined(__GNUC__)
#define TERN_API __attribute__((visibility("default")))
#else
#define TERN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes. It changes whenever a struct below changes layout or a function changes
 * meaning; compare it with tern_abi_version() to check that the library loaded at run time matches. */
#define TERN_ABI_VERSION 2

/* ---- versions and errors ------------------------------------------------------------------------------------- */

/* The library's version, "MAJOR.MINOR.PATCH". Any thread; the string is static. */
TERN_API const char* tern_version(void);
/* The TERN_ABI_VERSION the library was built with. Any thread. */
TERN_API int tern_abi_version(void);

typedef enum tern_status {
  TERN_OK = 0,
  TERN_ERR_INVALID_ARGUMENT = 1, /* the caller's input is wrong: a NULL handle, a value out of range */
  TERN_ERR_NOT_FOUND = 2,        /* a file or token that should exist does not */
  TERN_ERR_IO = 3,               /* the operating system refused a read or a map */
  TERN_ERR_PARSE = 4,            /* a model file or a template is malformed */
  TERN_ERR_OUT_OF_RANGE = 5,     /* a size past a limit: a prompt longer than the context */
  TERN_ERR_UNSUPPORTED = 6,      /* well-formed but not something tern implements */
  TERN_ERR_RESOURCE_EXHAUSTED = 7, /* memory or queue slots ran out */
  TERN_ERR_CANCELLED = 8,        /* the engine is shutting down */
  TERN_ERR_INTERNAL = 9,         /* a bug in tern */
  TERN_ERR_FINISHED = 10         /* tern_request_next on a request whose last output was already returned */
} tern_status;

/* The message of the last call on this thread that failed, "" if none did. Valid until the next tern call on
 * the same thread; each thread has its own. */
TERN_API const char* tern_last_error(void);
/* "ok", "invalid argument", ...: a status's name. Any thread; the string is static. */
TERN_API const char* tern_status_name(tern_status status);

/* Frees memory this library returned (token arrays, strings). NULL is allowed. Any thread. */
TERN_API void tern_free(void* memory);

/* Process-wide log level of the engine's messages (on stderr): "trace", "debug", "info", "warn", "error" or
 * "off". Until this is called, a loaded model logs warnings and errors only. Call it before loading a model;
 * not while other threads use the library. */
TERN_API tern_status tern_set_log_level(const char* level);

/* ---- models ------------------------------------------------------------------------------------------------- */

typedef struct tern_model tern_model;

/* How a model is loaded and its engine sized: the flags of `tern serve`, under the same names. Start from
 * tern_model_options_default(); 0 or NULL in a size or name field means its default; switches are 0 or 1. */
typedef struct tern_model_options {
  const char* device;             /* "auto" (CUDA when built with it and a GPU is present), "cuda" or "cpu" */
  int32_t threads;                /* CPU threads for the CPU forward; 0: the physical cores it may run on */
  int64_t kv_cache_bytes;         /* memory for the KV cache; 0: 2 GiB on the CPU, what max_num_seqs needs on CUDA */
  double gpu_memory_utilization;  /* CUDA: share of the GPU tern may take, instead of kv_cache_bytes; 0: unused */
  int32_t max_num_seqs;           /* most sequences in one batch; 0: 256 */
  int32_t max_num_batched_tokens; /* most tokens computed in one step; 0: 4096 on CUDA, 2048 on the CPU */
  int64_t max_model_len;          /* longest prompt + output; 0: the model's, capped by the KV cache */
  int32_t block_size;             /* tokens per KV cache block; 0: the default */
  int32_t enable_prefix_caching;  /* 1 (default) reuses the KV cache of shared prompt prefixes, 0 turns it off */
  int32_t async_scheduling;       /* CUDA: 1 (default) overlaps step n + 1 with step n, 0 turns it off */
  int32_t enforce_eager;          /* CUDA: 1 runs every step without CUDA graphs */
  int32_t decode_kernel;          /* CUDA: 1 (default) runs a one-token step as one persistent kernel */
  const char* cpu_kernels;        /* "auto" (default: "fast" on AMD CPUs with AVX512_BF16, else "optimized"), "fast" (bf16 activations for bf16 weights on AVX512_BF16 CPUs), "optimized" (fp32 activations) or "reference" */
  const char* quantization;       /* CPU: "q8_0", "q4_0", "q4_k_m", "q5_k_m" or "q6_k" applied at load; "awq", "gptq"
                                     or "compressed-tensors": the int4 folder's own scheme (checked); "fp8": FP8
                                     e4m3 layer weights with per-row scales (CUDA; on the CPU the same values in
                                     fp32, the reference); NULL: none */
  const char* chat_template;      /* a Jinja chat template's source; NULL: the model's own */
  int64_t max_queued_requests;    /* unfinished requests beyond which submit fails; 0: no limit */
  const char* speculative_config; /* speculative decoding by prompt lookup, vLLM's JSON (`tern serve
                                     --speculative-config`), e.g. {"method": "ngram", "num_speculative_tokens": 4};
                                     outputs unchanged; NULL: off */
} tern_model_options;

/* The defaults (the values `tern serve` starts with). Any thread. */
TERN_API tern_model_options tern_model_options_default(void);

/* Loads `path` (a Hugging Face model folder or a GGUF file) and starts its engine. `options` may be NULL for
 * the defaults. On success *model is the new handle; on failure it is NULL. Any thread. */
TERN_API tern_status tern_model_load(const char* path, const tern_model_options* options, tern_model** model);

/* Cancels the model's requests still running, stops its engine once no request handle refers to it, and frees
 * the handle. NULL is allowed. Call it once, when no other thread uses this handle. */
TERN_API void tern_model_free(tern_model* model);

/* What the model was loaded with. Any thread. */
typedef struct tern_model_info {
  const char* device;           /* "cpu" or "cuda": where the engine runs */
  int64_t max_model_len;        /* longest prompt + output in tokens */
  int32_t vocab_size;           /* ids a prompt may hold are in [0, vocab_size) */
  int64_t kv_cache_tokens;      /* tokens the KV cache holds */
} tern_model_info;
TERN_API tern_status tern_model_get_info(const tern_model* model, tern_model_info* info);

/* ---- tokens, text and chat ---------------------------------------------------------------------------------- */

/* Text (UTF-8, `text_length` bytes) to token ids, as Hugging Face's tokenizer does. Special tokens written in
 * the text become their ids; add_special_tokens adds the model's BOS when its tokenizer asks for one. *ids
 * (freed with tern_free) holds *num_ids ids. Any thread, concurrently. */
TERN_API tern_status tern_tokenize(const tern_model* model, const char* text, size_t text_length,
                                   int add_special_tokens, int32_t** ids, size_t* num_ids);

/* Token ids (each in [0, vocab_size)) to text; special tokens are left out when skip_special_tokens is 1, and
 * ids the model has but its tokenizer does not (padding of the vocabulary) give no text. *text (NUL-terminated,
 * freed with tern_free) has *text_length bytes; text_length may be NULL. Any thread, concurrently. */
TERN_API tern_status tern_detokenize(const tern_model* model, const int32_t* ids, size_t num_ids,
                                     int skip_special_tokens, char** text, size_t* text_length);

typedef struct tern_chat_message {
  const char* role;    /* "system", "user", "assistant", "tool" */
  const char* content; /* UTF-8; NULL is allowed for assistant and tool messages */
} tern_chat_message;

/* Renders messages with the model's chat template, as transformers' apply_chat_template does; with
 * add_generation_prompt the text ends where the assistant's answer begins. `template_kwargs_json` is NULL or a
 * JSON object of extra template variables (the HTTP API's chat_template_kwargs). Tokenize the result with
 * add_special_tokens 0: the template writes them. *text is freed with tern_free. Any thread, concurrently. */
TERN_API tern_status tern_apply_chat_template(const tern_model* model, const tern_chat_message* messages,
                                              size_t num_messages, int add_generation_prompt,
                                              const char* template_kwargs_json, char** text);

/* ---- sampling ----------------------------------------------------------------------------------------------- */

/* What a request asks for: the sampling fields of the OpenAI/vLLM HTTP API under the same names and meaning.
 * Start from tern_sampling_params_default(model), which applies the model's generation_config.json (as the
 * server does when a request leaves a field out). Arrays are read during tern_submit only. */
typedef struct tern_sampling_params {
  int32_t n;                    /* independent samples of the prompt, 1..128 */
  int64_t max_tokens;           /* most tokens per sample; 0: as many as the context leaves */
  int64_t min_tokens;           /* stop tokens are masked until this many were generated */
  double temperature;           /* 0 is greedy */
  double top_p;                 /* nucleus mass in (0, 1] */
  int64_t top_k;                /* 0 or -1: no limit */
  double min_p;                 /* in [0, 1] */
  double repetition_penalty;    /* 1 is off */
  double presence_penalty;      /* in [-2, 2] */
  double frequency_penalty;     /* in [-2, 2] */
  int32_t has_seed;             /* 1: draw from `seed`, the same tokens whatever else runs */
  uint64_t seed;
  int32_t logprobs;             /* -1: none; 0..20: the sampled token's log-probability and this many top ones */
  int32_t ignore_eos;           /* 1: go on past end-of-sequence tokens */
  int32_t skip_special_tokens;  /* 1 (default): special tokens are left out of the text */
  int32_t include_stop_str_in_output;
  const char* const* stop;      /* stop strings (at most 16), matched on the text and withheld from it */
  size_t num_stop;
  const int32_t* stop_token_ids; /* besides the model's end-of-sequence ids */
  size_t num_stop_token_ids;
  const int32_t* logit_bias_ids; /* logit_bias: ids and the bias added to each, clamped to [-100, 100] */
  const double* logit_bias_values;
  size_t num_logit_bias;
  int32_t priority;             /* lower runs first; FCFS among equals */
  const char* cache_salt;       /* NULL, or keeps this request's prefix-cache entries apart from others' */
} tern_sampling_params;

/* vLLM's defaults (temperature 1, top_p 1, max_tokens 16, n 1, ...) with the model's generation_config.json on
 * top; a NULL model gives the plain defaults. Any thread. */
TERN_API tern_sampling_params tern_sampling_params_default(const tern_model* model);

/* ---- requests ----------------------------------------------------------------------------------------------- */

typedef struct tern_request tern_request;

typedef enum tern_finish_reason {
  TERN_FINISH_NONE = 0,   /* the sequence goes on */
  TERN_FINISH_STOP = 1,   /* an end-of-sequence token, a stop token or a stop string */
  TERN_FINISH_LENGTH = 2, /* max_tokens or the context length */
  TERN_FINISH_ABORT = 3,  /* cancelled */
  TERN_FINISH_ERROR = 4   /* failed; see the output's status and error */
} tern_finish_reason;

/* Prompt and output token counts. */
typedef struct tern_usage {
  int64_t prompt_tokens;
  int64_t cached_prompt_tokens;  /* served from the prefix cache */
  int64_t completion_tokens;     /* all samples, so far */
} tern_usage;

/* News about one of a request's n samples. Pointers stay valid during the callback that receives it, or until
 * the next tern_request_next or tern_request_free on the request. */
typedef struct tern_output {
  int32_t index;                 /* which sample, 0..n-1 */
  const char* text;              /* new text in whole UTF-8 characters, NUL-terminated; stop strings withheld */
  size_t text_length;
  const int32_t* token_ids;      /* tokens sampled since the previous output of this sample */
  size_t num_tokens;
  const float* logprobs;         /* num_tokens log-probabilities when logprobs >= 0 was asked, else NULL */
  int32_t num_top_logprobs;      /* the `logprobs` asked for (0 when none) */
  const int32_t* top_token_ids;  /* num_tokens * num_top_logprobs ids, most likely first, or NULL */
  const float* top_logprobs;     /* their log-probabilities, laid out the same */
  tern_finish_reason finish_reason; /* set on the sample's last output */
  const char* stop_reason;       /* the stop string or token id that ended it; "" otherwise */
  tern_usage usage;              /* the request's counts as of this output */
  int32_t request_finished;      /* 1 on the request's last output, after which nothing follows */
  tern_status status;            /* TERN_OK, or why the request failed (on its last output) */
  const char* error;             /* "" or the failure's message */
} tern_output;

/* Receives a request's outputs, in order, on a thread the model owns for callbacks (one per model: callbacks of
 * all its requests run there one at a time). It may call tern_request_cancel, tern_submit and even
 * tern_request_free on its own request; it should return quickly, as other requests' callbacks wait for it. */
typedef void (*tern_output_callback)(const tern_output* output, void* user_data);

/* Queues a request for `prompt_ids` (at least one id, each below vocab_size). `params` may be NULL for
 * tern_sampling_params_default(model). With a callback, outputs are delivered to it; with NULL, they are taken
 * with tern_request_next. Fails at once on a bad parameter (naming it) or a prompt that leaves no room in the
 * context; nothing is queued then. Any thread, concurrently; requests of all threads are batched together. */
TERN_API tern_status tern_submit(tern_model* model, const int32_t* prompt_ids, size_t num_prompt_ids,
                                 const tern_sampling_params* params, tern_output_callback callback,
                                 void* user_data, tern_request** request);

/* Pull mode: waits up to timeout_ms (negative: no limit) for the request's next output. On TERN_OK, *output
 * points at it, or is NULL if the time ran out. After the output with request_finished, returns
 * TERN_ERR_FINISHED. Not for a request with a callback. One thread at a time per request. */
TERN_API tern_status tern_request_next(tern_request* request, int64_t timeout_ms, const tern_output** output);

/* Ends the request wherever it is (queued, in prefill, decoding); its last output then has finish_reason
 * TERN_FINISH_ABORT. Cancelling a finished request does nothing. Any thread, concurrently. */
TERN_API tern_status tern_request_cancel(tern_request* request);

/* Cancels the request if it is still running and frees the handle. Once it returns, no callback for the request
 * is running or will run (called from the request's own callback, the handle goes when the callback returns).
 * NULL is allowed. Call it once per request, when no other thread uses this handle. */
TERN_API void tern_request_free(tern_request* request);

#ifdef __cplusplus
}
#endif

#endif /* TERN_TERN_H */
