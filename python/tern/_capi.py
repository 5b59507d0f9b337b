"""The C API of libtern (include/tern/tern.h) through ctypes: the library, its structs and its functions.

The library is found in this order: the path in the TERN_LIBRARY environment variable, the libtern.so
installed beside this package (a wheel), then the system's (ctypes.util.find_library). Every call that
returns a tern_status goes through `check`, which raises the matching TernError with the library's
message."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib

from tern.errors import error_for

ABI_VERSION = 2

c_int32_p = ctypes.POINTER(ctypes.c_int32)


class ModelOptions(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_char_p),
        ("threads", ctypes.c_int32),
        ("kv_cache_bytes", ctypes.c_int64),
        ("gpu_memory_utilization", ctypes.c_double),
        ("max_num_seqs", ctypes.c_int32),
        ("max_num_batched_tokens", ctypes.c_int32),
        ("max_model_len", ctypes.c_int64),
        ("block_size", ctypes.c_int32),
        ("enable_prefix_caching", ctypes.c_int32),
        ("async_scheduling", ctypes.c_int32),
        ("enforce_eager", ctypes.c_int32),
        ("decode_kernel", ctypes.c_int32),
        ("cpu_kernels", ctypes.c_char_p),
        ("quantization", ctypes.c_char_p),
        ("chat_template", ctypes.c_char_p),
        ("max_queued_requests", ctypes.c_int64),
        ("speculative_config", ctypes.c_char_p),
    ]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_char_p),
        ("max_model_len", ctypes.c_int64),
        ("vocab_size", ctypes.c_int32),
        ("kv_cache_tokens", ctypes.c_int64),
    ]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class CSamplingParams(ctypes.Structure):
    _fields_ = [
        ("n", ctypes.c_int32),
        ("max_tokens", ctypes.c_int64),
        ("min_tokens", ctypes.c_int64),
        ("temperature", ctypes.c_double),
        ("top_p", ctypes.c_double),
        ("top_k", ctypes.c_int64),
        ("min_p", ctypes.c_double),
        ("repetition_penalty", ctypes.c_double),
        ("presence_penalty", ctypes.c_double),
        ("frequency_penalty", ctypes.c_double),
        ("has_seed", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("logprobs", ctypes.c_int32),
        ("ignore_eos", ctypes.c_int32),
        ("skip_special_tokens", ctypes.c_int32),
        ("include_stop_str_in_output", ctypes.c_int32),
        ("stop", ctypes.POINTER(ctypes.c_char_p)),
        ("num_stop", ctypes.c_size_t),
        ("stop_token_ids", c_int32_p),
        ("num_stop_token_ids", ctypes.c_size_t),
        ("logit_bias_ids", c_int32_p),
        ("logit_bias_values", ctypes.POINTER(ctypes.c_double)),
        ("num_logit_bias", ctypes.c_size_t),
        ("priority", ctypes.c_int32),
        ("cache_salt", ctypes.c_char_p),
    ]


class Usage(ctypes.Structure):
    _fields_ = [
        ("prompt_tokens", ctypes.c_int64),
        ("cached_prompt_tokens", ctypes.c_int64),
        ("completion_tokens", ctypes.c_int64),
    ]


class Output(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_int32),
        ("text", ctypes.c_void_p),
        ("text_length", ctypes.c_size_t),
        ("token_ids", c_int32_p),
        ("num_tokens", ctypes.c_size_t),
        ("logprobs", ctypes.POINTER(ctypes.c_float)),
        ("num_top_logprobs", ctypes.c_int32),
        ("top_token_ids", c_int32_p),
        ("top_logprobs", ctypes.POINTER(ctypes.c_float)),
        ("finish_reason", ctypes.c_int),
        ("stop_reason", ctypes.c_char_p),
        ("usage", Usage),
        ("request_finished", ctypes.c_int32),
        ("status", ctypes.c_int),
        ("error", ctypes.c_char_p),
    ]


TERN_OK = 0
TERN_ERR_FINISHED = 10
FINISH_REASONS = {0: None, 1: "stop", 2: "length", 3: "abort", 4: "error"}


def _find_library() -> str:
    explicit = os.environ.get("TERN_LIBRARY")
    if explicit:
        return explicit
    beside = pathlib.Path(__file__).with_name("libtern.so")
    if beside.exists():
        return str(beside)
    found = ctypes.util.find_library("tern")
    if found:
        return found
    raise ImportError("tern: libtern was not found: set TERN_LIBRARY to its path, install the tern wheel, "
                      "or install libtern (cmake --install)")


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(_find_library())
    status = ctypes.c_int
    handle = ctypes.c_void_p
    signatures = {
        "tern_version": (ctypes.c_char_p, []),
        "tern_abi_version": (ctypes.c_int, []),
        "tern_last_error": (ctypes.c_char_p, []),
        "tern_status_name": (ctypes.c_char_p, [status]),
        "tern_free": (None, [ctypes.c_void_p]),
        "tern_set_log_level": (status, [ctypes.c_char_p]),
        "tern_model_options_default": (ModelOptions, []),
        "tern_model_load": (status, [ctypes.c_char_p, ctypes.POINTER(ModelOptions), ctypes.POINTER(handle)]),
        "tern_model_free": (None, [handle]),
        "tern_model_get_info": (status, [handle, ctypes.POINTER(ModelInfo)]),
        "tern_tokenize": (status, [handle, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.POINTER(c_int32_p), ctypes.POINTER(ctypes.c_size_t)]),
        "tern_detokenize": (status, [handle, c_int32_p, ctypes.c_size_t, ctypes.c_int,
                                     ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]),
        "tern_apply_chat_template": (status, [handle, ctypes.POINTER(ChatMessage), ctypes.c_size_t, ctypes.c_int,
                                              ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
        "tern_sampling_params_default": (CSamplingParams, [handle]),
        "tern_submit": (status, [handle, c_int32_p, ctypes.c_size_t, ctypes.POINTER(CSamplingParams),
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(handle)]),
        "tern_request_next": (status, [handle, ctypes.c_int64, ctypes.POINTER(ctypes.POINTER(Output))]),
        "tern_request_cancel": (status, [handle]),
        "tern_request_free": (None, [handle]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    if lib.tern_abi_version() != ABI_VERSION:
        raise ImportError(f"tern: libtern has ABI {lib.tern_abi_version()}, this package needs {ABI_VERSION}")
    return lib


lib = _load()


def check(status: int) -> None:
    """Raises the TernError for a failed call, with the library's message."""
    if status != TERN_OK:
        name = lib.tern_status_name(status).decode()
        raise error_for(status, name, lib.tern_last_error().decode("utf-8", "replace"))


def take_string(pointer: ctypes.c_void_p, length: int) -> str:
    """A string the library allocated, decoded and freed."""
    try:
        return ctypes.string_at(pointer, length).decode("utf-8", "replace")
    finally:
        lib.tern_free(pointer)
