"""The GPU op table: one entry per op the GPU path knows, and everything derived from it.

Each entry holds the op's support check and lowering (``_lowering.py``), the kernel template it
renders (``core/litegpu/shaders/``, registry in ``_kernel_specs.py``), its constant parameter inputs,
and how it fuses: ``fuses="activation"`` (an activation the fusion pass folds into its producer's
epilogue), ``fuses="elementwise"`` (a binary op a convolution-like producer may take as a residual),
``act`` (a kernel's ``act`` slot computes it), ``chain`` (a ``binary`` kernel's unary ``chain``
computes it).  The reference the GPU results are tested against is the op's CPU kernel
(``litegpu.cpu``, registered under the same name), in numpy for the GPU graph in ``_reference.py``.

Derived here, and nowhere else: :data:`SUPPORTED_OPS` (what :func:`litegpu.gpu._lower.supports` may
accept, and the GPU columns of docs/support-matrix.md), :data:`PARAM_INPUTS`, the fusion sets the
passes read (:data:`ACTIVATIONS_FUSABLE`, :data:`ELEMENTWISE_FUSABLE`) and the epilogue slots'
domains in ``_capabilities`` (:data:`ACT_OPS`, :data:`CHAIN_OPS`, :func:`kernel_of`).

Adding a GPU op: one entry here (reusing a ``check_*``/``lower_*`` or adding one to
``_lowering.py``) and, if no template computes it yet, the template (docs/gpu-compiler.md shows one
worked example).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .._delegate import NodeView
from . import _lowering as lo
from ._graph import DW_PW_OP, QDQ_OP, GpuOp

__all__ = ["GpuOpEntry", "OPS", "SUPPORTED_OPS", "PARAM_INPUTS", "ACTIVATIONS_FUSABLE", "ELEMENTWISE_FUSABLE",
           "ACT_OPS", "CHAIN_OPS", "kernel_of"]


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


_CONV_PARAMS = {1: "weights", 2: "bias"}
_AXES = {1: "axes"}


def _unary(*, act: bool = False, chain: bool = True, fuses: str | None = None, claimed: bool = True) -> GpuOpEntry:
    return GpuOpEntry("unary", lo.lower_unary, act=act, chain=chain, fuses=fuses, claimed=claimed)


def _binary(*, fuses: str | None = None, params: Mapping[int, str] | None = None) -> GpuOpEntry:
    return GpuOpEntry("binary", lo.lower_binary, params=params or {}, fuses=fuses)


_TABLE: dict[str, GpuOpEntry] = {
    # convolutions and matrix products (take an epilogue)
    "CONV_2D": GpuOpEntry("conv2d", lo.lower_conv, lo.check_conv, _CONV_PARAMS),
    "DEPTHWISE_CONV_2D": GpuOpEntry("depthwise_conv2d", lo.lower_depthwise, lo.check_depthwise, _CONV_PARAMS),
    DW_PW_OP: GpuOpEntry("dw_pw_conv2d", lo.lower_dw_pw, claimed=False),
    "TRANSPOSE_CONV": GpuOpEntry("transpose_conv2d", lo.lower_transpose_conv, lo.check_transpose_conv,
                                 {0: "output shape", 1: "weights", 3: "bias"}),
    "Convolution2DTransposeBias": GpuOpEntry("transpose_conv2d", lo.lower_transpose_conv, lo.check_transpose_conv,
                                             _CONV_PARAMS),
    "FULLY_CONNECTED": GpuOpEntry("fully_connected", lo.lower_fc, lo.check_fc, _CONV_PARAMS),
    "BATCH_MATMUL": GpuOpEntry("batch_matmul", lo.lower_bmm, lo.check_bmm),
    "AVERAGE_POOL_2D": GpuOpEntry("pool2d", lo.lower_pool, lo.check_pool),
    "MAX_POOL_2D": GpuOpEntry("pool2d", lo.lower_pool, lo.check_pool),
    # binary elementwise (bin_<OP> in common.lgk)
    "ADD": _binary(fuses="elementwise"),
    "SUB": _binary(fuses="elementwise"),
    "MUL": _binary(fuses="elementwise"),
    "DIV": _binary(fuses="elementwise"),
    "MAXIMUM": _binary(fuses="elementwise"),
    "MINIMUM": _binary(fuses="elementwise"),
    "SQUARED_DIFFERENCE": _binary(),
    "POW": _binary(),
    "PRELU": _binary(params={1: "alpha"}),
    "LOGICAL_AND": _binary(),
    # unary elementwise (op_<OP> in common.lgk)
    "EXP": _unary(),
    "LOG": _unary(),
    "SQRT": _unary(),
    "RSQRT": _unary(),
    "ABS": _unary(),
    "NEG": _unary(),
    "SIN": _unary(),
    "COS": _unary(),
    "TANH": _unary(act=True, fuses="activation"),
    "LOGISTIC": _unary(act=True, fuses="activation"),
    "RELU": _unary(act=True, fuses="activation"),
    "RELU6": _unary(act=True, fuses="activation"),
    "RELU_N1_TO_1": _unary(act=True, fuses="activation"),
    "HARD_SWISH": _unary(act=True, fuses="activation"),
    "LEAKY_RELU": _unary(chain=False, fuses="activation"),  # needs its alpha: not chainable
    "ELU": _unary(fuses="activation"),
    "GELU": _unary(),
    "SQUARE": _unary(claimed=False),  # made by passes (x * x); the builtin is left to the CPU
    "SIGN_BIT": _unary(act=True, claimed=False),
    QDQ_OP: _unary(chain=False, claimed=False),  # a copy whose epilogue snaps to a quantized grid
    # reductions
    "MEAN": GpuOpEntry("reduce", lo.lower_reduce, params=_AXES),
    "SUM": GpuOpEntry("reduce", lo.lower_reduce, params=_AXES),
    "REDUCE_MAX": GpuOpEntry("reduce", lo.lower_reduce, params=_AXES),
    "REDUCE_MIN": GpuOpEntry("reduce", lo.lower_reduce, params=_AXES),
    "SOFTMAX": GpuOpEntry("softmax", lo.lower_softmax),
    # data movement
    "CONCATENATION": GpuOpEntry("concat", lo.lower_concat, lo.check_concat),
    "RESHAPE": GpuOpEntry("gather", lo.lower_gather, params={1: "shape"}),
    "SQUEEZE": GpuOpEntry("gather", lo.lower_gather),
    "EXPAND_DIMS": GpuOpEntry("gather", lo.lower_gather, params={1: "axis"}),
    "TRANSPOSE": GpuOpEntry("gather", lo.lower_gather, params={1: "permutation"}),
    "SLICE": GpuOpEntry("slice", lo.lower_slice, params={1: "begin", 2: "size"}),
    "STRIDED_SLICE": GpuOpEntry("slice", lo.lower_slice, lo.check_strided_slice,
                                {1: "begin", 2: "end", 3: "strides"}),
    "SPLIT": GpuOpEntry("slice", lo.lower_split, params={0: "axis"}),
    "SPLIT_V": GpuOpEntry("slice", lo.lower_split, params={1: "size_splits", 2: "axis"}),
    "PAD": GpuOpEntry("pad", lo.lower_pad, params={1: "paddings"}),
    "PADV2": GpuOpEntry("pad", lo.lower_pad, params={1: "paddings", 2: "pad value"}),
    "MIRROR_PAD": GpuOpEntry("pad", lo.lower_pad, params={1: "paddings"}),
    "DEPTH_TO_SPACE": GpuOpEntry("depth_to_space", lo.lower_space, lo.check_4d),
    "SPACE_TO_DEPTH": GpuOpEntry("space_to_depth", lo.lower_space, lo.check_4d),
    "RESIZE_BILINEAR": GpuOpEntry("resize", lo.lower_resize, lo.check_resize_bilinear, {1: "size"}),
    "RESIZE_NEAREST_NEIGHBOR": GpuOpEntry("resize", lo.lower_resize, lo.check_resize_nearest, {1: "size"}),
    # recurrent: the expand_lstm passes rewrite LSTM into LSTM_CELL nodes
    "LSTM": GpuOpEntry(None, None, lo.check_lstm, {2: "weights", 3: "bias"}),
    "LSTM_CELL": GpuOpEntry("lstm_cell", lo.lower_lstm_cell, claimed=False),
    # the expand_sequence_lstm pass unrolls it over time into the nodes above
    "UNIDIRECTIONAL_SEQUENCE_LSTM": GpuOpEntry(None, None, lo.check_sequence_lstm,
                                               {**{i: "weights" for i in range(1, 9)},
                                                **{i: "bias" for i in range(12, 16)},
                                                16: "weights", 17: "bias"}),
    # weights and quantization: folded at prepare or turned into QDQ steps by the float_view pass
    "DEQUANTIZE": GpuOpEntry(None, None),
    "DENSIFY": GpuOpEntry(None, None),
    "QUANTIZE": GpuOpEntry(None, None),
}

#: op name (builtin or custom code) -> its entry
OPS: Mapping[str, GpuOpEntry] = MappingProxyType(_TABLE)

#: every op name (builtin or custom code) :func:`litegpu.gpu._lower.supports` may accept
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
