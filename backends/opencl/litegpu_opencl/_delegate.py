"""The OpenCL delegate: the core's GPU executor over a CLDevice (nothing OpenCL-specific here)."""

from __future__ import annotations

from litegpu.gpu._runtime import GpuDelegate

from . import _device
from ._version import VERSION

__all__ = ["OpenCLDelegate"]


class OpenCLDelegate(GpuDelegate):
    """The shared GPU delegate on a :class:`CLDevice`.

    On a device without ``cl_khr_fp16`` the fp16 precisions keep fp16 storage and compute in fp32
    (storage-only half kernels: ``vload_half``/``vstore_half_rte``); ``half_math`` is then False and
    the first prepare says so at INFO level.  See the package docstring.
    """

    name = "opencl"

    @property  # type: ignore[override]
    def backend_version(self) -> str:
        """The cache entries' version: a partition's kernels and memory differ with ``_device.ONE_ALLOCATION``
        and ``_device.ARGUMENT_BUFFER`` (a cached kernel taking one base pointer cannot bind buffers in several
        allocations), and the built code with the build switches (``_device.switches_version``)."""
        switches = _device.switches_version()
        if not _device.ONE_ALLOCATION:
            return f"{VERSION}+allocations{switches}"
        return (VERSION if _device.ARGUMENT_BUFFER else f"{VERSION}+offsets") + switches
