"""FULLY_CONNECTED and BATCH_MATMUL (float32): one BLAS sgemm each.

Constant weights are laid out for the sgemm once at prepare (FULLY_CONNECTED's
``(units, in)`` filter transposed, BATCH_MATMUL's ``adj_y`` applied); weights
computed at run time are converted once per distinct array (see
:class:`~litegpu.cpu._float_util.DerivedCache`).  Sparse constant filters are
densified at prepare.
"""

from __future__ import annotations

import numpy as np

from .._errors import ModelError
from ._float_util import F32, DerivedCache, activation_clamp, require_float, spec_shape
from ._registry import FLOAT, NodeContext, Prepared, register_kernel

__all__: list[str] = []


def _dense_const(spec) -> np.ndarray | None:
    if spec is None or spec.data is None:
        return None
    sparsity = getattr(spec, "sparsity", None)
    if sparsity is not None:
        from .sparse import densify_values

        return densify_values(spec.data, sparsity, spec.shape)
    return np.asarray(spec.data)


@register_kernel("FULLY_CONNECTED", dtypes=FLOAT, versions=range(1, 14))
def fully_connected(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) < 2 or ctx.inputs[0] is None or ctx.inputs[1] is None:
        raise ctx.invalid("needs input and weights")
    require_float(ctx, [0, 1, 2])
    opt = ctx.options
    if int(opt.get("weights_format", 0)) != 0:
        raise ctx.fail("only the DEFAULT weights format is supported for float")
    keep = bool(opt.get("keep_num_dims", False))
    act = int(opt.get("fused_activation_function", 0))
    if act not in (0, 1, 2, 3):  # LiteRT's FULLY_CONNECTED refuses TANH/SIGN_BIT at prepare
        raise ctx.invalid(f"fused activation {act} is not supported "
                          "(NONE, RELU, RELU_N1_TO_1, RELU6)")
    clamp = activation_clamp(act)
    wshape = spec_shape(ctx.inputs[1])
    if wshape is not None and len(wshape) != 2:
        raise ctx.invalid(f"weights must be 2-D, got {wshape}")
    bias_spec = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if wshape is None:
        # Weights whose shape is only known at run time (read from a resource variable, say):
        # plan from each invoke's weights.
        plans: dict[tuple[int, ...], _FcPlan] = {}

        def run_dynamic(inputs):
            w = inputs[1]
            if w.ndim != 2:
                raise ctx.invalid(f"weights must be 2-D, got {w.shape}")
            p = plans.get(w.shape)
            if p is None:
                plans.clear()
                p = plans[w.shape] = _FcPlan(w.shape, keep, clamp, None)
            return p.run(inputs)

        return Prepared([None], run_dynamic, fresh=True)
    if bias_spec is not None and bias_spec.shape is not None and int(np.prod(bias_spec.shape)) != wshape[0]:
        raise ctx.invalid(f"bias has {int(np.prod(bias_spec.shape))} "
                          f"elements for {wshape[0]} units")
    plan = _FcPlan(wshape, keep, clamp, _dense_const(ctx.inputs[1]))
    in_shape = spec_shape(ctx.inputs[0])
    plan.static_in = in_shape
    plan.static_out = plan.out_shape_of(in_shape) if in_shape is not None else None
    return Prepared([plan.static_out], plan.run, fresh=True)


class _FcPlan:
    """One FULLY_CONNECTED weights layout: ``(units, depth)`` filter transposed for the sgemm."""

    def __init__(self, wshape, keep: bool, clamp, const_w):
        self.units, self.depth = (int(d) for d in wshape)
        self.keep = keep
        self.clamp = clamp
        units, depth = self.units, self.depth
        self.wcache = DerivedCache(lambda w: np.ascontiguousarray(np.asarray(w, F32).reshape(units, depth).T),
                                   const_w)
        self.static_in: tuple[int, ...] | None = None
        self.static_out: tuple[int, ...] | None = None

    def out_shape_of(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        depth, units = self.depth, self.units
        size = int(np.prod(shape, dtype=np.int64))
        if depth == 0 or size % depth:
            raise ModelError(f"input of shape {shape} cannot be split into rows of {depth}")
        if self.keep:
            if not shape or shape[-1] != depth:
                raise ModelError(f"keep_num_dims: the input's last dimension must be {depth}, "
                                 f"got shape {shape}")
            return shape[:-1] + (units,)
        return (size // depth, units)

    def run(self, inputs):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        oshape = self.static_out if self.static_out is not None and x.shape == self.static_in \
            else self.out_shape_of(x.shape)
        out = np.empty(oshape, F32)
        o2 = out.reshape(-1, self.units)
        np.matmul(x.reshape(-1, self.depth), self.wcache.get(w), out=o2)
        if bias is not None:
            if bias.size != self.units:
                raise ModelError(f"bias has {bias.size} elements for {self.units} units")
            np.add(o2, bias.reshape(-1), out=o2)
        if self.clamp is not None:
            self.clamp(out)
        return [out]


def _bmm_shape(a: tuple[int, ...], b: tuple[int, ...], adj_x: bool, adj_y: bool) -> tuple[int, ...]:
    if len(a) < 2 or len(b) < 2:
        raise ModelError(f"operands must have rank >= 2, got {a} and {b}")
    m, k = (a[-1], a[-2]) if adj_x else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if adj_y else (b[-2], b[-1])
    if k != k2:
        raise ModelError(f"contraction sizes differ ({a} adj_x={adj_x}, {b} adj_y={adj_y})")
    try:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError:
        raise ModelError(f"batch dimensions of {a} and {b} do not broadcast") from None
    return tuple(batch) + (m, n)


@register_kernel("BATCH_MATMUL", dtypes=FLOAT, versions=range(1, 5))
def batch_matmul(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or ctx.inputs[0] is None or ctx.inputs[1] is None:
        raise ctx.invalid("needs two inputs")
    require_float(ctx, [0, 1])
    adj_x = bool(ctx.options.get("adj_x", False))
    adj_y = bool(ctx.options.get("adj_y", False))
    sa, sb = spec_shape(ctx.inputs[0]), spec_shape(ctx.inputs[1])
    static_out = _bmm_shape(sa, sb, adj_x, adj_y) if sa is not None and sb is not None else None
    # The right operand in (..., K, N) layout; constant ones are laid out once.
    rcache = DerivedCache(lambda b: np.ascontiguousarray(np.swapaxes(b, -1, -2)) if adj_y else b,
                          ctx.inputs[1].data)

    def run(inputs):
        a, b = inputs
        if static_out is None or a.shape != sa or b.shape != sb:
            _bmm_shape(a.shape, b.shape, adj_x, adj_y)
        lhs = np.swapaxes(a, -1, -2) if adj_x else a
        return [np.matmul(lhs, rcache.get(b)).astype(F32, copy=False)]

    return Prepared([static_out], run)
