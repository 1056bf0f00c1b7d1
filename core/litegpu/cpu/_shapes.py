"""Shape helpers shared by the CPU kernels: broadcasting, axes, constant reads, fresh outputs.

Kernels plan from input shapes and constant inputs at prepare.  Where prepare cannot
know a shape (an upstream op with a data-dependent output) or a parameter (a shape,
perm or begin tensor that is not constant), the kernel announces a dynamic output
(``None``) and plans inside ``run`` instead, with the same checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ._registry import NodeContext, Prepared, TensorSpec

__all__ = [
    "Shape",
    "broadcast_shape",
    "normalize_axis",
    "const_ints",
    "int_values",
    "known_shape",
    "fresh",
    "same_quantization",
    "prod",
    "Run",
    "plan_by_shape",
]

Shape = tuple[int, ...]
Run = Callable[[list[np.ndarray | None]], list[np.ndarray]]


def broadcast_shape(ctx: NodeContext, a: Shape, b: Shape, max_rank: int | None = None) -> Shape:
    """numpy/TFLite broadcast of two shapes, failing with the node's name on a mismatch.

    ``max_rank`` limits the rank when the shapes differ (LiteRT broadcasts up to a fixed
    rank; identical shapes run element-wise at any rank).
    """
    if max_rank is not None and a != b and max(len(a), len(b)) > max_rank:
        raise ctx.fail(f"broadcasting supports at most {max_rank} dimensions, got shapes {a} and {b}")
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ctx.fail(f"shapes {a} and {b} cannot be broadcast together")
    return tuple(out)


def normalize_axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in [-rank, rank) mapped to [0, rank)."""
    if not -rank <= axis < rank:
        raise ctx.fail(f"{what} {axis} is out of range for a tensor of rank {rank}")
    return axis + rank if axis < 0 else axis


def const_ints(t: TensorSpec | None) -> np.ndarray | None:
    """The constant value of an integer tensor as int64, or None when it is not constant."""
    if t is None or t.data is None:
        return None
    return np.asarray(t.data).astype(np.int64)


def int_values(ctx: NodeContext, arr: np.ndarray, what: str) -> np.ndarray:
    """A runtime index/shape tensor as int64, checking it holds integers."""
    a = np.asarray(arr)
    if a.dtype.kind not in "iu":
        raise ctx.fail(f"{what} must be an integer tensor, got {a.dtype}")
    return a.astype(np.int64)


def known_shape(t: TensorSpec | None) -> Shape | None:
    """The tensor's shape when prepare knows it, else None."""
    return None if t is None or t.shape is None else tuple(int(d) for d in t.shape)


def fresh(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy: data-movement kernels never hand out views of their inputs, so no
    later in-place write to one tensor can change another."""
    return np.array(a, order="C", copy=True)


def same_quantization(a: TensorSpec | None, b: TensorSpec | None) -> bool:
    """True when both tensors carry the same (or no) affine quantization."""
    qa = None if a is None else a.quantization
    qb = None if b is None else b.quantization
    if qa is None or qb is None:
        return (qa is None or qa.scale.size == 0) and (qb is None or qb.scale.size == 0)
    return bool(np.array_equal(qa.scale, qb.scale) and np.array_equal(qa.zero_point, qb.zero_point))


def prod(shape: Iterable[int]) -> int:
    """Product of a shape's dimensions as a Python int (1 for a scalar)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def plan_by_shape(ctx: NodeContext, plan: Callable[[list[Shape | None]], tuple[list[Shape | None], Run]]
                  ) -> Prepared:
    """Plan once at prepare when every present input shape is known; else per new input shapes at run."""
    shapes = [None if t is None or t.shape is None else tuple(int(d) for d in t.shape) for t in ctx.inputs]
    if all(s is not None or t is None for s, t in zip(shapes, ctx.inputs, strict=True)):
        outs, run = plan(shapes)
        return Prepared(list(outs), run)
    cache: dict[tuple, Run] = {}

    def run_dynamic(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        key = tuple(None if a is None else a.shape for a in inputs)
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = plan([None if a is None else tuple(a.shape) for a in inputs])[1]
        return fn(inputs)

    return Prepared([None] * len(ctx.outputs), run_dynamic)
