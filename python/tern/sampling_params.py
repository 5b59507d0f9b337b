"""SamplingParams: what a request asks for, under vLLM's names and with vLLM's defaults."""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Any, Optional, Union

from tern import _capi


@dataclasses.dataclass
class SamplingParams:
    """Sampling parameters for one prompt, as vLLM's `SamplingParams`.

    Fields left at their defaults mean what they mean in vLLM (temperature 1, max_tokens 16); to start from
    the model's generation_config.json instead, use `LLM.get_default_sampling_params()`. Every field is
    honoured by the engine, and values are checked there: a bad one raises `TernValueError` naming it.

    `max_tokens=None` generates up to the context length. `logprobs=k` reports the sampled token's
    log-probability and the k most likely ones at each step (0..20). `logit_bias` maps token ids to a bias
    added to their logits. `priority` (lower runs first) and `cache_salt` (keeps prefix-cache entries apart)
    are the HTTP API's request fields."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, list[str]]] = None
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: Optional[dict[int, float]] = None
    priority: int = 0
    cache_salt: Optional[str] = None

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def to_c(self) -> tuple[_capi.CSamplingParams, list[Any]]:
        """The C struct, and the buffers it points into (keep them alive until tern_submit returns)."""
        c = _capi.CSamplingParams()
        c.n = _int("n", self.n)
        if self.max_tokens is not None and _int("max_tokens", self.max_tokens) == 0:
            raise _value_error("max_tokens must be at least 1, or None for up to the context length, got 0.")
        c.max_tokens = 0 if self.max_tokens is None else _int("max_tokens", self.max_tokens)
        c.min_tokens = _int("min_tokens", self.min_tokens)
        c.temperature = _float("temperature", self.temperature)
        c.top_p = _float("top_p", self.top_p)
        c.top_k = _int("top_k", self.top_k)
        c.min_p = _float("min_p", self.min_p)
        c.repetition_penalty = _float("repetition_penalty", self.repetition_penalty)
        c.presence_penalty = _float("presence_penalty", self.presence_penalty)
        c.frequency_penalty = _float("frequency_penalty", self.frequency_penalty)
        if self.seed is not None:
            seed = _int("seed", self.seed)
            if not 0 <= seed < 2**64:
                raise _value_error(f"seed must be in [0, 2**64), got {seed}.")
            c.has_seed, c.seed = 1, seed
        c.logprobs = -1 if self.logprobs is None else _int("logprobs", self.logprobs)
        c.ignore_eos = int(bool(self.ignore_eos))
        c.skip_special_tokens = int(bool(self.skip_special_tokens))
        c.include_stop_str_in_output = int(bool(self.include_stop_str_in_output))
        keep: list[Any] = []
        stops = self.stop_strings()
        for s in stops:
            if not isinstance(s, str):
                raise TypeError(f"stop must be a string or a list of strings, got {s!r}")
        if stops:
            array = (ctypes.c_char_p * len(stops))(*(s.encode() for s in stops))
            keep.append(array)
            c.stop, c.num_stop = array, len(stops)
        if self.stop_token_ids:
            ids = [_int("stop_token_ids", t) for t in self.stop_token_ids]
            array = (ctypes.c_int32 * len(ids))(*_int32s("stop_token_ids", ids))
            keep.append(array)
            c.stop_token_ids, c.num_stop_token_ids = array, len(ids)
        if self.logit_bias:
            ids = [_int("logit_bias", t) for t in self.logit_bias]
            values = [_float("logit_bias", v) for v in self.logit_bias.values()]
            id_array = (ctypes.c_int32 * len(ids))(*_int32s("logit_bias", ids))
            value_array = (ctypes.c_double * len(values))(*values)
            keep += [id_array, value_array]
            c.logit_bias_ids, c.logit_bias_values, c.num_logit_bias = id_array, value_array, len(ids)
        c.priority = _int("priority", self.priority)
        if self.cache_salt is not None:
            c.cache_salt = self.cache_salt.encode()
        return c, keep


def _value_error(message: str) -> Exception:
    from tern.errors import TernValueError

    return TernValueError(message, "invalid argument", 1)


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return value


def _float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    return float(value)


def _int32s(name: str, values: list[int]) -> list[int]:
    for v in values:
        if not -(2**31) <= v < 2**31:
            raise _value_error(f"{name}: token id {v} is out of range")
    return values
