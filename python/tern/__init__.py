"""tern in a Python program: the engine of `tern serve` loaded in this process through libtern's C API.

    from tern import LLM, SamplingParams
    llm = LLM(model="tests/data/ernie-tiny", device="cpu")
    outputs = llm.generate(["Hello, my name is"], SamplingParams(temperature=0, max_tokens=16))
    print(outputs[0].outputs[0].text)

LLM, SamplingParams and the outputs follow vLLM's offline API; errors are TernError exceptions carrying the
C API's status and message."""

from tern._capi import lib as _lib
from tern.errors import TernError, TernNotFoundError, TernValueError
from tern.llm import LLM, Stream
from tern.outputs import CompletionOutput, Logprob, RequestOutput, StreamOutput
from tern.sampling_params import SamplingParams

__version__: str = _lib.tern_version().decode()

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "StreamOutput", "Logprob", "Stream",
           "TernError", "TernValueError", "TernNotFoundError", "set_log_level", "__version__"]


def set_log_level(level: str) -> None:
    """The engine's log level on stderr, for the whole process: trace, debug, info, warn (default), error or off."""
    from tern import _capi

    _capi.check(_lib.tern_set_log_level(level.encode()))
