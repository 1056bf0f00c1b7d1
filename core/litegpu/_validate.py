"""Node checks LiteRT makes before running a model, made here at plan time (before any kernel,
CPU or delegate, sees the node), so a model LiteRT rejects is refused with a ModelError naming
the node instead of producing numbers.

Each rule is one function of the node's tensors and options; :func:`check_node` runs the ones
that apply to the op.  Kernels keep their own shape checks; these are the rules that sat in no
kernel (strides, dilations, per-channel zero points, weights with no data, dtypes per op).
"""

from __future__ import annotations

from collections.abc import Sequence

from ._errors import ModelError
from ._ir import Operator, Subgraph, Tensor

__all__ = ["check_node"]

_INT16_MAX = 32767
_STRIDED = {
    "CONV_2D": ("stride_h", "stride_w", "dilation_h_factor", "dilation_w_factor"),
    "DEPTHWISE_CONV_2D": ("stride_h", "stride_w", "dilation_h_factor", "dilation_w_factor"),
    "TRANSPOSE_CONV": ("stride_h", "stride_w"),
    "AVERAGE_POOL_2D": ("stride_h", "stride_w", "filter_height", "filter_width"),
    "MAX_POOL_2D": ("stride_h", "stride_w", "filter_height", "filter_width"),
    "L2_POOL_2D": ("stride_h", "stride_w", "filter_height", "filter_width"),
    "CONV_3D": ("stride_d", "stride_h", "stride_w", "dilation_d_factor", "dilation_h_factor", "dilation_w_factor"),
}
# Ops whose weights (input index) must have data: a constant, a graph input or another node's output.
_WEIGHTS = {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "FULLY_CONNECTED": 1, "TRANSPOSE_CONV": 1, "CONV_3D": 1}
_BOOL_ONLY = {"LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT"}


def _options(op: Operator, where: str) -> None:
    keys = _STRIDED.get(op.opcode)
    if not keys:
        return
    for k in keys:
        v = op.options.get(k, 1)
        if not isinstance(v, int) or not 1 <= v <= _INT16_MAX:
            raise ModelError(f"{where}: option {k} is {v!r}; it must be between 1 and {_INT16_MAX} "
                             "(LiteRT refuses this model too)")


def _weights(op: Operator, ins: Sequence[Tensor | None], sg: Subgraph, produced: set[int], where: str) -> None:
    k = _WEIGHTS.get(op.opcode)
    if k is None or k >= len(ins) or ins[k] is None:
        return
    t = ins[k]
    if t.data is None and not t.is_variable and t.index not in produced and t.index not in sg.inputs:
        raise ModelError(f"{where}: weights tensor {t.index} ('{t.name}') has no data: its buffer "
                         f"{t.buffer} is empty and no node or model input provides it")
    q = t.quantization
    if q is not None and t.dtype in ("int8", "int4", "int16") and q.zero_point is not None and len(q.zero_point) > 1:
        if any(int(z) != 0 for z in q.zero_point):
            raise ModelError(f"{where}: weights tensor {t.index} ('{t.name}') is quantized per channel with "
                             "non-zero zero points; per-channel weights must have zero points of 0")


def _bool_inputs(op: Operator, ins: Sequence[Tensor | None], where: str) -> None:
    if op.opcode in _BOOL_ONLY:
        for k, t in enumerate(ins):
            if t is not None and t.dtype != "bool":
                raise ModelError(f"{where}: input {k} ('{t.name}') is {t.dtype}; {op.opcode} takes bool tensors")


def _transpose_conv_shape(op: Operator, ins: Sequence[Tensor | None], where: str) -> None:
    if op.opcode != "TRANSPOSE_CONV" or len(ins) < 3 or any(t is None for t in ins[:3]):
        return
    shape_t, weights, x = ins[0], ins[1], ins[2]
    if shape_t.data is None:
        return  # a dynamic output shape: the kernel checks it at invoke
    out = [int(d) for d in shape_t.data.reshape(-1)]
    if len(out) != 4 or any(d <= 0 for d in out):
        raise ModelError(f"{where}: output_shape {out} must be 4 positive dimensions")
    if x.shape and out[0] != x.shape[0]:
        raise ModelError(f"{where}: output_shape batch {out[0]} differs from the input's {x.shape[0]}")
    if weights.shape and out[3] != weights.shape[0]:
        raise ModelError(f"{where}: output_shape channels {out[3]} differ from the weights' output channels "
                         f"{weights.shape[0]}")



def check_node(op: Operator, ins: Sequence[Tensor | None], sg: Subgraph, produced: set[int], where: str) -> None:
    """Raise :class:`ModelError` when ``op`` breaks a rule LiteRT enforces (``where`` names the node)."""
    _options(op, where)
    _weights(op, ins, sg, produced, where)
    _bool_inputs(op, ins, where)
    _transpose_conv_shape(op, ins, where)
