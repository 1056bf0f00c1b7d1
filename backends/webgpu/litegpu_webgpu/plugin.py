"""The module litegpu's entry point names; kept import-light (wgpu loads only when used)."""

from __future__ import annotations

from typing import Any

import litegpu


@litegpu.hookimpl
def register_backends(register: Any) -> None:
    from ._backend import WebGPUBackend

    register(WebGPUBackend)
