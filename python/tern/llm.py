"""LLM: a model loaded in this process, as vLLM's offline `LLM`: generate() and chat() batch their prompts
through the engine (all of them in flight at once), stream() yields one request's output as it is made."""

from __future__ import annotations

import ctypes
import itertools
import json
from typing import Any, Iterator, Optional, Sequence, Union

from tern import _capi
from tern.outputs import CompletionOutput, Logprob, RequestOutput, SampleLogprobs, StreamOutput
from tern.sampling_params import SamplingParams

# A prompt: text, {"prompt": text} or {"prompt_token_ids": [ids]}.
PromptType = Union[str, dict[str, Any]]
Message = dict[str, Any]

# How long one wait for output lasts before Python gets a chance to handle signals (Ctrl-C).
_POLL_MS = 200


class LLM:
    """A model and its engine, on the GPU or the CPU, loaded from a Hugging Face folder or a GGUF file.

    Engine options take the names of `tern serve`'s flags: `max_num_seqs`, `max_model_len`,
    `max_num_batched_tokens`, `kv_cache_memory` (bytes, or a size such as "512MiB"), `gpu_memory_utilization`,
    `block_size`, `enable_prefix_caching`, `threads`, `quantization` (CPU), `cpu_kernels`, `enforce_eager`,
    `async_scheduling`, `chat_template` (a Jinja source replacing the model's), `max_queued_requests` and
    `speculative_config` (vLLM's: a dict or its JSON, {"method": "ngram", "num_speculative_tokens": 4}: speculative
    decoding by prompt lookup, outputs unchanged).
    Loading failures raise TernError (TernNotFoundError for a missing model) with the engine's message.

    One LLM may be used from many threads at once. `close()` (or a `with` block) frees the engine; requests
    still streaming are cancelled."""

    def __init__(self, model: str, device: str = "auto", *, threads: int = 0,
                 kv_cache_memory: Union[int, str, None] = None, gpu_memory_utilization: Optional[float] = None,
                 max_num_seqs: Optional[int] = None, max_num_batched_tokens: Optional[int] = None,
                 max_model_len: Optional[int] = None, block_size: Optional[int] = None,
                 enable_prefix_caching: bool = True, async_scheduling: bool = True, enforce_eager: bool = False,
                 cpu_kernels: Optional[str] = None, quantization: Optional[str] = None,
                 chat_template: Optional[str] = None, max_queued_requests: int = 0,
                 speculative_config: Union[dict[str, Any], str, None] = None) -> None:
        self._model: Optional[ctypes.c_void_p] = None
        o = _capi.lib.tern_model_options_default()
        o.device = _text("device", device).encode()
        o.threads = threads
        o.kv_cache_bytes = _size("kv_cache_memory", kv_cache_memory)
        o.gpu_memory_utilization = gpu_memory_utilization or 0.0
        o.max_num_seqs = max_num_seqs or 0
        o.max_num_batched_tokens = max_num_batched_tokens or 0
        o.max_model_len = max_model_len or 0
        o.block_size = block_size or 0
        o.enable_prefix_caching = int(bool(enable_prefix_caching))
        o.async_scheduling = int(bool(async_scheduling))
        o.enforce_eager = int(bool(enforce_eager))
        if cpu_kernels is not None:
            o.cpu_kernels = _text("cpu_kernels", cpu_kernels).encode()
        if quantization is not None:
            o.quantization = _text("quantization", quantization).encode()
        if chat_template is not None:
            o.chat_template = _text("chat_template", chat_template).encode()
        o.max_queued_requests = max_queued_requests
        if speculative_config is not None:
            text = speculative_config if isinstance(speculative_config, str) else json.dumps(speculative_config)
            o.speculative_config = _text("speculative_config", text).encode()
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib.tern_model_load(_text("model", str(model)).encode(), ctypes.byref(o),
                                              ctypes.byref(handle)))
        self._model = handle
        self._ids = itertools.count()
        info = _capi.ModelInfo()
        _capi.check(_capi.lib.tern_model_get_info(self._model, ctypes.byref(info)))
        self.device: str = info.device.decode()
        self.max_model_len: int = info.max_model_len
        self.vocab_size: int = info.vocab_size

    # ---- lifetime ----

    def close(self) -> None:
        """Frees the engine; requests still running are cancelled. Calling it again does nothing."""
        if self._model is not None:
            _capi.lib.tern_model_free(self._model)
            self._model = None

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _handle(self) -> ctypes.c_void_p:
        if self._model is None:
            raise _capi.error_for(1, "invalid argument", "this LLM has been closed")
        return self._model

    # ---- text ----

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Text to token ids, as Hugging Face's tokenizer for the model."""
        data = _text("text", text).encode()
        ids = _capi.c_int32_p()
        n = ctypes.c_size_t()
        _capi.check(_capi.lib.tern_tokenize(self._handle(), data, len(data), int(add_special_tokens),
                                            ctypes.byref(ids), ctypes.byref(n)))
        try:
            return ids[: n.value]
        finally:
            _capi.lib.tern_free(ids)

    def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Token ids to text."""
        array = _int32_array("token_ids", token_ids)
        text = ctypes.c_void_p()
        length = ctypes.c_size_t()
        _capi.check(_capi.lib.tern_detokenize(self._handle(), array, len(array), int(skip_special_tokens),
                                              ctypes.byref(text), ctypes.byref(length)))
        return _capi.take_string(text, length.value)

    def apply_chat_template(self, messages: list[Message], add_generation_prompt: bool = True,
                            chat_template_kwargs: Optional[dict[str, Any]] = None) -> str:
        """Messages ({"role": ..., "content": ...}) rendered with the model's chat template."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts")
        entries = []
        for i, m in enumerate(messages):
            role, content = m.get("role"), m.get("content")
            if not isinstance(role, str):
                raise TypeError(f"messages[{i}]['role'] must be a string, got {role!r}")
            if content is not None and not isinstance(content, str):
                raise TypeError(f"messages[{i}]['content'] must be a string, got {type(content).__name__}")
            entries.append((role.encode(), None if content is None else content.encode()))
        array = (_capi.ChatMessage * len(entries))(*(_capi.ChatMessage(r, c) for r, c in entries))
        kwargs = None if chat_template_kwargs is None else json.dumps(chat_template_kwargs).encode()
        text = ctypes.c_void_p()
        _capi.check(_capi.lib.tern_apply_chat_template(self._handle(), array, len(entries),
                                                       int(add_generation_prompt), kwargs, ctypes.byref(text)))
        rendered = ctypes.string_at(text).decode("utf-8", "replace")
        _capi.lib.tern_free(text)
        return rendered

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's defaults with the model's generation_config.json on top (what generate() uses when given
        no SamplingParams)."""
        c = _capi.lib.tern_sampling_params_default(self._handle())
        return SamplingParams(temperature=c.temperature, top_p=c.top_p, top_k=c.top_k,
                              repetition_penalty=c.repetition_penalty)

    # ---- generation ----

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None) -> list[RequestOutput]:
        """Generates for every prompt at once (the engine batches them) and returns one RequestOutput per
        prompt, in order. `sampling_params` is one for all prompts or one per prompt."""
        batch = [prompts] if isinstance(prompts, (str, dict)) else list(prompts)
        encoded = [self._encode_prompt(p) for p in batch]
        return self._run_batch(encoded, sampling_params)

    def chat(self, messages: Union[list[Message], list[list[Message]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None, *,
             add_generation_prompt: bool = True,
             chat_template_kwargs: Optional[dict[str, Any]] = None) -> list[RequestOutput]:
        """Answers one conversation (a list of messages) or several (a list of such lists) through the chat
        template, batched like generate()."""
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        encoded = []
        for conversation in conversations:
            text = self.apply_chat_template(conversation, add_generation_prompt, chat_template_kwargs)
            encoded.append((text, self.tokenize(text, add_special_tokens=False)))
        return self._run_batch(encoded, sampling_params)

    def stream(self, prompt: Union[PromptType, list[Message]],
               sampling_params: Optional[SamplingParams] = None) -> "Stream":
        """Starts one request and returns an iterator of its StreamOutputs as the engine makes them. A list
        of messages goes through the chat template. Closing the iterator (or cancel()) cancels the request."""
        if isinstance(prompt, list):
            text = self.apply_chat_template(prompt)
            ids = self.tokenize(text, add_special_tokens=False)
        else:
            text, ids = self._encode_prompt(prompt)
        params = sampling_params or self.get_default_sampling_params()
        return Stream(self, _Request(self, ids, params), text, ids)

    def _encode_prompt(self, prompt: PromptType) -> tuple[Optional[str], list[int]]:
        if isinstance(prompt, str):
            return prompt, self.tokenize(prompt)
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                return prompt.get("prompt"), list(prompt["prompt_token_ids"])
            if isinstance(prompt.get("prompt"), str):
                return prompt["prompt"], self.tokenize(prompt["prompt"])
        raise TypeError(f"a prompt must be a string, {{'prompt': text}} or {{'prompt_token_ids': ids}}, "
                        f"got {prompt!r}")

    def _run_batch(self, encoded: list[tuple[Optional[str], list[int]]],
                   sampling_params: Union[SamplingParams, Sequence[SamplingParams], None]) -> list[RequestOutput]:
        if sampling_params is None:
            params = [self.get_default_sampling_params()] * len(encoded)
        elif isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(encoded)
        else:
            params = list(sampling_params)
            if len(params) != len(encoded):
                raise ValueError(f"{len(params)} sampling params for {len(encoded)} prompts")
        requests: list[_Request] = []
        try:
            for (_, ids), p in zip(encoded, params):
                requests.append(_Request(self, ids, p))
            results = []
            for (text, ids), p, request in zip(encoded, params, requests):
                samples = [_Sample(i) for i in range(p.n)]
                cached = 0
                for out in request.outputs():
                    samples[out.index].add(out, self, p)
                    cached = out.usage.cached_prompt_tokens
                results.append(RequestOutput(request.id, text, ids, [s.completion() for s in samples], True,
                                             cached))
            return results
        finally:
            for request in requests:
                request.free()


class Stream:
    """The outputs of one streamed request (LLM.stream), each a StreamOutput, ending with the one whose
    `finished` is set. Usable in a `with` block; leaving it, close() or cancel() cancels the request."""

    def __init__(self, llm: LLM, request: "_Request", prompt: Optional[str], prompt_token_ids: list[int]) -> None:
        self._llm = llm
        self._request = request
        self._outputs = request.outputs()
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.request_id = request.id

    def __iter__(self) -> Iterator[StreamOutput]:
        return self

    def __next__(self) -> StreamOutput:
        try:
            out = next(self._outputs)
        except StopIteration:
            self.close()
            raise
        return StreamOutput(out.index, out.text, out.token_ids, _logprobs(out, self._llm), out.finish_reason,
                            _stop_reason(out.stop_reason, self._request.params), out.request_finished,
                            out.usage.prompt_tokens, out.usage.completion_tokens)

    def cancel(self) -> None:
        """Ends the request; the iterator then yields its last output, with finish_reason "abort"."""
        self._request.cancel()

    def close(self) -> None:
        """Cancels the request if it still runs and frees it."""
        self._request.free()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class _Output:
    """One tern_output, copied out of the library's memory."""

    def __init__(self, c: _capi.Output) -> None:
        n = c.num_tokens
        self.index: int = c.index
        self.text: str = ctypes.string_at(c.text, c.text_length).decode("utf-8", "replace")
        self.token_ids: list[int] = c.token_ids[:n] if n else []
        self.sampled_logprobs: Optional[list[float]] = c.logprobs[:n] if c.logprobs else None
        k = c.num_top_logprobs
        self.top: list[list[tuple[int, float]]] = []
        if c.top_token_ids and k > 0:
            ids, lps = c.top_token_ids[: n * k], c.top_logprobs[: n * k]
            self.top = [list(zip(ids[i * k:(i + 1) * k], lps[i * k:(i + 1) * k])) for i in range(n)]
        self.finish_reason: Optional[str] = _capi.FINISH_REASONS.get(c.finish_reason)
        self.stop_reason: str = c.stop_reason.decode("utf-8", "replace") if c.stop_reason else ""
        self.usage = _capi.Usage(c.usage.prompt_tokens, c.usage.cached_prompt_tokens, c.usage.completion_tokens)
        self.request_finished: bool = bool(c.request_finished)
        self.status: int = c.status
        self.error: str = c.error.decode("utf-8", "replace") if c.error else ""


