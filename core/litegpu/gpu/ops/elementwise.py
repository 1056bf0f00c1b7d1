"""Elementwise ops: the binary ones (``bin_<OP>`` in ``shaders/common.lgk``, kernel ``binary``) and the
unary ones (``op_<OP>``, kernel ``unary``), both in ``shaders/elementwise.lgk``.

Adding one whose kernel exists is one entry here plus its ``op_``/``bin_`` function in ``common.lgk``
(``_kernel_specs.UNARY_OPS``/``BINARY_OPS`` read the names from the template).  The entries also say how
each fuses: ``fuses="activation"`` / ``"elementwise"``, ``act`` (a kernel's ``act`` slot computes it),
``chain`` (a ``binary`` kernel's unary ``chain`` computes it).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import _reference_ops as rf
from .._graph import QDQ_OP, GpuOp
from .._kernel_specs import (
    ACT_NO_PRELU,
    ACTIVATIONS,
    BINARY_OPS,
    CHANNELS,
    QDQ,
    UNARY_OPS,
    KernelSpec,
    Opt,
    boolean,
    spec,
)
from ._entry import GpuOpEntry, Lowerer

__all__ = ["OPS", "KERNELS"]


def lower_binary(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    a, b_ = n.inputs[0], n.inputs[1]
    y = n.outputs[0]
    opts, operands = lw.epilogue()
    params = lw.dims(y)
    lw.tensor_or_const("lhs", a)
    options = {"op": n.op, **opts}
    rb = lw.g.tensors[b_]
    if rb.is_constant and rb.size == 1:
        options["rhs"] = "scalar"
        params["R_VALUE"] = float(np.asarray(rb.data).reshape(-1)[0])
    else:
        lw.tensor_or_const("rhs", b_)
        params.update(lw.dims(b_, "R_"))
        if n.attrs.get("zero_extend_rhs"):  # rhs has fewer channels, zero past them (_passes/channel_pad)
            options["rhs_channels"] = "fewer"
    params.update(lw.dims(a, "L_"))
    for e in operands:  # the residual op's tensor (the only operand a binary epilogue binds)
        lw.bind("res", e.operand)
    lw.bind("dst", y)
    return [lw.op("binary", options, params)]


def lower_unary(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    op = n.op
    if op == "GELU" and n.attrs.get("approximate"):
        op = "GELU_TANH"
    if op == QDQ_OP:
        op = "NONE"  # a copy; the QDQ step (if any) is its epilogue
    opts, _ = lw.epilogue()
    lw.bind("src", n.inputs[0])
    lw.bind("dst", n.outputs[0])
    params = {**lw.dims(n.outputs[0]), "alpha": float(n.attrs.get("alpha", 0.0))}
    return [lw.op("unary", {"op": op, **opts}, params)]


# ---------------------------------------------------------------------------------------------------------
# kernels (shaders/elementwise.lgk) and table entries
# ---------------------------------------------------------------------------------------------------------

KERNELS: tuple[KernelSpec, ...] = (
    spec("unary", "elementwise.lgk", "y = chain(op(x)); LEAKY_RELU uses param alpha",
         {"op": Opt("NONE", UNARY_OPS), "chain": Opt((), UNARY_OPS, many=True), "qdq": QDQ},
         [{"op": op} for op in UNARY_OPS] + [{"op": "EXP", "chain": ("RELU", "TANH")}, {"op": "NONE", "qdq": True},
                                             {"op": "LOGISTIC", "qdq": True}]),
    spec("binary", "elementwise.lgk", "y = act(op(a, b)) with BHWC broadcasting; b may be a scalar param",
         {"op": Opt("ADD", BINARY_OPS), "act": ACT_NO_PRELU, "rhs": Opt("tensor", ("tensor", "scalar")),
          "chain": Opt((), UNARY_OPS, many=True), "qdq": QDQ, "rhs_channels": CHANNELS,
          "residual": Opt("NONE", ("NONE", "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM")),
          "residual_reverse": boolean()},
         [{"op": op} for op in BINARY_OPS]
         + [{"op": "ADD", "act": a} for a in ACTIVATIONS[1:]]
         + [{"op": "MUL", "rhs": "scalar"}, {"op": "SUB", "rhs": "scalar", "chain": ("ABS",)},
            {"op": "ADD", "act": "RELU", "qdq": True}, {"op": "MUL", "rhs": "scalar", "qdq": True},
            {"op": "ADD", "rhs_channels": "fewer"}, {"op": "ADD", "act": "RELU6", "rhs_channels": "fewer"},
            {"op": "MUL", "residual": "ADD"},
            {"op": "MUL", "rhs": "scalar", "act": "RELU", "residual": "SUB", "residual_reverse": True,
             "chain": ("TANH",)},
            {"op": "ADD", "rhs_channels": "fewer", "residual": "MAXIMUM", "qdq": True}]
         + [{"op": "SUB", "residual": r, "residual_reverse": True} for r in ("ADD", "DIV", "MINIMUM", "MUL")]),
)


def _unary(*, act: bool = False, chain: bool = True, fuses: str | None = None, claimed: bool = True,
           ref: rf.UnaryRef | None = None) -> GpuOpEntry:
    return GpuOpEntry("unary", lower_unary, act=act, chain=chain, fuses=fuses, claimed=claimed, ref=ref)


def _binary(*, fuses: str | None = None, params: Mapping[int, str] | None = None,
            ref: rf.BinaryRef | None = None) -> GpuOpEntry:
    return GpuOpEntry("binary", lower_binary, params=params or {}, fuses=fuses, ref=ref)


OPS: dict[str, GpuOpEntry] = {
    # binary (bin_<OP> in common.lgk)
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
    # unary (op_<OP> in common.lgk)
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
}
