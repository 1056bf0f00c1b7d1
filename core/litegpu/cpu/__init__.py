"""The CPU reference kernels: importing this package registers them all."""

from __future__ import annotations

from importlib import import_module

# Kernel modules, imported for their @register_kernel side effects.  "quantized" comes
# last: its hybrid (float activation, int8 weight) kernels chain to the float kernels.
KERNEL_MODULES = [
    "quantized",
]

for _name in KERNEL_MODULES:
    import_module(f"{__name__}.{_name}")
