"""The WebGPU delegate: the core's GPU executor over a WebGPUDevice (nothing WebGPU-specific here)."""

from __future__ import annotations

from litegpu.gpu._runtime import GpuDelegate

from ._version import VERSION

__all__ = ["WebGPUDelegate"]


class WebGPUDelegate(GpuDelegate):
    name = "webgpu"
    backend_version = VERSION