class _Request:
    """A submitted request (pull mode) and its handle, freed once."""

    def __init__(self, llm: LLM, prompt_token_ids: list[int], params: SamplingParams) -> None:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling_params must be SamplingParams, got {type(params).__name__}")
        self.params = params
        self.id = f"{next(llm._ids)}"
        c_params, keep = params.to_c()
        prompt = _int32_array("prompt_token_ids", prompt_token_ids)
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib.tern_submit(llm._handle(), prompt, len(prompt), ctypes.byref(c_params), None, None,
                                          ctypes.byref(handle)))
        del keep
        self._handle: Optional[ctypes.c_void_p] = handle

    def outputs(self) -> Iterator[_Output]:
        """The request's outputs until its last; raises the TernError of a request that failed."""
        pointer = ctypes.POINTER(_capi.Output)()
        while self._handle is not None:
            _capi.check(_capi.lib.tern_request_next(self._handle, _POLL_MS, ctypes.byref(pointer)))
            if not pointer:
                continue
            out = _Output(pointer.contents)
            if out.status != _capi.TERN_OK:
                raise _capi.error_for(out.status, _capi.lib.tern_status_name(out.status).decode(), out.error)
            yield out
            if out.request_finished:
                return

    def cancel(self) -> None:
        if self._handle is not None:
            _capi.check(_capi.lib.tern_request_cancel(self._handle))

    def free(self) -> None:
        if self._handle is not None:
            _capi.lib.tern_request_free(self._handle)
            self._handle = None


