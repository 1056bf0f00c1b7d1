"""Kernels that make new tensors from shapes or scalars: SHAPE, FILL, ZEROS_LIKE, RANGE.

FILL's and RANGE's output shapes depend on input values, so they are dynamic
unless those inputs are constant (then the whole output is computed at prepare).
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel
from ._shapes import const_ints, int_values

__all__: list[str] = []


@register_kernel("SHAPE", versions=range(1, 2))
def _shape(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    odt = np.dtype(ctx.outputs[0].dtype)
    if odt not in (np.int32, np.int64):
        raise ctx.fail(f"out_type must be int32 or int64, got {odt}")
    x = ctx.inputs[0]
    out_shape = None if x.shape is None else (len(x.shape),)
    return Prepared([out_shape], lambda inputs: [np.asarray(inputs[0].shape, dtype=odt).reshape(-1)])


@register_kernel("FILL", versions=range(1, 6))
def _fill(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs (dims, value) and 1 output")
    dims, value = ctx.inputs
    if dims.dtype not in ("int32", "int64"):
        raise ctx.fail(f"dims must be int32 or int64, got {dims.dtype}")
    if value.shape is not None and len(value.shape) != 0 and int(np.prod(value.shape)) != 1:
        raise ctx.fail(f"value must be a scalar, got shape {tuple(value.shape)}")
    if ctx.outputs[0].dtype != value.dtype:
        raise ctx.fail(f"output dtype {ctx.outputs[0].dtype} differs from value dtype {value.dtype}")
    odt = np.dtype(object) if value.dtype == "string" else np.dtype(value.dtype)

    def target(vals) -> tuple[int, ...]:
        shape = tuple(int(v) for v in np.asarray(vals).reshape(-1))
        if any(d < 0 for d in shape):
            raise ctx.fail(f"dims {shape} must be non-negative")
        return shape

    dv = const_ints(dims)
    if dv is not None:
        shape = target(dv)
        return Prepared([shape], lambda inputs: [np.full(shape, np.asarray(inputs[1]).reshape(-1)[0], odt)])

    def run_dynamic(inputs):
        shape = target(int_values(ctx, inputs[0], "dims"))
        return [np.full(shape, np.asarray(inputs[1]).reshape(-1)[0], odt)]

    return Prepared([None], run_dynamic)


@register_kernel("ZEROS_LIKE", versions=range(1, 2))
def _zeros_like(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    x = ctx.inputs[0]
    odt = np.dtype(ctx.outputs[0].dtype)
    shape = None if x.shape is None else tuple(x.shape)
    return Prepared([shape], lambda inputs: [np.zeros(inputs[0].shape, odt)])


@register_kernel("RANGE", dtypes=("int32", "int64", "float32"), versions=range(1, 3))
def _range(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 3 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 3 inputs (start, limit, delta) and 1 output")
    dts = {t.dtype for t in ctx.inputs}
    if len(dts) != 1:
        raise ctx.fail(f"start, limit and delta must share a dtype, got {sorted(dts)}")
    odt = np.dtype(ctx.outputs[0].dtype)
    is_float = odt.kind == "f"

    def compute(start, limit, delta) -> np.ndarray:
        start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
        if delta == 0:
            raise ctx.fail("delta must not be zero")
        if (start > limit and delta > 0) or (start < limit and delta < 0):
            raise ctx.fail(f"range from {start} to {limit} never ends with delta {delta}")
        if is_float:
            s, l_, d = np.float32(start), np.float32(limit), np.float32(delta)
            n = int(np.ceil(np.abs((l_ - s) / d)))
            if n == 0:
                return np.zeros((0,), odt)
            # LiteRT adds delta repeatedly in float32; cumsum rounds the same way
            steps = np.full(n, d, np.float32)
            steps[0] = s
            return np.cumsum(steps, dtype=np.float32)
        s, l_, d = int(start), int(limit), int(delta)
        n = (abs(l_ - s) + abs(d) - 1) // abs(d)
        return (s + d * np.arange(n, dtype=np.int64)).astype(odt)

    if all(t.data is not None for t in ctx.inputs):
        value = compute(*(t.data for t in ctx.inputs))
        return Prepared([value.shape], lambda inputs: [value.copy()])
    return Prepared([None], lambda inputs: [compute(*inputs)])
