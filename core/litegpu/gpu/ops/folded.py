"""Ops with no kernel of their own: DEQUANTIZE and DENSIFY of constant weights fold at prepare into the
GPU nodes reading them (``_passes/fold_constants``); QUANTIZE (and quantized tensors generally) become QDQ
steps of the float view (``_passes/float_view``).  Their conditions are generic checks of ``supports``
(``gpu/_runtime.py``), so the entries hold no check.
"""

from __future__ import annotations

from .. import _reference_ops as rf
from .._kernel_specs import KernelSpec
from ._entry import GpuOpEntry

__all__ = ["OPS", "KERNELS"]

KERNELS: tuple[KernelSpec, ...] = ()

OPS: dict[str, GpuOpEntry] = {
    "DEQUANTIZE": GpuOpEntry(None, None, ref=rf.dequantize),
    "DENSIFY": GpuOpEntry(None, None, ref=rf.densify_op),
    "QUANTIZE": GpuOpEntry(None, None),
}
