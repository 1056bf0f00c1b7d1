"""Comparison, logical and selection kernels: EQUAL..GREATER_EQUAL, LOGICAL_*, SELECT(_V2), WHERE.

Comparisons here compare raw values: int16 LESS/GREATER(_EQUAL) and unquantized int16
EQUAL/NOT_EQUAL, as LiteRT does.  Quantized int8/uint8 comparisons (and quantized int16
EQUAL/NOT_EQUAL) are rescaled by :mod:`litegpu.cpu.quantized.elementwise`, which hands
the raw cases back to these kernels.
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel
from ._shapes import broadcast_shape

__all__: list[str] = []

_ORDERED = ("float32", "int32", "int64", "int8", "uint8", "int16")
_EQUALITY = _ORDERED + ("bool", "string")


def _compare(ctx: NodeContext, fn) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs and 1 output")
    a, b = ctx.inputs
    if a.dtype != b.dtype:
        raise ctx.fail(f"input dtypes differ: {a.dtype} and {b.dtype}")
    if ctx.outputs[0].dtype != "bool":
        raise ctx.fail(f"output must be bool, got {ctx.outputs[0].dtype}")
    shape = None
    if a.shape is not None and b.shape is not None:
        shape = broadcast_shape(ctx, tuple(a.shape), tuple(b.shape), 8)

    def run(inputs):
        return [np.asarray(fn(inputs[0], inputs[1]), dtype=bool)]

    return Prepared([shape], run)


def _make_compare(fn):
    def prepare(ctx: NodeContext) -> Prepared:
        return _compare(ctx, fn)
    return prepare


for _name, _fn, _dts, _vers in (
    ("EQUAL", np.equal, _EQUALITY, range(1, 6)),
    ("NOT_EQUAL", np.not_equal, _EQUALITY, range(1, 5)),
    ("LESS", np.less, _ORDERED, range(1, 4)),
    ("LESS_EQUAL", np.less_equal, _ORDERED, range(1, 3)),
    ("GREATER", np.greater, _ORDERED, range(1, 3)),
    ("GREATER_EQUAL", np.greater_equal, _ORDERED, range(1, 4)),
):
    register_kernel(_name, dtypes=_dts, versions=_vers)(_make_compare(_fn))


# ---- logical ------------------------------------------------------------------------------------

def _logical_binary(ctx: NodeContext, fn) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs and 1 output")
    a, b = ctx.inputs
    if a.dtype != "bool" or b.dtype != "bool":
        raise ctx.fail(f"inputs must be bool, got {a.dtype} and {b.dtype}")
    shape = None
    if a.shape is not None and b.shape is not None:
        shape = broadcast_shape(ctx, tuple(a.shape), tuple(b.shape), 8)

    def run(inputs):
        return [np.asarray(fn(inputs[0], inputs[1]))]

    return Prepared([shape], run)


@register_kernel("LOGICAL_AND", dtypes=("bool",), versions=range(1, 2))
def _logical_and(ctx: NodeContext) -> Prepared:
    return _logical_binary(ctx, np.logical_and)


@register_kernel("LOGICAL_OR", dtypes=("bool",), versions=range(1, 2))
def _logical_or(ctx: NodeContext) -> Prepared:
    return _logical_binary(ctx, np.logical_or)


@register_kernel("LOGICAL_NOT", dtypes=("bool",), versions=range(1, 2))
def _logical_not(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None:
        raise ctx.fail("expects 1 input")
    x = ctx.inputs[0]

    def run(inputs):
        return [np.asarray(np.logical_not(inputs[0]))]

    return Prepared([None if x.shape is None else tuple(x.shape)], run)


# ---- SELECT / SELECT_V2 -------------------------------------------------------------------------

def _select_check(ctx: NodeContext) -> None:
    if len(ctx.inputs) != 3 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 3 inputs (condition, x, y) and 1 output")
    c, x, y = ctx.inputs
    if c.dtype != "bool":
        raise ctx.fail(f"condition must be bool, got {c.dtype}")
    if x.dtype != y.dtype:
        raise ctx.fail(f"x and y dtypes differ: {x.dtype} and {y.dtype}")


@register_kernel("SELECT", dtypes=("bool",), versions=range(1, 5))
def _select(ctx: NodeContext) -> Prepared:
    """TF1 Select: x and y have one shape; the condition has it too, is a scalar, or is a vector
    over axis 0 (LiteRT refuses any other broadcasting here; SELECT_V2 broadcasts)."""
    _select_check(ctx)
    c, x, y = ctx.inputs
    shape = None
    if c.shape is not None and x.shape is not None and y.shape is not None:
        cs, xs, ys = tuple(c.shape), tuple(x.shape), tuple(y.shape)
        if xs != ys:
            raise ctx.fail(f"x and y shapes differ: {xs} and {ys}")
        if len(cs) == 0:
            pass  # a scalar condition picks all of x or all of y
        elif len(cs) == 1 and len(xs) > 1:
            if cs[0] != xs[0]:
                raise ctx.fail(f"condition of shape {cs} does not match the first dimension of {xs}")
        elif cs != xs:
            raise ctx.fail(f"condition shape {cs} must equal the shape of x {xs} or be a vector over axis 0")
        shape = xs

    def run(inputs):
        cond, a, b = inputs
        if cond.ndim == 1 and a.ndim > 1:
            cond = cond.reshape(cond.shape + (1,) * (a.ndim - 1))
        return [np.asarray(np.where(cond, a, b))]

    return Prepared([shape], run)


@register_kernel("SELECT_V2", dtypes=("bool",), versions=range(1, 3))
def _select_v2(ctx: NodeContext) -> Prepared:
    _select_check(ctx)
    c, x, y = ctx.inputs
    shape = None
    if c.shape is not None and x.shape is not None and y.shape is not None:
        shape = broadcast_shape(ctx, broadcast_shape(ctx, tuple(c.shape), tuple(x.shape), 8),
                                tuple(y.shape), 8)

    def run(inputs):
        return [np.asarray(np.where(inputs[0], inputs[1], inputs[2]))]

    return Prepared([shape], run)


# ---- WHERE --------------------------------------------------------------------------------------

@register_kernel("WHERE", dtypes=("bool", "float32", "int32", "int64", "int8", "uint8"), versions=range(1, 3))
def _where(ctx: NodeContext) -> Prepared:
    """Coordinates of the true (non-zero) elements, one row each, in row-major order (int64)."""
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None:
        raise ctx.fail("expects 1 input")
    odt = np.dtype(ctx.outputs[0].dtype)

    def run(inputs):
        return [np.argwhere(np.asarray(inputs[0]) != 0).astype(odt)]

    return Prepared([None], run)
