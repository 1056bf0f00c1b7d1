"""litegpu: run TensorFlow Lite / LiteRT models on GPUs through pluggable delegates."""

from __future__ import annotations

from ._gc import gc_paused as _gc_paused

# numpy's and litegpu's modules are thousands of objects: no cyclic collection while they import (_gc)
with _gc_paused():
    from ._backend import BackendInfo, BackendSpec
    from ._backend_loading import available_backends, load_delegate
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
    from ._plugins import get_plugins
    from ._reader import read_model
    from ._version import __version__
    from .compiled_model import CompiledModel
    from .cpu._registry import register_kernel
    from .hookspecs import hookimpl

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
    "hookimpl",
    "Config",
    "load_config",
    "load",
    "read_model",
]
