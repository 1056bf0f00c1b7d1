"""litegpu-webgpu: the WebGPU backend of litegpu (wgpu-py on Vulkan, Metal, D3D12 or Mesa lavapipe).

Importing this package does not import wgpu; the device module loads it on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._backend import WebGPUBackend
from ._version import VERSION as __version__

__all__ = ["WebGPUBackend", "WebGPUDelegate", "WebGPUDevice", "list_adapters", "__version__"]

#: loaded on first use, so that importing the package never loads wgpu or the GPU executor
_LAZY = {"WebGPUDelegate": "_delegate", "WebGPUDevice": "_device", "list_adapters": "_device"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
