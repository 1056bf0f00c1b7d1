"""The CPU reference kernels: importing this package registers them all.

Each kernel module registers its kernels into :data:`litegpu.cpu._registry.CPU_KERNELS`
when imported.  The list below is explicit on purpose: a module is listed once it
exists, so a typo or a missing file is an ImportError, never a silently missing op.
Modules are grouped by topic; add a new module to the group its ops belong to (one name
per line keeps merges clean).
"""

from __future__ import annotations

import importlib

#: topic -> kernel modules.  Import order matters in one place only: ``quantized`` (integer
#: kernels, and hybrid float-activation/int8-weight kernels that hand float nodes on to the
#: float kernels registered before them) must come after every float kernel module.
KERNEL_GROUPS: dict[str, tuple[str, ...]] = {
    "elementwise math and comparisons": (
        "elementwise",
        "compare",
        "complex",
        "strings",
    ),
    "activations and normalization": (
        "activations",
    ),
    "reductions, sorting, segments and cumulative sums": (
        "reduce",
        "sorting",
        "non_max_suppression",
    ),
    "shapes, layout, indexing and generators": (
        "layout",
        "slicing",
        "scatter",
        "padding",
        "stablehlo",
        "generate",
    ),
    "convolution, matrix products, pooling and resizing": (
        "conv",
        "matmul",
        "pooling",
        "resize",
    ),
    "recurrent networks and control flow": (
        "lstm",
        "control_flow",
    ),
    "formats: sparse tensors, (de)quantization, float16 activations, MediaPipe custom ops": (
        "sparse",
        "quantize",
        "float16",
        "mediapipe",
    ),
    "integer and hybrid kernels (must stay last)": (
        "quantized",
    ),
}

KERNEL_MODULES: tuple[str, ...] = tuple(m for group in KERNEL_GROUPS.values() for m in group)

for _name in KERNEL_MODULES:
    importlib.import_module(f"{__name__}.{_name}")
