"""The CPU reference kernels.

Each kernel module registers its kernels into :data:`litegpu.cpu._registry.CPU_KERNELS`
when imported.  Importing this package imports none of them: the registry imports a
kernel module the first time an op it holds is looked up (``cpu/_kernel_index.py`` says
which modules hold which (op, dtype); ``CPU_KERNELS.load_all()`` imports every one), so
``import litegpu`` stays cheap and a model loads only the kernels its ops need.

The list below is explicit on purpose: a module is listed once it exists, so a typo or a
missing file is an ImportError, never a silently missing op.  Modules are grouped by
topic; add a new module to the group its ops belong to (one name per line keeps merges
clean), then regenerate the index (``python -m litegpu.cpu._kernel_index --write``).
"""

from __future__ import annotations

#: topic -> kernel modules (relative to this package).  The order is the order of precedence
#: for built-in kernels of one (op, dtype), whatever order the modules are imported in: a
#: kernel registered by a later module wins.  It matters in one place only: the ``quantized``
#: modules (integer kernels, and hybrid float-activation/int8-weight kernels that hand float
#: nodes on to the float kernels before them) must come after every float kernel module.
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
    "integer and hybrid kernels (must stay last; hybrid after the float kernels it chains to)": (
        "quantized.conv",
        "quantized.elementwise",
        "quantized.pooling",
        "quantized.reduce",
        "quantized.activations",
        "quantized.quantize",
        "quantized.layout",
        "quantized.hybrid",
        "quantized.recurrent",
    ),
}

KERNEL_MODULES: tuple[str, ...] = tuple(m for group in KERNEL_GROUPS.values() for m in group)
