"""What generation returns, shaped like vLLM's outputs: RequestOutput holds one CompletionOutput per sample;
a streamed request yields StreamOutput deltas."""

from __future__ import annotations

import dataclasses
from typing import Optional, Union


@dataclasses.dataclass
class Logprob:
    """A token's log-probability under the raw model output; rank 1 is the most likely token."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# One dict per generated token: token id -> Logprob, for the sampled token and the top ones.
SampleLogprobs = list[dict[int, Logprob]]


@dataclasses.dataclass
class CompletionOutput:
    """One sample of a prompt, as vLLM's CompletionOutput."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None  # "stop", "length" or "abort"
    stop_reason: Union[int, str, None] = None  # the stop string or stop token id that ended it

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclasses.dataclass
class RequestOutput:
    """A prompt and its samples, as vLLM's RequestOutput."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0


@dataclasses.dataclass
class StreamOutput:
    """News about one sample of a streamed request: the new text (whole UTF-8 characters, stop strings
    withheld) and tokens since the sample's previous StreamOutput."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str]
    stop_reason: Union[int, str, None]
    finished: bool  # the request's last output
    prompt_tokens: int
    completion_tokens: int
