"""Helpers shared by the quantized kernels: quantization parameters, activation ranges, planning by shape."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..._errors import ModelError
from .._registry import NodeContext, Prepared, TensorSpec
from .._shapes import Run, plan_by_shape
from ._fixedpoint import qparams, quantized_activation_range

__all__ = [
    "Shape", "Run", "plan_by_shape", "scale_zp", "act_range", "check_io", "const_data",
    "broadcast_shapes", "delegate",
]

Shape = tuple[int, ...]


def scale_zp(spec: TensorSpec | None, what: str = "tensor") -> tuple[float, int]:
    """Per-tensor (scale, zero point) of a quantized tensor (first entry when per-channel)."""
    if spec is None:
        raise ModelError(f"missing {what}")
    s, z = qparams(spec, what)
    return float(s[0]), int(z[0])


def act_range(ctx: NodeContext, out: TensorSpec, key: str = "fused_activation_function") -> tuple[int, int]:
    """The output clamp of the node's fused activation (CalculateActivationRangeQuantized)."""
    act = int(ctx.options.get(key, 0) or 0)
    if act not in range(6):
        raise ctx.fail(f"unknown fused activation function {act}")
    s, z = scale_zp(out, "output")
    return quantized_activation_range(act, out.dtype, s, z)


def check_io(ctx: NodeContext, n_in: Sequence[int] | int, n_out: int = 1) -> None:
    ins = (n_in,) if isinstance(n_in, int) else tuple(n_in)
    if len(ctx.inputs) not in ins or len(ctx.outputs) != n_out:
        raise ctx.fail(f"expects {' or '.join(map(str, ins))} inputs and {n_out} output(s), "
                       f"got {len(ctx.inputs)} and {len(ctx.outputs)}")
    if ctx.inputs[0] is None:
        raise ctx.fail("the first input is required")


def const_data(spec: TensorSpec | None) -> np.ndarray | None:
    return None if spec is None or spec.data is None else np.asarray(spec.data)


def broadcast_shapes(a: Shape, b: Shape) -> Shape:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise ModelError(f"shapes {a} and {b} are not broadcastable") from None


def delegate(ctx: NodeContext, dtype: str, me, why: str) -> Prepared:
    """Hand the node to the kernel registered before ``me`` for the same (op, dtype, version)."""
    from .._registry import CPU_KERNELS

    nxt = CPU_KERNELS.lookup_next(ctx.op.name, dtype, ctx.op.version, me)
    if nxt is None:
        raise ctx.fail(f"{why}, and no other CPU kernel handles it")
    return nxt(ctx)
