"""The CPU reference kernels: importing this package registers them all.

Each kernel module registers its kernels into :data:`litegpu.cpu._registry.CPU_KERNELS`
when imported.  The list below is explicit on purpose: a module is listed once it
exists, so a typo or a missing file is an ImportError, never a silently missing op.
Add new modules to the tuple of your group (one name per line keeps merges clean).
"""

from __future__ import annotations

import importlib

# kernels-a: elementwise, activations, reduce, layout
_KERNELS_A: tuple[str, ...] = (
    "elementwise",
    "compare",
    "activations",
    "reduce",
    "layout",
    "slicing",
    "padding",
    "generate",
)


# kernels-b: conv, pooling, resize, quantize, sparse, lstm, control_flow, mediapipe
_KERNELS_B: tuple[str, ...] = (
    "conv",
    "pooling",
    "resize",
    "quantize",
    "sparse",
    "matmul",
    "lstm",
    "control_flow",
    "mediapipe",
)


# other kernel modules.  "quantized" (integer kernels, and hybrid float-activation/int8-weight
# kernels that chain to the float kernels registered before them) must stay last.
_KERNELS_OTHER: tuple[str, ...] = (
    "quantized",
)

KERNEL_MODULES: tuple[str, ...] = _KERNELS_A + _KERNELS_B + _KERNELS_OTHER

for _name in KERNEL_MODULES:
    importlib.import_module(f"{__name__}.{_name}")
