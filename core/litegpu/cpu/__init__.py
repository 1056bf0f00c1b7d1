"""The CPU reference kernels.  Importing this package registers every built-in kernel."""

from __future__ import annotations

from importlib import import_module

from ._registry import CPU_KERNELS, KernelRegistry, NodeContext, Prepared, TensorSpec, register_kernel

__all__ = ["CPU_KERNELS", "KernelRegistry", "NodeContext", "Prepared", "TensorSpec", "register_kernel",
           "KERNEL_MODULES"]

# Modules holding built-in kernels (each registers its kernels on import).
KERNEL_MODULES = [
    "conv",
    "pooling",
    "resize",
    "quantize",
    "sparse",
    "matmul",
    "lstm",
    "control_flow",
    "mediapipe",
]

for _name in KERNEL_MODULES:
    import_module(f"{__name__}.{_name}")
