"""litegpu-opencl: the OpenCL backend of litegpu (ctypes on the ICD loader; PoCL, NVIDIA, AMD, Intel drivers).

Precision: ``fp32``, ``fp16``, ``fp16_fp32acc``.  With ``cl_khr_fp16`` the fp16 modes compute in
``half``.  Without it (NVIDIA's driver, PoCL) they still store every float tensor and constant as
fp16 (half the memory traffic) but compute in fp32: the kernels read and write their buffers with
``vload_half``/``vstore_half_rte``, core OpenCL built-ins.  There ``fp16`` means fp16 storage with
fp32 arithmetic (more accurate than half math), ``fp16_fp32acc`` is exactly its definition, and the
delegate logs this once, at INFO level, at its first prepare.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._backend import OpenCLBackend
from ._version import VERSION as __version__

__all__ = ["OpenCLBackend", "OpenCLDelegate", "CLDevice", "list_devices", "__version__"]

#: loaded on first use, so that importing the package never loads the OpenCL layer or the GPU executor
_LAZY = {"OpenCLDelegate": "_delegate", "CLDevice": "_device", "list_devices": "_platforms"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
