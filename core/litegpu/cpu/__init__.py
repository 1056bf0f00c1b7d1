"""The CPU reference interpreter's kernels (numpy), registered in ``CPU_KERNELS`` on import."""

from __future__ import annotations

from importlib import import_module

from ._registry import CPU_KERNELS, register_kernel

__all__ = ["CPU_KERNELS", "register_kernel", "KERNEL_MODULES"]

# Kernel modules, imported for their @register_kernel side effects.
KERNEL_MODULES = [
    "elementwise",
    "compare",
    "activations",
    "reduce",
    "layout",
    "slicing",
    "padding",
    "generate",
]

for _name in KERNEL_MODULES:
    import_module(f"{__name__}.{_name}")
