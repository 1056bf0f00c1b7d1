"""litegpu: run TensorFlow Lite / LiteRT models on GPUs through pluggable delegates."""

from __future__ import annotations

from ._backend import BackendInfo, BackendSpec, available_backends, load_delegate
from ._config import Config, load_config
from ._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from ._errors import (
    BackendUnavailableError,
    CacheError,
    ConfigError,
    DelegateError,
    InterpreterError,
    LiteGPUError,
    ModelError,
    UnknownBackendError,
    UnsupportedOpError,
)
from ._interpreter import Interpreter, SignatureRunner
from ._load import load
from ._options import Option
from ._plugins import get_plugins, plugin_gpu_kernels
from ._reader import read_model
from .compiled_model import CompiledModel
from .cpu._registry import register_kernel
from .hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "Interpreter",
    "CompiledModel",
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
    "UnknownBackendError",
    "BackendSpec",
    "BackendInfo",
    "Option",
    "available_backends",
    "load_delegate",
    "get_plugins",
    "plugin_gpu_kernels",
    "hookimpl",
    "Config",
    "load_config",
    "load",
    "read_model",
]
