"""The float view of quantized models: which quantized nodes the GPU path takes, and their tensors' views.

The GPU kernels compute in floats.  A quantized (int8/uint8) tensor becomes a
float tensor holding ``scale * (q - zero_point)``; constants are dequantized
once at prepare; every quantized result that is read again is snapped back to
its grid (``QDQ`` epilogue step, ``_passes/float_view``), so the float graph
follows the integer one to within a rounding step per op.  LiteRT's GPU
delegate runs quantized models the same way.  ``docs/gpu-compiler.md``
("Quantized models: the float view") explains the whole path.

This module answers the partitioner (:func:`quantized_reason`) and tells the
pass each tensor's :class:`~litegpu.gpu._graph.QuantView`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._graph import QuantView

__all__ = ["QUANT_OPS", "BYTE_OPS", "MOVE_OPS", "SAME_GRID_OPS", "GRID_KEEPING", "WEIGHTED", "QUANT_DTYPES", "tensor_view",
           "quantized_reason", "node_qdtype"]

#: integer types the float view takes for activations (int16: 16x8 models, int8 weights)
QUANT_DTYPES = ("int8", "uint8", "int16")

#: ops LiteRT runs on the raw bytes: input and output must share their quantization, and the
#: result keeps the input's grid (no QDQ needed); integer tensors without quantization are fine too
BYTE_OPS = frozenset({
    "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "PAD",
    "PADV2", "MIRROR_PAD", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "RESIZE_NEAREST_NEIGHBOR", "MAX_POOL_2D",
    "REDUCE_MAX", "REDUCE_MIN", "MAXIMUM", "MINIMUM",
})

#: byte ops that only move values: an output quantized differently from the input reinterprets the
#: same integers, which the float view follows with an affine rescale (``_passes/float_view``)
MOVE_OPS = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE", "STRIDED_SLICE",
                      "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "RESIZE_NEAREST_NEIGHBOR"})

#: ops LiteRT computes on the raw integers as if input and output shared one grid (it does not rescale)
SAME_GRID_OPS = BYTE_OPS | {"RESIZE_BILINEAR", "AVERAGE_POOL_2D"}

#: ops whose result stays on the grid when every operand shares the output's quantization
GRID_KEEPING = BYTE_OPS | {"CONCATENATION", "RELU"}

#: quantized ops the GPU path computes in its float view
QUANT_OPS = BYTE_OPS | frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB", "MUL",
    "AVERAGE_POOL_2D", "CONCATENATION", "SOFTMAX", "LOGISTIC", "TANH", "RELU", "RELU6", "RELU_N1_TO_1",
    "HARD_SWISH", "LEAKY_RELU", "PRELU", "RESIZE_BILINEAR", "MEAN", "SUM", "QUANTIZE", "DEQUANTIZE",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",  # int8 x int8 -> int16 cell: expand_sequence_lstm snaps h and c each step
    "LSTM",  # int8 full kernel: integer_sequence_lstm (bit-exact); quantized basic ones are declined by its check
})

#: op -> (activation input, weights input, bias input, output-channel axis of the weights)
WEIGHTED: dict[str, tuple[int, int, int, int]] = {
    "CONV_2D": (0, 1, 2, 0),
    "DEPTHWISE_CONV_2D": (0, 1, 2, 3),
    "FULLY_CONNECTED": (0, 1, 2, 0),
    "TRANSPOSE_CONV": (2, 1, 3, 0),
}

# an ADD/SUB whose float32 output carries quantization: LiteRT gives such outputs the inputs' type
# (some converted models, e.g. LiteRT's own add_quantized test models, rely on it)
_RETYPING = frozenset({"ADD", "SUB"})


def _quantized_int(t: Any) -> bool:
    return t is not None and t.dtype in ("int8", "uint8", "int16") and t.quantization is not None


def node_qdtype(op: str, tensors: Sequence[Any]) -> str | None:
    """The integer type of a node's quantized tensors (the first one's), or None for a float node."""
    for t in tensors:
        if _quantized_int(t) and not t.is_constant:
            return t.dtype
    return None


def tensor_view(t: Any, op: str = "", qdtype: str | None = None) -> QuantView | None:
    """The float view of tensor ``t`` (an IR or GPU tensor) read or written by ``op``: its quantization,
    identity (scale 1, zero point 0) for an integer tensor without one, or None for a float tensor.
    ``qdtype``: the node's quantized type, for LiteRT's re-typed float ADD/SUB results."""
    if t.dtype in ("int8", "uint8", "int16"):
        q = t.quantization
        if q is None:
            return QuantView(t.dtype, 1.0, 0)
        return QuantView(t.dtype, float(np.asarray(q.scale).reshape(-1)[0]),
                         int(np.asarray(q.zero_point).reshape(-1)[0]))
    if t.dtype == "float32" and op in _RETYPING and qdtype is not None and t.quantization is not None \
            and np.asarray(t.quantization.scale).size == 1:
        q = t.quantization
        return QuantView(qdtype, float(np.asarray(q.scale)[0]), int(np.asarray(q.zero_point)[0]))
    return None


def _per_tensor(t: Any) -> bool:
    return t.quantization is None or np.asarray(t.quantization.scale).size == 1


def quantized_reason(node: Any, params: dict[int, str]) -> str | None:
    """None for a node without quantized activations (the float checks apply); else "" when the float
    view takes it, or the reason it does not.  ``params``: the op's parameter inputs (index -> what)."""
    op = node.op
    name = op.name
    data = [t for i, t in enumerate(node.inputs) if t is not None and i not in params]
    tensors = [*data, *node.outputs]
    ints = [t for t in tensors if t.dtype in ("int8", "uint8", "int16")]
    qdtype = node_qdtype(name, tensors)
    if not ints and not (name == "QUANTIZE"):
        return None
    if name not in QUANT_OPS:
        return f"quantized {name} is not implemented on the GPU path"
    unquantized = [t for t in ints if t.quantization is None]
    if unquantized and name not in BYTE_OPS and name != "CONCATENATION":
        return f"{unquantized[0].dtype} tensor {unquantized[0].name!r} without quantization parameters"
    for t in ints:
        if not _per_tensor(t) and not t.is_constant:
            return f"per-channel quantized activation {t.name!r}"
    views = {id(t): tensor_view(t, name, qdtype) for t in tensors}
    if name == "QUANTIZE":
        x, y = node.inputs[0], node.outputs[0]
        if y.dtype not in QUANT_DTYPES or y.quantization is None or not _per_tensor(y):
            return f"QUANTIZE to {y.dtype}"
        if x.dtype not in ("float32", *QUANT_DTYPES):
            return f"QUANTIZE from {x.dtype}"
        return ""
    if name == "DEQUANTIZE":
        if node.outputs[0].dtype != "float32":
            return f"DEQUANTIZE to {node.outputs[0].dtype}"
        return ""
    for t in tensors:
        if views[id(t)] is None and not t.is_constant:
            return f"mixed float and quantized tensors ({t.name!r} is {t.dtype})"
    out = views[id(node.outputs[0])]
    if name in SAME_GRID_OPS and name not in MOVE_OPS:
        for t in tensors:
            v = views[id(t)]
            if v is not None and v != out:
                return f"quantized {name} whose operands and output are quantized differently"
    if name in WEIGHTED:
        _, wi, bi, axis = WEIGHTED[name]
        w = node.inputs[wi] if wi < len(node.inputs) else None
        if w is None or not w.is_constant:
            return f"quantized {name} with non-constant weights"
        if w.dtype not in QUANT_DTYPES or w.quantization is None:
            return f"quantized {name} with {w.dtype} weights"
        n = np.asarray(w.quantization.scale).size
        if n != 1 and (w.quantization.quantized_dimension != axis or n != w.shape[axis]):
            return f"quantized {name} with weights quantized along axis {w.quantization.quantized_dimension}"
        b = node.inputs[bi] if bi < len(node.inputs) else None
        if b is not None and b.dtype not in ("int32", "int64", "float32"):
            return f"quantized {name} with a {b.dtype} bias"
    return ""

