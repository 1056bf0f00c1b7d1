"""litegpu: run TensorFlow Lite / LiteRT models on GPUs through pluggable delegates."""

from __future__ import annotations

from ._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from ._errors import (
    BackendUnavailableError,
    CacheError,
    ConfigError,
    DelegateError,
    LiteGPUError,
    ModelError,
    UnsupportedOpError,
)
from ._reader import read_model
from .cpu._registry import register_kernel

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "Delegate",
    "DelegateKernel",
    "NodeView",
    "PartitionSpec",
    "Support",
    "LiteGPUError",
    "ModelError",
    "ConfigError",
    "DelegateError",
    "BackendUnavailableError",
    "UnsupportedOpError",
    "CacheError",
    "register_kernel",
    "read_model",
]
