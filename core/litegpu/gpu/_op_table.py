"""The GPU op table: one entry per op the GPU path knows, and everything derived from it.

Each entry holds the op's support check and lowering (``_lowering.py``), the kernel template it
renders (``core/litegpu/shaders/``, registry in ``_kernel_specs.py``), its constant parameter inputs,
and how it fuses: ``fuses="activation"`` (an activation the fusion pass folds into its producer's
epilogue), ``fuses="elementwise"`` (a binary op a convolution-like producer may take as a residual),
``act`` (a kernel's ``act`` slot computes it), ``chain`` (a ``binary`` kernel's unary ``chain``
computes it), and ``ref``, its numpy meaning on the GPU graph (``_reference_ops.py``; the evaluator
``_reference.evaluate`` that the compiler tests compare with LiteRT calls it).  The end-to-end GPU tests
compare with LiteRT and the op's CPU kernel (``litegpu.cpu``, registered under the same name).

Derived here, and nowhere else: :data:`SUPPORTED_OPS` (what :func:`supports` may
accept, and the GPU columns of docs/support-matrix.md), :data:`PARAM_INPUTS`, the fusion sets the
passes read (:data:`ACTIVATIONS_FUSABLE`, :data:`ELEMENTWISE_FUSABLE`) and the epilogue slots'
domains in ``_capabilities`` (:data:`ACT_OPS`, :data:`CHAIN_OPS`, :func:`kernel_of`).

Adding a GPU op: one entry here (reusing a ``check_*``/``lower_*``/``ref`` or adding one to
``_lowering.py``/``_reference_ops.py``) and, if no template computes it yet, the template (docs/gpu-compiler.md shows one
worked example).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._delegate import NodeView, Support
from .._ir import Subgraph, Tensor
from . import _lowering as lo
from . import _quant as qt
from . import _reference_ops as rf
from ._graph import DW_PW_OP, QDQ_OP, GpuOp
from ._lstm_integer import INTEGER_LSTM_OP, integer_lstm_reference, lower_integer_lstm
from ._lstm_integer import check_lstm as check_integer_or_float_lstm
from ._quant import quantized_reason

__all__ = ["GpuOpEntry", "OPS", "SUPPORTED_OPS", "PARAM_INPUTS", "ACTIVATIONS_FUSABLE", "ELEMENTWISE_FUSABLE",
           "ACT_OPS", "CHAIN_OPS", "kernel_of", "supports"]


@dataclass(frozen=True)
class GpuOpEntry:
    """What the GPU path knows about one op (see the module docstring)."""

    #: kernel template rendering it (``None``: no launch of its own, e.g. folded at prepare)
    kernel: str | None
    #: node -> list of kernel launches; ``None`` when a pass rewrites the op first
    lower: Callable[[lo.Lowerer], list[GpuOp]] | None
    #: node -> "" or the reason it cannot run on the GPU (beyond the generic checks of ``supports``)
    check: Callable[[NodeView], str] | None = None
    #: inputs that must be constant: input index -> what it is (for the decline reason)
    params: Mapping[int, str] = field(default_factory=dict)
    #: "activation" or "elementwise": the fusion pass may fold it into its producer's epilogue
    fuses: str | None = None
    #: a kernel's ``act`` slot computes it (no operand)
    act: bool = False
    #: a ``binary`` kernel's ``chain`` computes it
    chain: bool = False
    #: ``supports`` may accept it; False for ops only the passes create (QDQ, DW_PW_CONV_2D, LSTM_CELL...)
    claimed: bool = True
    #: its numpy meaning (``_reference_ops``): ``f(x, attrs)`` for the ``unary`` kernel, ``f(a, b)`` for
    #: ``binary``, else ``f(ctx) -> outputs``; ``None``: the reference evaluator cannot run it (QUANTIZE)
    ref: Callable[..., Any] | None = None
    #: options the lowering reads with no default: a node without them (its options table left out, or
    #: one of another op's type) is declined instead of failing at prepare
    options: tuple[str, ...] = ()


_CONV_PARAMS = {1: "weights", 2: "bias"}
_AXES = {1: "axes"}
_POOL_OPTIONS = ("filter_height", "filter_width", "padding")


def _unary(*, act: bool = False, chain: bool = True, fuses: str | None = None, claimed: bool = True,
           ref: rf.UnaryRef | None = None) -> GpuOpEntry:
    return GpuOpEntry("unary", lo.lower_unary, act=act, chain=chain, fuses=fuses, claimed=claimed, ref=ref)


def _binary(*, fuses: str | None = None, params: Mapping[int, str] | None = None,
            ref: rf.BinaryRef | None = None) -> GpuOpEntry:
    return GpuOpEntry("binary", lo.lower_binary, params=params or {}, fuses=fuses, ref=ref)


_TABLE: dict[str, GpuOpEntry] = {
    # convolutions and matrix products (take an epilogue)
    "CONV_2D": GpuOpEntry("conv2d", lo.lower_conv, lo.check_conv, _CONV_PARAMS, ref=rf.conv2d),
    "DEPTHWISE_CONV_2D": GpuOpEntry("depthwise_conv2d", lo.lower_depthwise, lo.check_depthwise, _CONV_PARAMS,
                                    ref=rf.depthwise_conv2d),
    DW_PW_OP: GpuOpEntry("dw_pw_conv2d", lo.lower_dw_pw, claimed=False, ref=rf.dw_pw_conv2d),
    "TRANSPOSE_CONV": GpuOpEntry("transpose_conv2d", lo.lower_transpose_conv, lo.check_transpose_conv,
                                 {0: "output shape", 1: "weights", 3: "bias"}, ref=rf.transpose_conv),
    "Convolution2DTransposeBias": GpuOpEntry("transpose_conv2d", lo.lower_transpose_conv, lo.check_transpose_conv,
                                             _CONV_PARAMS, ref=rf.transpose_conv_bias),
    "FULLY_CONNECTED": GpuOpEntry("fully_connected", lo.lower_fc, lo.check_fc, _CONV_PARAMS,
                                  ref=rf.fully_connected),
    "BATCH_MATMUL": GpuOpEntry("batch_matmul", lo.lower_bmm, lo.check_bmm, ref=rf.batch_matmul),
    "AVERAGE_POOL_2D": GpuOpEntry("pool2d", lo.lower_pool, lo.check_pool, ref=rf.average_pool,
                                  options=_POOL_OPTIONS),
    "MAX_POOL_2D": GpuOpEntry("pool2d", lo.lower_pool, lo.check_pool, ref=rf.max_pool, options=_POOL_OPTIONS),
    # binary elementwise (bin_<OP> in common.lgk)
    "ADD": _binary(fuses="elementwise", ref=np.add),
    "SUB": _binary(fuses="elementwise", ref=np.subtract),
    "MUL": _binary(fuses="elementwise", ref=np.multiply),
    "DIV": _binary(fuses="elementwise", ref=np.divide),
    "MAXIMUM": _binary(fuses="elementwise", ref=np.maximum),
    "MINIMUM": _binary(fuses="elementwise", ref=np.minimum),
    "SQUARED_DIFFERENCE": _binary(ref=rf.squared_difference),
    "POW": _binary(ref=np.power),
    "PRELU": _binary(params={1: "alpha"}, ref=rf.prelu),
    "LOGICAL_AND": _binary(ref=np.logical_and),
    # unary elementwise (op_<OP> in common.lgk)
    "EXP": _unary(ref=rf.exp),
    "LOG": _unary(ref=rf.log),
    "SQRT": _unary(ref=rf.sqrt),
    "RSQRT": _unary(ref=rf.rsqrt),
    "ABS": _unary(ref=rf.absolute),
    "NEG": _unary(ref=rf.neg),
    "SIN": _unary(ref=rf.sin),
    "COS": _unary(ref=rf.cos),
    "TANH": _unary(act=True, fuses="activation", ref=rf.tanh),
    "LOGISTIC": _unary(act=True, fuses="activation", ref=rf.sigmoid),
    "RELU": _unary(act=True, fuses="activation", ref=rf.relu),
    "RELU6": _unary(act=True, fuses="activation", ref=rf.relu6),
    "RELU_N1_TO_1": _unary(act=True, fuses="activation", ref=rf.relu_n1_to_1),
    "HARD_SWISH": _unary(act=True, fuses="activation", ref=rf.hard_swish),
    "LEAKY_RELU": _unary(chain=False, fuses="activation", ref=rf.leaky_relu),  # needs its alpha: not chainable
    "ELU": _unary(fuses="activation", ref=rf.elu),
    "GELU": _unary(ref=rf.gelu),
    "SQUARE": _unary(claimed=False, ref=rf.square),  # made by passes (x * x); the builtin is left to the CPU
    "SIGN_BIT": _unary(act=True, claimed=False, ref=rf.sign_bit),
    QDQ_OP: _unary(chain=False, claimed=False, ref=rf.copy),  # a copy whose epilogue snaps to a quantized grid
    # a hybrid op's input put on LiteRT's per-row int8 grid (the float view, _quant.py)
    qt.INPUT_RANGE_OP: GpuOpEntry("input_range", qt.lower_input_range, claimed=False, ref=qt.input_range_ref),
    qt.DYNAMIC_QDQ_OP: GpuOpEntry("dynamic_qdq", qt.lower_dynamic_qdq, claimed=False, ref=qt.dynamic_qdq_ref),
    qt.HYBRID_RESCALE_OP: GpuOpEntry("hybrid_rescale", qt.lower_hybrid_rescale, claimed=False,
                                     ref=qt.hybrid_rescale_ref),
    # reductions
    "MEAN": GpuOpEntry("reduce", lo.lower_reduce, params=_AXES, ref=rf.mean),
    "SUM": GpuOpEntry("reduce", lo.lower_reduce, params=_AXES, ref=rf.reduce_sum),
    "REDUCE_MAX": GpuOpEntry("reduce", lo.lower_reduce, params=_AXES, ref=rf.reduce_max),
    "REDUCE_MIN": GpuOpEntry("reduce", lo.lower_reduce, params=_AXES, ref=rf.reduce_min),
    "SOFTMAX": GpuOpEntry("softmax", lo.lower_softmax, ref=rf.softmax),
    # data movement
    "CONCATENATION": GpuOpEntry("concat", lo.lower_concat, lo.check_concat, ref=rf.concatenation),
    "RESHAPE": GpuOpEntry("gather", lo.lower_gather, params={1: "shape"}, ref=rf.reshape),
    "SQUEEZE": GpuOpEntry("gather", lo.lower_gather, ref=rf.reshape),
    "EXPAND_DIMS": GpuOpEntry("gather", lo.lower_gather, params={1: "axis"}, ref=rf.reshape),
    "TRANSPOSE": GpuOpEntry("gather", lo.lower_gather, params={1: "permutation"}, ref=rf.transpose),
    "SLICE": GpuOpEntry("slice", lo.lower_slice, params={1: "begin", 2: "size"}, ref=rf.slice_op),
    "STRIDED_SLICE": GpuOpEntry("slice", lo.lower_slice, lo.check_strided_slice,
                                {1: "begin", 2: "end", 3: "strides"}, ref=rf.slice_op),
    "SPLIT": GpuOpEntry("slice", lo.lower_split, params={0: "axis"}, ref=rf.split),
    "SPLIT_V": GpuOpEntry("slice", lo.lower_split, params={1: "size_splits", 2: "axis"}, ref=rf.split),
    "PAD": GpuOpEntry("pad", lo.lower_pad, params={1: "paddings"}, ref=rf.pad),
    "PADV2": GpuOpEntry("pad", lo.lower_pad, params={1: "paddings", 2: "pad value"}, ref=rf.pad),
    "MIRROR_PAD": GpuOpEntry("pad", lo.lower_pad, params={1: "paddings"}, ref=rf.pad),
    "DEPTH_TO_SPACE": GpuOpEntry("depth_to_space", lo.lower_space, lo.check_4d, ref=rf.depth_to_space,
                                 options=("block_size",)),
    "SPACE_TO_DEPTH": GpuOpEntry("space_to_depth", lo.lower_space, lo.check_4d, ref=rf.space_to_depth,
                                 options=("block_size",)),
    "RESIZE_BILINEAR": GpuOpEntry("resize", lo.lower_resize, lo.check_resize_bilinear, {1: "size"},
                                  ref=rf.resize_bilinear),
    "RESIZE_NEAREST_NEIGHBOR": GpuOpEntry("resize", lo.lower_resize, lo.check_resize_nearest, {1: "size"},
                                          ref=rf.resize_nearest),
    # recurrent: the expand_lstm passes rewrite LSTM into LSTM_CELL nodes
    # (an int8 full-kernel LSTM: the integer_sequence_lstm pass, one step of the bit-exact kernel)
    "LSTM": GpuOpEntry(None, None, check_integer_or_float_lstm, {2: "weights", 3: "bias"}, ref=rf.lstm),
    "LSTM_CELL": GpuOpEntry("lstm_cell", lo.lower_lstm_cell, claimed=False, ref=rf.lstm_cell),
    # the integer_sequence_lstm pass makes it of a full-integer UNIDIRECTIONAL_SEQUENCE_LSTM (bit-exact)
    INTEGER_LSTM_OP: GpuOpEntry("lstm_int8", lower_integer_lstm, claimed=False, ref=integer_lstm_reference),
    # the expand_sequence_lstm pass unrolls it over time into the nodes above
    "UNIDIRECTIONAL_SEQUENCE_LSTM": GpuOpEntry(None, None, check_integer_or_float_lstm,
                                               {**{i: "weights" for i in range(1, 9)},
                                                **{i: "bias" for i in range(12, 16)},
                                                16: "weights", 17: "bias"}, ref=rf.sequence_lstm),
    # weights and quantization: folded at prepare or turned into QDQ steps by the float_view pass
    "DEQUANTIZE": GpuOpEntry(None, None, ref=rf.dequantize),
    "DENSIFY": GpuOpEntry(None, None, ref=rf.densify_op),
    "QUANTIZE": GpuOpEntry(None, None),
}

#: op name (builtin or custom code) -> its entry
OPS: Mapping[str, GpuOpEntry] = MappingProxyType(_TABLE)

#: every op name (builtin or custom code) :func:`supports` may accept
SUPPORTED_OPS = frozenset(op for op, e in OPS.items() if e.claimed)
#: ops whose listed inputs are parameters that must be constant: op -> {input index: what it is}
PARAM_INPUTS: Mapping[str, Mapping[int, str]] = MappingProxyType({op: e.params for op, e in OPS.items() if e.params})
#: unary activations the fusion pass folds into their producer's epilogue
ACTIVATIONS_FUSABLE = frozenset(op for op, e in OPS.items() if e.fuses == "activation")
#: binary ops that can become an epilogue step of a convolution-like node
ELEMENTWISE_FUSABLE = frozenset(op for op, e in OPS.items() if e.fuses == "elementwise")
#: activations a kernel's ``act`` slot takes (PRELU, which needs its alpha, aside)
ACT_OPS = frozenset(op for op, e in OPS.items() if e.act)
#: unary ops a ``binary`` kernel's ``chain`` takes
CHAIN_OPS = frozenset(op for op, e in OPS.items() if e.chain)


def kernel_of(op: str) -> str | None:
    """The template kernel computing ``op``, or None."""
    e = OPS.get(op)
    return e.kernel if e is not None else None


# ---------------------------------------------------------------------------------------------------------
# supports: the generic GPU checks, then the entry's own check
# ---------------------------------------------------------------------------------------------------------


def _constant_like(sg: Subgraph, t: int, depth: int = 0) -> bool:
    """A constant, or made from one by DEQUANTIZE/DENSIFY (folded at prepare)."""
    if t < 0:
        return True
    if sg.tensors[t].is_constant:
        return True
    if depth > 4:
        return False
    for op in sg.operators:
        if t in op.outputs:
            return op.name in ("DEQUANTIZE", "DENSIFY") and bool(op.inputs) and _constant_like(sg, op.inputs[0],
                                                                                              depth + 1)
    return False


def _float_like(t: Tensor) -> bool:
    return t.dtype in ("float32", "float16")


def supports(node: NodeView) -> Support:
    """Can the GPU path run ``node``?  Never raises; declines with a reason in words."""
    try:
        return _supports(node)
    except Exception as e:  # a malformed node is declined, the CPU path reports it properly
        return Support.no(f"could not analyse the node: {e}")


def _supports(node: NodeView) -> Support:
    op = node.op
    name = op.name
    if name not in SUPPORTED_OPS:
        return Support.no(f"{name} is not implemented on the GPU path")
    sg = node.subgraph
    ins = [t for t in node.inputs if t is not None]
    for t in (*ins, *node.outputs):
        if not t.has_rank:
            return Support.no(f"tensor {t.name!r} has unknown rank")
        if len(t.shape) > 4:
            return Support.no(f"rank {len(t.shape)} tensors")
        if t.is_dynamic and not t.is_constant:
            return Support.no(f"dynamic shape ({t.name!r} has signature {list(t.shape_signature)})")
        if 0 in t.shape and not t.is_constant:
            return Support.no(f"empty tensor {t.name!r}")
    missing = [k for k in OPS[name].options if k not in op.options]
    if missing:
        return Support.no(f"{name} without its {', '.join(missing)} option"
                          f"{'s' if len(missing) > 1 else ''} (no {name} options table in the model)")
    params = PARAM_INPUTS.get(name, {})
    for i, what in params.items():
        if i < len(op.inputs) and op.inputs[i] >= 0 and not _constant_like(sg, op.inputs[i]):
            return Support.no(f"{name} with a non-constant {what}")

    # quantized activations: the float view (``_quant``) decides
    quant = quantized_reason(node, params)
    if quant is not None:
        if quant:
            return Support.no(quant)
        check = OPS[name].check
        reason = check(node) if check is not None else ""
        return Support.no(reason) if reason else Support.yes()

    # data types: activations are float (bool for LOGICAL_AND); parameters may be int32
    if name in ("DEQUANTIZE", "DENSIFY"):
        src = node.inputs[0]
        if src is None or not _constant_like(sg, op.inputs[0]):
            return Support.no(f"{name} of a non-constant tensor (only constant weights fold away)")
        if node.outputs[0].dtype not in ("float32", "float16"):
            return Support.no(f"{name} to {node.outputs[0].dtype}")
        # It has no kernel: it folds into the GPU nodes that read it.  When a reader stays on the CPU
        # (or the value is a model output) a partition would have to produce it: decline instead
        # (constant folding, on by default, has usually evaluated it before the delegates are asked).
        out = op.outputs[0]
        if out in sg.outputs:
            return Support.no(f"{name} output {node.outputs[0].name!r} is a model output (it only folds into "
                              "GPU nodes)")
        for reader in sg.operators:
            if out in reader.inputs and reader.name not in ("DEQUANTIZE", "DENSIFY"):
                view = NodeView(reader, tuple(sg.tensors[i] if i >= 0 else None for i in reader.inputs),
                                tuple(sg.tensors[i] for i in reader.outputs if i >= 0), sg, node.model)
                why = _supports(view)
                if not why:
                    return Support.no(f"{name} folds into the GPU nodes reading it, but {reader.name} stays on "
                                      f"the CPU ({why.reason})")
        return Support.yes()
    runtime = [(i, t) for i, t in enumerate(node.inputs) if t is not None and i not in params]
    for i, t in runtime + [(-1, t) for t in node.outputs]:
        if name == "LOGICAL_AND":
            if t.dtype != "bool":
                return Support.no(f"LOGICAL_AND of {t.dtype} tensors")
            continue
        if t.quantization is not None and t.dtype in ("int8", "uint8", "int16"):
            return Support.no(f"quantized {t.dtype} activations (the GPU path computes in float)")
        if t.dtype == "int32" or t.dtype == "int64":
            return Support.no(f"{t.dtype} tensors")
        if not _float_like(t) and not (t.is_constant or _constant_like(sg, op.inputs[i] if i >= 0 else -1)):
            return Support.no(f"{t.dtype} tensors")
    for i, what in params.items():
        if what in ("weights", "bias", "alpha") and i < len(node.inputs) and node.inputs[i] is not None:
            t = node.inputs[i]
            hybrid = what == "weights" and t.is_constant and t.dtype in ("int8", "uint8") \
                and t.quantization is not None  # dynamic-range: dequantized at prepare (float_view)
            if t.dtype not in ("float32", "float16") and not hybrid and not _dequantized(sg, op.inputs[i]):
                return Support.no(f"{name} with {t.dtype} {what}")
    check = OPS[name].check
    if check is not None:
        reason = check(node)
        if reason:
            return Support.no(reason)
    return Support.yes()


def _dequantized(sg: Subgraph, t: int) -> bool:
    return not sg.tensors[t].is_constant and _constant_like(sg, t)
