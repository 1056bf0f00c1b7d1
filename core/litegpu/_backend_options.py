"""The data every backend shares: precision modes, common options, first-party names.

Data only (no registry, no configuration loading), so that the backend
registry (``_backend``), the configuration schema (``_config``) and the GPU
compiler (``gpu/``) can all import it without importing each other.
"""

from __future__ import annotations

from ._options import Option

__all__ = ["PRECISIONS", "COMMON_BACKEND_OPTIONS", "FIRST_PARTY_BACKENDS", "RESERVED_NAMES"]

#: The ``precision`` modes of a GPU backend (``gpu/_precision.py`` says what each means).
PRECISIONS = ("fp32", "fp16", "fp16_fp32acc")

#: Options every backend accepts (it may ignore those that mean nothing to it,
#: and may narrow or extend them through ``option_schema``).
COMMON_BACKEND_OPTIONS: dict[str, Option] = {
    "precision": Option.enum(
        *PRECISIONS, default="fp32",
        doc="arithmetic precision: fp32; fp16 storage and math; fp16 storage with fp32 accumulation",
    ),
    "device": Option.int(0, min=0, doc="index into the backend's device list"),
    "tuning": Option.enum(
        "none", "fast", "exhaustive", default="none",
        doc="kernel parameter tuning at prepare (workgroup sizes...): none (the heuristic; the default: a "
            "search costs seconds of cold start), a quick search, or all candidates (results are cached)",
    ),
    "quantization_simulation": Option.bool(
        True, doc="quantized models run in float on GPUs; snap each quantized result to its grid "
                  "(closest to the integer model); false: plain float between the model's QUANTIZE ops (faster)"
    ),
}

#: Backends this project ships as separate distributions: a configuration may
#: name them even where they are not installed (they are then skipped with a
#: "not installed" reason instead of failing validation).
FIRST_PARTY_BACKENDS = {
    "opencl": "litegpu-opencl",
    "webgpu": "litegpu-webgpu",
    "vulkan": "litegpu-vulkan",
}

#: Names a backend may not take: ``auto`` is a value of the ``backend`` key and
#: ``all`` the wildcard section of ``backends``.
RESERVED_NAMES = frozenset({"auto", "all"})
