"""Shape helpers shared by the CPU kernels: broadcasting, axes, constant reads, shape-keyed planning.

Most kernels can do all their planning from input *shapes*; only a few need input
*values* (RESHAPE's shape tensor, SLICE's begin/size...).  :func:`plan_by_shape`
runs a kernel's planning once at prepare when every input shape is known there,
and otherwise (an upstream op with a data-dependent output shape) on the first
run with each new set of input shapes, caching the result, so the hot path never
re-plans for shapes it has already seen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ._registry import NodeContext, Prepared, TensorSpec

__all__ = [
    "Shape",
    "Run",
    "plan_by_shape",
    "broadcast_shape",
    "normalize_axis",
    "const_ints",
    "int_values",
    "input_shapes",
    "np_dtype",
    "same_quantization",
]

Shape = tuple[int, ...]
Run = Callable[[list[np.ndarray | None]], list[np.ndarray]]
Plan = Callable[[list[Shape | None]], tuple[list[Shape | None], Run]]


def input_shapes(ctx: NodeContext) -> list[Shape | None]:
    return [None if t is None or t.shape is None else tuple(int(d) for d in t.shape) for t in ctx.inputs]


def plan_by_shape(ctx: NodeContext, plan: Plan) -> Prepared:
    """Prepared from ``plan(input_shapes) -> (output_shapes, run)``.

    ``plan`` gets ``None`` for omitted optional inputs.  When any present input's
    shape is unknown at prepare, planning is deferred to run and cached per shape.
    """
    shapes = input_shapes(ctx)
    if all(s is not None or t is None for s, t in zip(shapes, ctx.inputs, strict=False)):
        out_shapes, run = plan(shapes)
        return Prepared(list(out_shapes), run)

    cache: dict[tuple, Run] = {}

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        key = tuple(None if a is None else a.shape for a in inputs)
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = plan([None if a is None else tuple(a.shape) for a in inputs])[1]
        return fn(inputs)

    return Prepared([None] * len(ctx.outputs), run)


def broadcast_shape(ctx: NodeContext, a: Shape, b: Shape, max_rank: int | None = None) -> Shape:
    """numpy/TFLite broadcast of two shapes, failing with the node's name on a mismatch."""
    if max_rank is not None and a != b and max(len(a), len(b)) > max_rank:
        raise ctx.fail(f"broadcasting supports at most {max_rank} dimensions, got shapes {a} and {b}")
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb, strict=False):
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


def np_dtype(name: str) -> np.dtype:
    """numpy dtype for a tensor dtype name (``"string"`` maps to object)."""
    if name == "string":
        return np.dtype(object)
    return np.dtype(name)


def same_quantization(a: TensorSpec | None, b: TensorSpec | None) -> bool:
    """True when both tensors carry the same (or no) affine quantization."""
    qa = None if a is None else a.quantization
    qb = None if b is None else b.quantization
    if qa is None or qb is None:
        return (qa is None or qa.scale.size == 0) and (qb is None or qb.scale.size == 0)
    return (np.array_equal(qa.scale, qb.scale) and np.array_equal(qa.zero_point, qb.zero_point))


def prod(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
