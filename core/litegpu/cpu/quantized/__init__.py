"""Integer (quantized) CPU kernels, bit-faithful to LiteRT's reference kernels.

Importing the package registers int8 / uint8 / int16 kernels for the ops in its
modules, and the dynamic-range (hybrid) kernels, which chain to the float kernel
registered before them for float weights (see :mod:`.hybrid`).
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["MODULES"]

MODULES = ("conv", "elementwise", "pooling", "reduce", "activations", "quantize", "layout", "hybrid", "recurrent")

for _name in MODULES:
    import_module(f"{__name__}.{_name}")
