"""Errors of the tern package: each carries the C API's status and message."""

from __future__ import annotations


class TernError(RuntimeError):
    """A call into libtern failed. `status` is the C API's status name ("invalid argument", ...), `code` its
    number, and the message is the library's."""

    def __init__(self, message: str, status: str = "internal error", code: int = 9) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class TernValueError(TernError, ValueError):
    """A bad argument or a value out of range (TERN_ERR_INVALID_ARGUMENT, TERN_ERR_OUT_OF_RANGE)."""


class TernNotFoundError(TernError, FileNotFoundError):
    """A model file, folder or token that should exist does not (TERN_ERR_NOT_FOUND)."""


_BY_CODE = {1: TernValueError, 2: TernNotFoundError, 5: TernValueError}


def error_for(code: int, status: str, message: str) -> TernError:
    return _BY_CODE.get(code, TernError)(message, status, code)
