// The OpenAPI 3.0 document of /openapi.json: every route with its request
// schema (types and the ranges the server enforces, so a fuzzer such as
// schemathesis can build valid and invalid requests) and its responses
// (the JSON shapes tern really sends, errors included). Written as JSON so
// it reads like the document it is; tests/e2e/test_server_schema.py checks
// the server against it.
#include "server/api/openapi_spec.h"

#include <nlohmann/json.hpp>

namespace tern::server {
namespace {

// Paths and components. "$ref"s point into components; the error responses
// are shared: OpenAI-shaped on every route except TGI's validation,
// overload and generation errors.
constexpr const char* kDocument = R"json({
"openapi": "3.0.3",
"info": {"title": "tern", "version": "0"},
"components": {
  "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
    "description": "Required on API routes when the server runs with --api-key."}},
  "headers": {
    "RetryAfter": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer", "minimum": 0}}
  },
  "schemas": {
    "Error": {"type": "object", "required": ["error"], "properties": {
      "error": {"type": "object", "required": ["message", "type", "param", "code"], "properties": {
        "message": {"type": "string"},
        "type": {"type": "string"},
        "param": {"type": "string", "nullable": true},
        "code": {"type": "integer"}}}}},
    "TgiError": {"type": "object", "required": ["error", "error_type"], "properties": {
      "error": {"type": "string"},
      "error_type": {"type": "string", "enum": ["validation", "overloaded", "generation"]}}},
    "Stop": {"nullable": true, "description": "Strings that end generation; never part of the output.",
      "oneOf": [{"type": "string"}, {"type": "array", "maxItems": 16, "items": {"type": "string"}}]},
    "TokenIds": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 2147483647}},
    "StreamOptions": {"type": "object", "nullable": true, "properties": {
      "include_usage": {"type": "boolean", "nullable": true},
      "continuous_usage_stats": {"type": "boolean", "nullable": true}}},
    "ResponseFormat": {"type": "object", "nullable": true, "required": ["type"],
      "description": "Only {\"type\": \"text\"} until guided decoding exists; json_object and json_schema get 400.",
      "properties": {"type": {"type": "string", "enum": ["text", "json_object", "json_schema"]}}},
    "SamplingFields": {"type": "object", "properties": {
      "model": {"type": "string", "nullable": true, "description": "The served model name; another name gets 404."},
      "max_tokens": {"type": "integer", "nullable": true, "minimum": 1,
        "description": "Prompt + max_tokens must fit in max_model_len (else 400)."},
      "max_completion_tokens": {"type": "integer", "nullable": true, "minimum": 1},
      "temperature": {"type": "number", "nullable": true, "minimum": 0},
      "top_p": {"type": "number", "nullable": true, "minimum": 0, "exclusiveMinimum": true, "maximum": 1},
      "top_k": {"type": "integer", "nullable": true, "minimum": -1, "description": "0 or -1: no limit."},
      "min_p": {"type": "number", "nullable": true, "minimum": 0, "maximum": 1},
      "presence_penalty": {"type": "number", "nullable": true, "minimum": -2, "maximum": 2},
      "frequency_penalty": {"type": "number", "nullable": true, "minimum": -2, "maximum": 2},
      "repetition_penalty": {"type": "number", "nullable": true, "minimum": 0, "exclusiveMinimum": true},
      "stop": {"$ref": "#/components/schemas/Stop"},
      "stop_token_ids": {"allOf": [{"$ref": "#/components/schemas/TokenIds"}], "nullable": true},
      "seed": {"type": "integer", "nullable": true},
      "n": {"type": "integer", "nullable": true, "minimum": 1, "maximum": 128},
      "prompt_logprobs": {"type": "integer", "nullable": true, "minimum": 0, "maximum": 20,
        "description": "vLLM's: the prompt tokens' logprobs with this many alternatives (not with stream)."},
      "logit_bias": {"type": "object", "nullable": true,
        "description": "Token id (as a string) -> bias in [-100, 100].",
        "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
      "ignore_eos": {"type": "boolean", "nullable": true},
      "min_tokens": {"type": "integer", "nullable": true, "minimum": 0, "description": "At most max_tokens."},
      "skip_special_tokens": {"type": "boolean", "nullable": true},
      "include_stop_str_in_output": {"type": "boolean", "nullable": true},
      "stream": {"type": "boolean", "nullable": true},
      "stream_options": {"$ref": "#/components/schemas/StreamOptions"},
      "user": {"type": "string", "nullable": true},
      "priority": {"type": "integer", "nullable": true},
      "cache_salt": {"type": "string", "nullable": true},
      "response_format": {"$ref": "#/components/schemas/ResponseFormat"},
      "tools": {"type": "array", "nullable": true, "maxItems": 0, "items": {"type": "object"},
        "description": "Function calling is not supported yet: a non-empty list gets 400."}}},
    "TextPart": {"type": "object", "required": ["type", "text"], "properties": {
      "type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}},
    "ChatMessage": {"type": "object", "required": ["role"], "properties": {
      "role": {"type": "string", "enum": ["system", "user", "assistant"]},
      "content": {"nullable": true, "oneOf": [{"type": "string"},
        {"type": "array", "items": {"$ref": "#/components/schemas/TextPart"}}]},
      "name": {"type": "string"}}},
    "ChatCompletionRequest": {"allOf": [{"$ref": "#/components/schemas/SamplingFields"}, {
      "type": "object", "required": ["messages"], "properties": {
        "messages": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/ChatMessage"}},
        "logprobs": {"type": "boolean", "nullable": true},
        "top_logprobs": {"type": "integer", "nullable": true, "minimum": 0, "maximum": 20,
          "description": "Needs logprobs: true when above 0."},
        "add_generation_prompt": {"type": "boolean", "nullable": true},
        "chat_template_kwargs": {"type": "object", "nullable": true}}}]},
    "CompletionRequest": {"allOf": [{"$ref": "#/components/schemas/SamplingFields"}, {
      "type": "object", "required": ["prompt"], "properties": {
        "prompt": {"oneOf": [
          {"type": "string", "minLength": 1},
          {"type": "array", "minItems": 1, "maxItems": 256, "items": {"type": "string", "minLength": 1}},
          {"allOf": [{"$ref": "#/components/schemas/TokenIds"}], "minItems": 1},
          {"type": "array", "minItems": 1, "maxItems": 256,
           "items": {"allOf": [{"$ref": "#/components/schemas/TokenIds"}], "minItems": 1}}],
          "description": "A string, strings, token ids, or lists of token ids (ids below the vocabulary size)."},
        "logprobs": {"type": "integer", "nullable": true, "minimum": 0, "maximum": 20},
        "echo": {"type": "boolean", "nullable": true}}}]},
    "Usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"], "properties": {
      "prompt_tokens": {"type": "integer", "minimum": 0},
      "completion_tokens": {"type": "integer", "minimum": 0},
      "total_tokens": {"type": "integer", "minimum": 0},
      "prompt_tokens_details": {"type": "object", "properties": {"cached_tokens": {"type": "integer", "minimum": 0}}}}},
    "Timings": {"type": "object", "description": "tern's extension: request timings.",
      "required": ["ttft_ms", "tokens_per_second", "total_ms"], "properties": {
      "ttft_ms": {"type": "number", "minimum": 0},
      "tokens_per_second": {"type": "number", "minimum": 0},
      "total_ms": {"type": "number", "minimum": 0}}},
    "FinishReason": {"type": "string", "nullable": true, "enum": ["stop", "length", "abort", "error", null]},
    "StopReason": {"nullable": true, "oneOf": [{"type": "string"}, {"type": "integer"}],
      "description": "The stop string or stop token id that ended the choice; null for eos or length."},
    "TokenLogprob": {"type": "object", "required": ["token", "logprob", "bytes"], "properties": {
      "token": {"type": "string"},
      "logprob": {"type": "number", "maximum": 0},
      "bytes": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}}}},
    "ChatLogprobs": {"type": "object", "nullable": true, "required": ["content"], "properties": {
      "content": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/TokenLogprob"}, {
        "type": "object", "required": ["top_logprobs"], "properties": {
          "top_logprobs": {"type": "array", "items": {"$ref": "#/components/schemas/TokenLogprob"}}}}]}}}},
    "CompletionLogprobs": {"type": "object", "nullable": true,
      "required": ["tokens", "token_logprobs", "top_logprobs", "text_offset"], "properties": {
      "tokens": {"type": "array", "items": {"type": "string"}},
      "token_logprobs": {"type": "array", "description": "With echo the prompt's tokens lead; the first is null.",
        "items": {"type": "number", "maximum": 0, "nullable": true}},
      "top_logprobs": {"type": "array",
        "items": {"type": "object", "nullable": true, "additionalProperties": {"type": "number"}}},
      "text_offset": {"type": "array", "items": {"type": "integer", "minimum": 0}}}},
    "ChatCompletion": {"type": "object",
      "required": ["id", "object", "created", "model", "choices", "usage"], "properties": {
      "id": {"type": "string"},
      "object": {"type": "string", "enum": ["chat.completion"]},
      "created": {"type": "integer"},
      "model": {"type": "string"},
      "choices": {"type": "array", "minItems": 1, "items": {"type": "object",
        "required": ["index", "message", "logprobs", "finish_reason"], "properties": {
          "index": {"type": "integer", "minimum": 0},
          "message": {"type": "object", "required": ["role", "content"], "properties": {
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {"type": "string", "nullable": true}}},
          "logprobs": {"$ref": "#/components/schemas/ChatLogprobs"},
          "finish_reason": {"$ref": "#/components/schemas/FinishReason"},
          "stop_reason": {"$ref": "#/components/schemas/StopReason"}}}},
      "usage": {"$ref": "#/components/schemas/Usage"},
      "prompt_logprobs": {"$ref": "#/components/schemas/PromptLogprobs"},
      "tern": {"$ref": "#/components/schemas/Timings"}}},
    "PromptLogprobs": {"type": "array", "description": "null for the first prompt token, then token id -> entry.",
      "items": {"type": "object", "nullable": true, "additionalProperties": {"type": "object",
        "required": ["logprob", "rank", "decoded_token"], "properties": {
          "logprob": {"type": "number", "maximum": 0}, "rank": {"type": "integer", "minimum": 1},
          "decoded_token": {"type": "string"}}}}},
    "Completion": {"type": "object",
      "required": ["id", "object", "created", "model", "choices", "usage"], "properties": {
      "id": {"type": "string"},
      "object": {"type": "string", "enum": ["text_completion"]},
      "created": {"type": "integer"},
      "model": {"type": "string"},
      "choices": {"type": "array", "minItems": 1, "items": {"type": "object",
        "required": ["index", "text", "logprobs", "finish_reason"], "properties": {
          "index": {"type": "integer", "minimum": 0},
          "text": {"type": "string"},
          "logprobs": {"$ref": "#/components/schemas/CompletionLogprobs"},
          "prompt_logprobs": {"$ref": "#/components/schemas/PromptLogprobs"},
          "finish_reason": {"$ref": "#/components/schemas/FinishReason"},
          "stop_reason": {"$ref": "#/components/schemas/StopReason"}}}},
      "usage": {"$ref": "#/components/schemas/Usage"},
      "tern": {"$ref": "#/components/schemas/Timings"}}},
    "ModelList": {"type": "object", "required": ["object", "data"], "properties": {
      "object": {"type": "string", "enum": ["list"]},
      "data": {"type": "array", "items": {"type": "object",
        "required": ["id", "object", "created", "owned_by", "max_model_len"], "properties": {
          "id": {"type": "string"},
          "object": {"type": "string", "enum": ["model"]},
          "created": {"type": "integer"},
          "owned_by": {"type": "string"},
          "root": {"type": "string"},
          "parent": {"type": "string", "nullable": true},
          "max_model_len": {"type": "integer", "minimum": 1},
          "generation_config": {"type": "object",
            "description": "The sampling values a request that sets none of them gets.",
            "required": ["temperature", "top_p", "top_k", "repetition_penalty"], "properties": {
            "temperature": {"type": "number", "minimum": 0},
            "top_p": {"type": "number", "minimum": 0, "maximum": 1},
            "top_k": {"type": "integer"},
            "repetition_penalty": {"type": "number", "minimum": 0, "exclusiveMinimum": true}}}}}}}},
    "TokenizeRequest": {"type": "object", "anyOf": [{"required": ["prompt"]}, {"required": ["messages"]}],
      "properties": {
      "model": {"type": "string", "nullable": true},
      "prompt": {"type": "string", "description": "Give prompt or messages."},
      "messages": {"type": "array", "items": {"type": "object", "required": ["role", "content"], "properties": {
        "role": {"type": "string", "enum": ["system", "user", "assistant"]},
        "content": {"oneOf": [{"type": "string"},
          {"type": "array", "items": {"$ref": "#/components/schemas/TextPart"}}]}}}},
      "add_special_tokens": {"type": "boolean"},
      "add_generation_prompt": {"type": "boolean"},
      "return_token_strs": {"type": "boolean"}}},
    "TokenizeResponse": {"type": "object", "required": ["tokens", "count", "max_model_len"], "properties": {
      "tokens": {"$ref": "#/components/schemas/TokenIds"},
      "count": {"type": "integer", "minimum": 0},
      "max_model_len": {"type": "integer", "minimum": 1},
      "token_strs": {"type": "array", "items": {"type": "string"}}}},
    "DetokenizeRequest": {"type": "object", "required": ["tokens"], "properties": {
      "model": {"type": "string", "nullable": true},
      "tokens": {"allOf": [{"$ref": "#/components/schemas/TokenIds"}],
        "description": "Ids below the vocabulary size (else 400)."}}},
    "DetokenizeResponse": {"type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}},
    "Version": {"type": "object", "required": ["version"], "properties": {"version": {"type": "string"}}},
    "TgiParameters": {"type": "object", "nullable": true, "properties": {
      "do_sample": {"type": "boolean", "nullable": true, "description": "Greedy unless set or a warper is given."},
      "max_new_tokens": {"type": "integer", "nullable": true, "minimum": 1, "maximum": 4294967295,
        "description": "Default: the rest of max_total_tokens."},
      "temperature": {"type": "number", "nullable": true, "minimum": 0, "exclusiveMinimum": true},
      "top_p": {"type": "number", "nullable": true, "minimum": 0, "exclusiveMinimum": true,
        "maximum": 1, "exclusiveMaximum": true},
      "top_k": {"type": "integer", "nullable": true, "minimum": 1, "maximum": 2147483647},
      "typical_p": {"type": "number", "nullable": true, "minimum": 0, "exclusiveMinimum": true, "maximum": 1,
        "description": "Typical decoding is not supported: only 1.0 (off) is accepted."},
      "repetition_penalty": {"type": "number", "nullable": true, "minimum": 0, "exclusiveMinimum": true},
      "frequency_penalty": {"type": "number", "nullable": true, "minimum": -2, "maximum": 2},
      "seed": {"type": "integer", "nullable": true, "minimum": 0},
      "stop": {"type": "array", "nullable": true, "maxItems": 16, "items": {"type": "string"}},
      "return_full_text": {"type": "boolean", "nullable": true},
      "details": {"type": "boolean", "nullable": true},
      "decoder_input_details": {"type": "boolean", "nullable": true,
        "description": "Prompt logprobs are not supported: true gets 422."},
      "truncate": {"type": "integer", "nullable": true, "minimum": 1,
        "description": "Keep only the last `truncate` input tokens; at most max_input_tokens."},
      "best_of": {"type": "integer", "nullable": true, "minimum": 1, "maximum": 1},
      "top_n_tokens": {"type": "integer", "nullable": true, "minimum": 0, "maximum": 20},
      "watermark": {"type": "boolean", "nullable": true, "description": "Only false: watermarking is not supported."},
      "grammar": {"type": "object", "nullable": true, "description": "Not supported: a grammar gets 422."}}},
    "TgiRequest": {"type": "object", "required": ["inputs"], "properties": {
      "inputs": {"type": "string", "minLength": 1},
      "parameters": {"$ref": "#/components/schemas/TgiParameters"}}},
    "TgiCompatRequest": {"allOf": [{"$ref": "#/components/schemas/TgiRequest"}, {
      "type": "object", "properties": {"stream": {"type": "boolean", "nullable": true}}}]},
    "TgiToken": {"type": "object", "required": ["id", "text", "logprob", "special"], "properties": {
      "id": {"type": "integer", "minimum": 0},
      "text": {"type": "string"},
      "logprob": {"type": "number", "nullable": true, "maximum": 0},
      "special": {"type": "boolean"}}},
    "TgiFinishReason": {"type": "string", "enum": ["length", "eos_token", "stop_sequence"]},
    "TgiGenerateResponse": {"type": "object", "required": ["generated_text"], "properties": {
      "generated_text": {"type": "string"},
      "details": {"type": "object",
        "required": ["finish_reason", "generated_tokens", "seed", "prefill", "tokens"], "properties": {
        "finish_reason": {"$ref": "#/components/schemas/TgiFinishReason"},
        "generated_tokens": {"type": "integer", "minimum": 1},
        "seed": {"type": "integer", "nullable": true, "minimum": 0},
        "prefill": {"type": "array", "maxItems": 0, "items": {"type": "object"}},
        "tokens": {"type": "array", "items": {"$ref": "#/components/schemas/TgiToken"}},
        "top_tokens": {"type": "array",
          "items": {"type": "array", "items": {"$ref": "#/components/schemas/TgiToken"}}}}}}},
    "TgiStreamEvent": {"type": "object",
      "description": "One `data:` event per token; the last has generated_text and details.",
      "required": ["index", "token", "top_tokens", "generated_text", "details"], "properties": {
      "index": {"type": "integer", "minimum": 0},
      "token": {"$ref": "#/components/schemas/TgiToken"},
      "top_tokens": {"type": "array", "items": {"$ref": "#/components/schemas/TgiToken"}},
      "generated_text": {"type": "string", "nullable": true},
      "details": {"type": "object", "nullable": true,
        "required": ["finish_reason", "generated_tokens", "seed", "input_length"], "properties": {
        "finish_reason": {"$ref": "#/components/schemas/TgiFinishReason"},
        "generated_tokens": {"type": "integer", "minimum": 1},
        "seed": {"type": "integer", "nullable": true, "minimum": 0},
        "input_length": {"type": "integer", "minimum": 1}}}}},
    "TgiInfo": {"type": "object",
      "required": ["model_id", "model_dtype", "max_input_tokens", "max_total_tokens", "max_best_of",
                   "max_stop_sequences", "router", "version"], "properties": {
      "model_id": {"type": "string"},
      "model_sha": {"type": "string", "nullable": true},
      "model_dtype": {"type": "string"},
      "model_pipeline_tag": {"type": "string", "nullable": true},
      "max_concurrent_requests": {"type": "integer", "minimum": 0},
      "max_best_of": {"type": "integer", "minimum": 1},
      "max_stop_sequences": {"type": "integer", "minimum": 0},
      "max_top_n_tokens": {"type": "integer", "minimum": 0},
      "max_input_tokens": {"type": "integer", "minimum": 0},
      "max_input_length": {"type": "integer", "minimum": 0},
      "max_total_tokens": {"type": "integer", "minimum": 1},
      "max_client_batch_size": {"type": "integer", "minimum": 1},
      "router": {"type": "string"},
      "version": {"type": "string"},
      "sha": {"type": "string", "nullable": true},
      "docker_label": {"type": "string", "nullable": true}}}
  },
  "responses": {
    "BadRequest": {
      "description": "Malformed HTTP, invalid JSON, a wrong type or an out-of-range value, or a prompt too long.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
    "Unauthorized": {"description": "Missing or wrong API key (only with --api-key).",
      "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
    "NotFound": {"description": "Unknown model.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
    "TooLarge": {"description": "The request body is over --max-body-bytes.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
    "Unavailable": {"description": "The queue is full (--max-queued-requests) or the model is loading.",
      "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
    "TgiBadJson": {"description": "The body is not JSON (TGI's shape), or the HTTP request is malformed (OpenAI's).",
      "content": {"application/json": {"schema": {"oneOf": [{"$ref": "#/components/schemas/TgiError"},
        {"$ref": "#/components/schemas/Error"}]}}}},
    "TgiValidation": {"description": "Input validation error (error_type validation).",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiError"}}}},
    "TgiGeneration": {"description": "The generation failed (error_type generation).",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiError"}}}},
    "TgiOverloaded": {"description": "The queue is full (error_type overloaded).",
      "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiError"}}}},
    "TgiUnavailable": {"description": "Loading or shutting down (error_type overloaded).",
      "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiError"}}}}
  }
},
"security": [{}, {"bearer": []}],
"paths": {
  "/v1/chat/completions": {"post": {"operationId": "createChatCompletion", "tags": ["OpenAI"],
    "summary": "Chat completion (stream: server-sent events, data: [DONE] last).",
    "requestBody": {"required": true, "content": {"application/json": {
      "schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}}},
    "responses": {
      "200": {"description": "The completion, or with stream: chat.completion.chunk events.", "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
        "text/event-stream": {"schema": {"type": "string"}}}},
      "400": {"$ref": "#/components/responses/BadRequest"},
      "401": {"$ref": "#/components/responses/Unauthorized"},
      "404": {"$ref": "#/components/responses/NotFound"},
      "413": {"$ref": "#/components/responses/TooLarge"},
      "503": {"$ref": "#/components/responses/Unavailable"}}}},
  "/v1/completions": {"post": {"operationId": "createCompletion", "tags": ["OpenAI"],
    "summary": "Text completion (stream: server-sent events, data: [DONE] last).",
    "requestBody": {"required": true, "content": {"application/json": {
      "schema": {"$ref": "#/components/schemas/CompletionRequest"}}}},
    "responses": {
      "200": {"description": "The completion, or with stream: text_completion events.", "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Completion"}},
        "text/event-stream": {"schema": {"type": "string"}}}},
      "400": {"$ref": "#/components/responses/BadRequest"},
      "401": {"$ref": "#/components/responses/Unauthorized"},
      "404": {"$ref": "#/components/responses/NotFound"},
      "413": {"$ref": "#/components/responses/TooLarge"},
      "503": {"$ref": "#/components/responses/Unavailable"}}}},
  "/v1/models": {"get": {"operationId": "listModels", "tags": ["OpenAI"], "summary": "The served model.",
    "responses": {
      "200": {"description": "One model, with max_model_len.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ModelList"}}}},
      "401": {"$ref": "#/components/responses/Unauthorized"}}}},
  "/tokenize": {"post": {"operationId": "tokenize", "tags": ["vLLM"], "summary": "Token ids of a prompt or chat.",
    "requestBody": {"required": true, "content": {"application/json": {
      "schema": {"$ref": "#/components/schemas/TokenizeRequest"}}}},
    "responses": {
      "200": {"description": "The token ids.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenizeResponse"}}}},
      "400": {"$ref": "#/components/responses/BadRequest"},
      "401": {"$ref": "#/components/responses/Unauthorized"},
      "413": {"$ref": "#/components/responses/TooLarge"}}}},
  "/detokenize": {"post": {"operationId": "detokenize", "tags": ["vLLM"], "summary": "Text of token ids.",
    "requestBody": {"required": true, "content": {"application/json": {
      "schema": {"$ref": "#/components/schemas/DetokenizeRequest"}}}},
    "responses": {
      "200": {"description": "The text.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DetokenizeResponse"}}}},
      "400": {"$ref": "#/components/responses/BadRequest"},
      "401": {"$ref": "#/components/responses/Unauthorized"},
      "413": {"$ref": "#/components/responses/TooLarge"}}}},
  "/health": {"get": {"operationId": "health", "tags": ["vLLM"], "summary": "200 once the engine is ready.",
    "security": [{}],
    "responses": {
      "200": {"description": "Ready (empty body).",
        "content": {"text/plain": {"schema": {"type": "string", "maxLength": 0}}}},
      "503": {"$ref": "#/components/responses/Unavailable"}}}},
  "/ping": {
    "get": {"operationId": "ping", "tags": ["vLLM"], "summary": "As /health, for SageMaker.", "security": [{}],
      "responses": {"200": {"description": "Ready (empty body).",
                            "content": {"text/plain": {"schema": {"type": "string"}}}},
                    "503": {"description": "Not ready.", "content": {"text/plain": {"schema": {"type": "string"}}}}}},
    "post": {"operationId": "pingPost", "tags": ["vLLM"], "summary": "As GET /ping.", "security": [{}],
      "responses": {"200": {"description": "Ready (empty body).",
                            "content": {"text/plain": {"schema": {"type": "string"}}}},
                    "503": {"description": "Not ready.", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
  "/version": {"get": {"operationId": "version", "tags": ["vLLM"], "summary": "The server version.", "security": [{}],
    "responses": {"200": {"description": "The version.",
      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Version"}}}}}}},
  "/metrics": {"get": {"operationId": "metrics", "tags": ["vLLM"], "security": [{}],
    "summary": "Prometheus text format with vLLM's metric names (model_name label) and tern: ones.",
    "responses": {"200": {"description": "Prometheus exposition format 0.0.4.",
      "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
  "/openapi.json": {"get": {"operationId": "openapi", "tags": ["tern"], "summary": "This document.",
    "responses": {
      "200": {"description": "OpenAPI 3.0.", "content": {"application/json": {"schema": {"type": "object",
        "required": ["openapi", "info", "paths"]}}}},
      "401": {"$ref": "#/components/responses/Unauthorized"}}}},
  "/": {
    "get": {"operationId": "chatPage", "tags": ["tern"], "summary": "The built-in chat page.", "security": [{}],
      "responses": {"200": {"description": "HTML.", "content": {"text/html": {"schema": {"type": "string"}}}},
        "304": {"description": "Unchanged since the ETag in If-None-Match."},
        "404": {"description": "The page is turned off (--no-webui)."}}},
    "post": {"operationId": "tgiCompat", "tags": ["TGI"],
      "summary": "TGI's compat route: /generate wrapped in a list, or /generate_stream when stream is true.",
      "requestBody": {"required": true, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/TgiCompatRequest"}}}},
      "responses": {
        "200": {"description": "A one-element list, or token events.", "content": {
          "application/json": {"schema": {"type": "array", "minItems": 1, "maxItems": 1,
            "items": {"$ref": "#/components/schemas/TgiGenerateResponse"}}},
          "text/event-stream": {"schema": {"type": "string"}}}},
        "400": {"$ref": "#/components/responses/TgiBadJson"},
        "401": {"$ref": "#/components/responses/Unauthorized"},
        "413": {"$ref": "#/components/responses/TooLarge"},
        "422": {"$ref": "#/components/responses/TgiValidation"},
        "424": {"$ref": "#/components/responses/TgiGeneration"},
        "429": {"$ref": "#/components/responses/TgiOverloaded"},
        "503": {"$ref": "#/components/responses/TgiUnavailable"}}}},
  "/generate": {"post": {"operationId": "tgiGenerate", "tags": ["TGI"], "summary": "TGI generation.",
    "requestBody": {"required": true, "content": {"application/json": {
      "schema": {"$ref": "#/components/schemas/TgiRequest"}}}},
    "responses": {
      "200": {"description": "The generated text, with details when asked.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiGenerateResponse"}}}},
      "400": {"$ref": "#/components/responses/TgiBadJson"},
      "401": {"$ref": "#/components/responses/Unauthorized"},
      "413": {"$ref": "#/components/responses/TooLarge"},
      "422": {"$ref": "#/components/responses/TgiValidation"},
      "424": {"$ref": "#/components/responses/TgiGeneration"},
      "429": {"$ref": "#/components/responses/TgiOverloaded"},
      "503": {"$ref": "#/components/responses/TgiUnavailable"}}}},
  "/generate_stream": {"post": {"operationId": "tgiGenerateStream", "tags": ["TGI"],
    "summary": "TGI streaming: one server-sent event per token (TgiStreamEvent); no [DONE].",
    "requestBody": {"required": true, "content": {"application/json": {
      "schema": {"$ref": "#/components/schemas/TgiRequest"}}}},
    "responses": {
      "200": {"description": "TgiStreamEvent events; a failure mid-stream is a TgiError event.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}}},
      "400": {"$ref": "#/components/responses/TgiBadJson"},
      "401": {"$ref": "#/components/responses/Unauthorized"},
      "413": {"$ref": "#/components/responses/TooLarge"},
      "422": {"$ref": "#/components/responses/TgiValidation"},
      "424": {"$ref": "#/components/responses/TgiGeneration"},
      "429": {"$ref": "#/components/responses/TgiOverloaded"},
      "503": {"$ref": "#/components/responses/TgiUnavailable"}}}},
  "/info": {"get": {"operationId": "tgiInfo", "tags": ["TGI"], "summary": "TGI's model and limits.",
    "responses": {
      "200": {"description": "The model and its limits.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiInfo"}}}},
      "401": {"$ref": "#/components/responses/Unauthorized"}}}}
}
})json";

}  // namespace

std::string openapi_spec(const std::string& model_name, const RequestLimits& limits) {
  nlohmann::json spec = nlohmann::json::parse(kDocument);
  // The request schemas' bounds as this server was started (--max-logprobs, --max-n, --max-stop-sequences).
  auto set_bounds = [&limits](auto& self, nlohmann::json& node) -> void {
    if (!node.is_object() && !node.is_array()) return;
    if (node.is_object() && node.contains("properties") && node["properties"].is_object()) {
      for (auto& [field, prop] : node["properties"].items()) {
        if (!prop.is_object()) continue;
        if (field == "stop" && prop.contains("maxItems")) prop["maxItems"] = limits.max_stop;
        if (!prop.contains("maximum")) continue;
        if (field == "logprobs" || field == "top_logprobs" || field == "prompt_logprobs")
          prop["maximum"] = limits.max_logprobs;
        if (field == "n") prop["maximum"] = limits.max_n;
      }
    }
    for (auto& child : node) self(self, child);
  };
  set_bounds(set_bounds, spec["components"]["schemas"]);
  for (auto& form : spec["components"]["schemas"]["Stop"]["oneOf"]) {
    if (form.contains("maxItems")) form["maxItems"] = limits.max_stop;
  }
  // Any request can be malformed HTTP (a bad header value): 400 everywhere.
  for (auto& [path, item] : spec["paths"].items()) {
    for (auto& [method, operation] : item.items()) {
      if (!operation["responses"].contains("400"))
        operation["responses"]["400"] = {{"$ref", "#/components/responses/BadRequest"}};
    }
  }
  spec["info"]["version"] = TERN_VERSION_STRING;
  spec["info"]["description"] =
      "tern serves " + model_name + " with the OpenAI, vLLM and TGI APIs. Unknown request fields are ignored.";
  return spec.dump();
}

}  // namespace tern::server
