"""litegpu: run TensorFlow Lite / LiteRT models on GPUs through pluggable delegates."""

from __future__ import annotations

from ._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from ._errors import (
    BackendUnavailableError,
    CacheError,
    ConfigError,
    DelegateError,
    InterpreterError,
    LiteGPUError,
    ModelError,
    UnsupportedOpError,
)
from ._interpreter import Interpreter, SignatureRunner
from ._reader import read_model
from .cpu._registry import register_kernel

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "Interpreter",
    "SignatureRunner",
    "Delegate",
    "DelegateKernel",
    "NodeView",
    "PartitionSpec",
    "Support",
    "LiteGPUError",
    "ModelError",
    "ConfigError",
    "DelegateError",
    "InterpreterError",
    "BackendUnavailableError",
    "UnsupportedOpError",
    "CacheError",
    "register_kernel",
    "read_model",
]
