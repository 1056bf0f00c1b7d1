"""``litegpu.hardware_accelerator``: LiteRT's ``HardwareAccelerator`` flags (same names and values).

``GPU`` runs the model on a litegpu GPU backend chosen by the configuration's ``backend`` list
(``auto``: the first available GPU backend); ``CPU`` on litegpu's CPU interpreter; ``GPU | CPU``
lets nodes no GPU backend runs fall back to the CPU (with a WARNING naming them).  ``NPU`` has no
litegpu backend.
"""

from __future__ import annotations

import enum

__all__ = ["HardwareAccelerator"]


class HardwareAccelerator(enum.IntFlag):
    """Where a :class:`litegpu.compiled_model.CompiledModel` runs (bit flags, combine with ``|``)."""

    CPU = enum.auto()
    GPU = enum.auto()
    NPU = enum.auto()
