"""Exception types raised by litegpu.

Every error litegpu raises on purpose derives from :class:`LiteGPUError`, so an
application can catch them all at once.  The more specific types say *which*
input was at fault: the model, the configuration, a delegate, the cache.
``ModelError`` and ``ConfigError`` also derive from ``ValueError`` so code
written for LiteRT (which raises ``ValueError``/``RuntimeError``) keeps working.
"""

from __future__ import annotations

__all__ = [
    "LiteGPUError",
    "ModelError",
    "ConfigError",
    "DelegateError",
    "InterpreterError",
    "BackendUnavailableError",
    "UnknownBackendError",
    "UnsupportedOpError",
    "CacheError",
    "describe_failure",
]


class LiteGPUError(Exception):
    """Base class of every error litegpu raises on purpose."""


class ModelError(LiteGPUError, ValueError):
    """The .tflite model is malformed, inconsistent or uses something unsupported."""


class ConfigError(LiteGPUError, ValueError):
    """A configuration key, type or value is invalid.

    ``path`` is the dotted YAML path of the offending key (``backends.opencl.precision``),
    ``line`` the 1-based line in the YAML source when known.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        super().__init__(message)
        self.path = path
        self.line = line


class DelegateError(LiteGPUError, RuntimeError):
    """A delegate failed to prepare or run a partition."""


class InterpreterError(LiteGPUError, RuntimeError):
    """The interpreter was used out of order (``invoke`` before ``allocate_tensors``,
    a bad ``resize_tensor_input``) or a node failed while running.  LiteRT raises
    ``RuntimeError`` in these cases, hence the base."""


class BackendUnavailableError(DelegateError):
    """A backend is installed but cannot run here (no driver, no device...)."""


class UnknownBackendError(BackendUnavailableError, ValueError):
    """No backend of that name is installed (the message lists the installed ones)."""


class UnsupportedOpError(ModelError, RuntimeError):
    """No kernel exists for an operator (name, version, dtype) on the CPU."""


class CacheError(LiteGPUError):
    """A serialized cache entry is unusable (never raised to users: logged and ignored)."""


def describe_failure(e: BaseException) -> str:
    """What an unexpected exception from a kernel or the reader means, in words a user can act on
    (``KeyError: 'filter_height'`` becomes "a required option or field ('filter_height') is
    missing").  The exception itself stays chained (``raise ... from e``) for developers."""
    if isinstance(e, KeyError):
        key = e.args[0] if e.args else "?"
        return f"a required option or field ({str(key)[:40]!r}) is missing"
    if isinstance(e, IndexError):
        return "a tensor, option or dimension index is out of range"
    if isinstance(e, ZeroDivisionError):
        return "a size or option is zero where it must not be"
    if isinstance(e, (OverflowError, MemoryError)):
        return "a size or value is too large"
    if isinstance(e, (AttributeError, TypeError)):
        return "a required field is missing or has the wrong type"
    text = str(e)
    if isinstance(e, ValueError) and any(w in text for w in ("reshape", "broadcast", "shape", "size")):
        return "the tensor shapes are inconsistent"
    return "its tensors, shapes or options are inconsistent"
