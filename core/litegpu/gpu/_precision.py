"""Precision policy: the storage type of each tensor and the accumulator type of each op.

Three modes (the ``precision`` option of a GPU backend):

``fp32``
    everything float32.
``fp16``
    activations and float constants stored as float16, arithmetic in float16
    (fastest; reductions over many terms lose accuracy).
``fp16_fp32acc``
    float16 storage, but every op that sums many terms accumulates in
    float32: convolutions (CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV,
    Convolution2DTransposeBias), FULLY_CONNECTED, BATCH_MATMUL and the
    reductions MEAN, SUM, SOFTMAX (its sum of exponentials),
    AVERAGE_POOL_2D and LSTM gates.  Elementwise ops stay float16.

On a device that can store halves but not compute in them (OpenCL without
``cl_khr_fp16``: ``DeviceInfo.fp16_storage``) both fp16 modes keep this storage
policy while the kernels compute everything in float32 (the storage-only half
kernel variant): ``fp16`` is then more accurate than its name, ``fp16_fp32acc``
exactly as described.

Non-float tensors (int32 shape/axis parameters, bool) keep their type.
Constants are converted once, at prepare (:meth:`PrecisionPolicy.constant`).

Mixed precision: in the fp16 modes a tensor marked ``GpuTensor.fp32`` is
stored in float32, and a node marked ``GpuNode.fp32`` computes in float32
(its kernel is rendered in ``fp32``, its constants stored in float32); the
kernels reading or writing a tensor stored in the other type convert on load
and store (``GpuOp.buffer_storage``).  The ``mixed_precision`` pass decides
the marks from the graph alone; in ``fp32`` they change nothing.
:func:`fp16_risks` lists constants whose magnitude exceeds float16's range
(65504) or whose non-zero values underflow to 0, for the compile report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._backend_options import PRECISIONS
from .._errors import ConfigError
from ._graph import GpuGraph, GpuNode, GpuTensor

__all__ = ["PRECISIONS", "FP32_ACCUMULATION_OPS", "PrecisionPolicy", "precision_policy", "fp16_risks",
           "FP16_MAX"]

FP16_MAX = 65504.0
_FP16_TINY = 2.0 ** -24  # smallest positive subnormal

#: ops that accumulate in float32 under ``fp16_fp32acc``
FP32_ACCUMULATION_OPS = frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "Convolution2DTransposeBias", "FULLY_CONNECTED",
    "BATCH_MATMUL", "MEAN", "SUM", "SOFTMAX", "AVERAGE_POOL_2D", "LSTM",
    "DW_PW_CONV_2D",  # a depthwise conv fused into a 1x1 conv (_passes/fuse_dw_pw)
    "PW_DW_CONV_2D",  # a 1x1 conv fused into the depthwise it feeds [-> 1x1] (_passes/fuse_pw_dw)
    "SQUEEZE_EXCITE_GATE",  # global average + 1x1 layers (_passes/squeeze_excite)
    "SIBLING_HEADS",  # fully connected / 1x1 heads reading one input (_passes/sibling_heads)
})


@dataclass(frozen=True)
class PrecisionPolicy:
    """Storage and accumulation types for one precision mode."""

    mode: str

    @property
    def float_storage(self) -> str:
        return "float32" if self.mode == "fp32" else "float16"

    @property
    def itemsize(self) -> int:
        return 4 if self.mode == "fp32" else 2

    def storage(self, tensor: GpuTensor) -> str:
        """Device element type of ``tensor``."""
        if tensor.dtype in ("float32", "float16", "bool"):
            return "float32" if tensor.fp32 else self.float_storage
        return tensor.dtype

    def tensor_itemsize(self, tensor: GpuTensor) -> int:
        """Bytes per element of ``tensor`` on the device."""
        return np.dtype(self.storage(tensor)).itemsize

    def node_precision(self, node: GpuNode) -> str:
        """The precision mode the kernel of ``node`` is rendered in."""
        return "fp32" if node.fp32 else self.mode

    def accumulator(self, node: GpuNode) -> str:
        """Type the kernel of ``node`` accumulates (and computes) in."""
        if self.mode == "fp32" or node.fp32:
            return "float32"
        if self.mode == "fp16_fp32acc" and node.op in FP32_ACCUMULATION_OPS:
            return "float32"
        return "float16"

    def constant(self, data: np.ndarray, node: GpuNode | None = None) -> np.ndarray:
        """A float constant in the storage type of ``node``'s constants (non-float constants unchanged)."""
        a = np.asarray(data)
        if a.dtype.kind == "f":
            return a.astype("float32" if node is not None and node.fp32 else self.float_storage)
        return a


def precision_policy(mode: str) -> PrecisionPolicy:
    """The policy for ``mode``; raises :class:`ConfigError` naming the valid values."""
    if mode not in PRECISIONS:
        raise ConfigError(f"unknown precision {mode!r}: expected one of {', '.join(PRECISIONS)}",
                          path="precision")
    return PrecisionPolicy(mode)


def fp16_risks(g: GpuGraph) -> list[str]:
    """Constants that float16 storage would distort: beyond +-65504 (become inf) or non-zero values
    below float16's smallest subnormal (become 0)."""
    out = []
    for t in sorted(g.tensors):
        x = g.tensors[t]
        if x.data is None or x.dtype not in ("float32", "float64") or x.sparsity is not None:
            continue
        a = np.abs(np.asarray(x.data, np.float64))
        if not a.size:
            continue
        big = int(np.count_nonzero(a > FP16_MAX))
        if big:
            out.append(f"constant {x.name!r}: {big} value(s) beyond the float16 range (max |x| = {a.max():.4g})")
        tiny = int(np.count_nonzero((a > 0) & (a < _FP16_TINY)))
        if tiny:
            out.append(f"constant {x.name!r}: {tiny} non-zero value(s) below float16's smallest subnormal "
                       "(stored as 0)")
    return out
