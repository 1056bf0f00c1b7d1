"""Core plugin: the built-in ``cpu`` pseudo-backend.

``cpu`` is always listed by :func:`litegpu.available_backends` and always
available.  Its delegate claims no node: with it (or with no delegate at all)
every node runs on the numpy reference interpreter.  It exists so that
``backend: [opencl, cpu]`` reads naturally in a configuration, so that the
``litegpu_backend`` test fixture covers the reference path, and so that core
registers its backend exactly the way third-party plugins do.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from typing import Any

from ._backend import BackendSpec
from ._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from ._errors import DelegateError
from .hookspecs import hookimpl

__all__ = ["CpuBackend", "CpuDelegate"]


class CpuDelegate(Delegate):
    """Declines every node, leaving it to the reference interpreter."""

    name = "cpu"
    #: Tells the partitioner to skip this delegate silently (no "cannot be handled" lines).
    passthrough = True

    def supports(self, node: NodeView) -> Support:
        return Support.no("the cpu backend leaves every node to the reference interpreter")

    def prepare(self, partition: PartitionSpec) -> DelegateKernel:
        raise DelegateError("the cpu pseudo-backend does not prepare partitions")

    def devices(self) -> list[str]:
        return CpuBackend().devices()


class CpuBackend(BackendSpec):
    name = "cpu"
    description = "numpy reference interpreter (always available)"
    is_gpu = False

    def __init__(self) -> None:
        from ._version import __version__

        self.version = __version__

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def devices(self) -> list[str]:
        cpu = platform.processor() or platform.machine() or "CPU"
        return [f"host {cpu} ({os.cpu_count() or 1} logical cores)"]

    def create_delegate(self, options: Mapping[str, Any]) -> Delegate:
        return CpuDelegate(options)


@hookimpl
def register_backends(register: Any) -> None:
    register(CpuBackend)
