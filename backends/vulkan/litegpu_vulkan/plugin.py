"""The module litegpu's entry point names; kept import-light (libvulkan loads only when used)."""

from __future__ import annotations

from typing import Any

import litegpu


@litegpu.hookimpl
def register_backends(register: Any) -> None:
    from ._backend import VulkanBackend

    register(VulkanBackend)