class _Sample:
    """One sample's outputs, gathered into a CompletionOutput."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.text: list[str] = []
        self.token_ids: list[int] = []
        self.logprobs: Optional[SampleLogprobs] = None
        self.cumulative: Optional[float] = None
        self.finish_reason: Optional[str] = None
        self.stop_reason: Union[int, str, None] = None

    def add(self, out: _Output, llm: LLM, params: SamplingParams) -> None:
        self.text.append(out.text)
        self.token_ids += out.token_ids
        if out.sampled_logprobs is not None:
            self.logprobs = (self.logprobs or []) + (_logprobs(out, llm) or [])
            self.cumulative = (self.cumulative or 0.0) + sum(out.sampled_logprobs)
        if out.finish_reason is not None:
            self.finish_reason = out.finish_reason
            self.stop_reason = _stop_reason(out.stop_reason, params)

    def completion(self) -> CompletionOutput:
        return CompletionOutput(self.index, "".join(self.text), self.token_ids, self.cumulative, self.logprobs,
                                self.finish_reason, self.stop_reason)


def _logprobs(out: _Output, llm: LLM) -> Optional[SampleLogprobs]:
    if out.sampled_logprobs is None:
        return None
    steps: SampleLogprobs = []
    for i, (token, logprob) in enumerate(zip(out.token_ids, out.sampled_logprobs)):
        top = out.top[i] if out.top else []
        entry = {t: Logprob(lp, rank + 1, llm.detokenize([t], skip_special_tokens=False))
                 for rank, (t, lp) in enumerate(top) if t >= 0}
        if token not in entry:
            entry[token] = Logprob(logprob, None, llm.detokenize([token], skip_special_tokens=False))
        steps.append(entry)
    return steps


def _stop_reason(reason: str, params: SamplingParams) -> Union[int, str, None]:
    # vLLM's stop_reason: the stop string, the stop token id (an int), or None for end-of-sequence.
    if not reason:
        return None
    if reason in params.stop_strings():
        return reason
    if reason.isdigit() and int(reason) in (params.stop_token_ids or []):
        return int(reason)
    return reason


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}")
    return value


def _size(name: str, value: Union[int, str, None]) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        units = {"": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "K": 10**3, "KB": 10**3, "M": 10**6,
                 "MB": 10**6, "G": 10**9, "GB": 10**9}
        number = value.rstrip("KMGiB")
        unit = value[len(number):]
        try:
            if unit in units:
                return int(float(number) * units[unit])
        except ValueError:
            pass
        raise ValueError(f"{name}: cannot read a size from {value!r} (try 2GiB or 512MiB)")
    raise TypeError(f"{name} must be a number of bytes or a size such as '2GiB', got {value!r}")


def _int32_array(name: str, values: Sequence[int]) -> "ctypes.Array[ctypes.c_int32]":
    values = list(values)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be a list of integers, got {v!r}")
        if not -(2**31) <= v < 2**31:
            raise ValueError(f"{name}: {v} is not a token id")
    return (ctypes.c_int32 * len(values))(*values)
