"""Dialect emitters for the neutral kernel language: OpenCL C, GLSL 4.50 (Vulkan) and WGSL.

The emitters (and the kernel language's parser nodes and checker they import) load on first use of
:data:`EMITTERS`: a warm start renders nothing, and what it reads of a dialect (the markers of
``_markers``) must not pay for them."""

from __future__ import annotations

from typing import Any

__all__ = ["KernelTemplateError", "EMITTERS"]


def __getattr__(name: str) -> Any:
    if name == "KernelTemplateError":  # the kernel language's (its import: the first rendering's, as above)
        from ..lgk.types import KernelTemplateError

        return KernelTemplateError
    #: ``EMITTERS``: dialect -> emitter, for the dialects ``litegpu.gpu.kernels.DIALECTS`` names
    if name == "EMITTERS":
        from .glsl import GLSLEmitter
        from .opencl import OpenCLEmitter
        from .wgsl import WGSLEmitter

        emitters = {"opencl": OpenCLEmitter, "glsl": GLSLEmitter, "wgsl": WGSLEmitter}
        globals()["EMITTERS"] = emitters
        return emitters
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
