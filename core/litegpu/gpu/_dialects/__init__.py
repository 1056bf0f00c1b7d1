"""Dialect emitters for the neutral kernel language: OpenCL C, GLSL 4.50 (Vulkan) and WGSL."""

from __future__ import annotations

from ..lgk.types import KernelTemplateError
from .glsl import GLSLEmitter
from .opencl import OpenCLEmitter
from .wgsl import WGSLEmitter

__all__ = ["KernelTemplateError", "EMITTERS"]

#: dialect -> emitter, for the dialects ``litegpu.gpu.kernels.DIALECTS`` names
EMITTERS = {"opencl": OpenCLEmitter, "glsl": GLSLEmitter, "wgsl": WGSLEmitter}
