"""Data-movement kernels that rearrange whole tensors: reshape family, transpose, concat/split,
pack/unpack, tile, broadcast_to, depth/space and batch/space rearrangements.

They are dtype-generic (any numeric dtype, bool, quantized or not, and strings where numpy
can hold them) because they move values without looking at them.  Every kernel returns a
freshly allocated array, never a view of an input, so later in-place work on one tensor
cannot change another.  Parameters read from tensors (shape, perm, multiples, block shape...)
are used at prepare when constant; otherwise the output shape is dynamic and computed at run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._registry import NodeContext, Prepared, TensorSpec, register_kernel
from ._shapes import (
    Run,
    Shape,
    const_ints,
    fresh,
    int_values,
    known_shape,
    normalize_axis,
    plan_by_shape,
    prod,
    same_quantization,
)

__all__: list[str] = []


def _n_inputs(ctx: NodeContext, lo: int, hi: int | None = None) -> None:
    hi = lo if hi is None else hi
    n = len(ctx.inputs)
    if not lo <= n <= hi or any(t is None for t in ctx.inputs[:lo]):
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise ctx.fail(f"expects {want} inputs, got {n}")


# ---- RESHAPE ------------------------------------------------------------------------------------

def _reshape_target(ctx: NodeContext, in_shape: Shape, spec: list[int]) -> Shape:
    """Resolve a -1 entry like LiteRT (zero-sized dimensions are left out of the inference)."""
    n_in = prod(in_shape)
    nz_in = prod(d for d in in_shape if d != 0)
    out = list(spec)
    stretch = -1
    nz_out, n_out = 1, 1
    for i, v in enumerate(out):
        if v == -1:
            if stretch != -1:
                raise ctx.fail(f"new shape {tuple(spec)} has more than one -1")
            stretch = i
            continue
        if v < -1:
            raise ctx.fail(f"new shape {tuple(spec)} has a negative dimension")
        if v != 0:
            nz_out *= v
        n_out *= v
    if stretch != -1:
        if n_in == 0 and n_out != 0:
            out[stretch] = 0
        else:
            if nz_out == 0 or nz_in % nz_out:
                raise ctx.fail(f"cannot reshape {in_shape} to {tuple(spec)}")
            out[stretch] = nz_in // nz_out
        n_out *= out[stretch]
    if n_out != n_in:
        raise ctx.fail(f"cannot reshape {in_shape} ({n_in} elements) to {tuple(out)} ({n_out} elements)")
    return tuple(out)


@register_kernel("RESHAPE", versions=range(1, 2))
def _reshape(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 1, 2)
    x = ctx.inputs[0]
    shape_t = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    # LiteRT uses the shape tensor when it is an int32 vector, else the new_shape option
    from_tensor = (shape_t is not None and shape_t.dtype == "int32"
                   and (shape_t.shape is None or len(shape_t.shape) == 1))
    if from_tensor:
        spec = None if shape_t.data is None else const_ints(shape_t).reshape(-1).tolist()
    else:
        opt = ctx.options.get("new_shape")
        spec = [int(v) for v in (opt or ())]
        if spec == [0]:  # legacy converters wrote [0] for a scalar
            spec = []
    in_shape = known_shape(x)
    if spec is not None and in_shape is not None:
        out_shape = _reshape_target(ctx, in_shape, spec)

        def run(inputs):
            return [fresh(inputs[0]).reshape(out_shape)]
        return Prepared([out_shape], run)

    def run_dynamic(inputs):
        data = inputs[0]
        s = spec if spec is not None else int_values(ctx, inputs[1], "shape").reshape(-1).tolist()
        return [fresh(data).reshape(_reshape_target(ctx, data.shape, s))]

    return Prepared([None], run_dynamic)


# ---- SQUEEZE / EXPAND_DIMS ----------------------------------------------------------------------

@register_kernel("SQUEEZE", versions=range(1, 3))
def _squeeze(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 1)
    dims = [int(d) for d in (ctx.options.get("squeeze_dims") or ())]

    def squeezed(shape: Shape) -> Shape:
        rank = len(shape)
        if not dims:
            return tuple(d for d in shape if d != 1)
        drop = set()
        for d in dims:
            a = normalize_axis(ctx, d, rank, "squeeze dimension")
            if shape[a] != 1:
                raise ctx.fail(f"cannot squeeze dimension {d} of size {shape[a]} in shape {shape}")
            drop.add(a)
        return tuple(s for i, s in enumerate(shape) if i not in drop)

    def plan(shapes: list[Shape | None]) -> tuple[list[Shape | None], Run]:
        out_shape = squeezed(shapes[0])
        return [out_shape], lambda inputs: [fresh(inputs[0]).reshape(out_shape)]

    return plan_by_shape(ctx, plan)


@register_kernel("EXPAND_DIMS", versions=range(1, 2))
def _expand_dims(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 2)
    x, ax = ctx.inputs
    if ax.dtype not in ("int32", "int64"):
        raise ctx.fail(f"axis must be int32 or int64, got {ax.dtype}")

    def plan(shape: Shape, axis_vals: np.ndarray) -> Shape:
        flat = np.asarray(axis_vals).reshape(-1)
        if flat.size != 1:
            raise ctx.fail(f"axis must hold exactly one value, got {flat.size}")
        a = int(flat[0])
        rank = len(shape)
        if not -rank - 1 <= a <= rank:
            raise ctx.fail(f"axis {a} is out of range for expanding a tensor of rank {rank}")
        if a < 0:
            a += rank + 1
        return shape[:a] + (1,) + shape[a:]

    axv = const_ints(ax)
    in_shape = known_shape(x)
    if axv is not None and in_shape is not None:
        out_shape = plan(in_shape, axv)
        return Prepared([out_shape], lambda inputs: [fresh(inputs[0]).reshape(out_shape)])

    def run_dynamic(inputs):
        data = inputs[0]
        return [fresh(data).reshape(plan(data.shape, int_values(ctx, inputs[1], "axis")))]

    return Prepared([None], run_dynamic)


# ---- TRANSPOSE ----------------------------------------------------------------------------------

@register_kernel("TRANSPOSE", versions=range(1, 10))
def _transpose(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 2)
    x, p = ctx.inputs

    def plan(shape: Shape, perm_vals: np.ndarray) -> tuple[int, ...]:
        perm = [int(v) for v in np.asarray(perm_vals).reshape(-1)]
        rank = len(shape)
        if not 1 <= rank <= 8:
            raise ctx.fail(f"transpose supports 1-D to 8-D inputs, got {rank}-D")
        if len(perm) != rank:
            raise ctx.fail(f"perm {perm} does not match input rank {rank}")
        perm = [v + rank if v < 0 else v for v in perm]
        if sorted(perm) != list(range(rank)):
            raise ctx.fail(f"perm {perm} is not a permutation of 0..{rank - 1}")
        return tuple(perm)

    pv = const_ints(p)
    in_shape = known_shape(x)
    if pv is not None and in_shape is not None:
        perm = plan(in_shape, pv)
        out_shape = tuple(in_shape[i] for i in perm)
        return Prepared([out_shape], lambda inputs: [fresh(np.transpose(inputs[0], perm))])

    def run_dynamic(inputs):
        data = inputs[0]
        return [fresh(np.transpose(data, plan(data.shape, int_values(ctx, inputs[1], "perm"))))]

    return Prepared([None], run_dynamic)


# ---- CONCATENATION ------------------------------------------------------------------------------

def _requantizer(src: TensorSpec, dst: TensorSpec):
    """uint8/int8 rescaling from src's to dst's quantization (LiteRT's ConcatenationWithScaling)."""
    qs, qd = src.quantization, dst.quantization
    scale = np.float32(qs.scale[0]) / np.float32(qd.scale[0])
    bias = np.float32(-float(qs.zero_point[0])) * scale
    zp_out = int(qd.zero_point[0])
    info = np.iinfo(np.dtype(dst.dtype))
    odt = np.dtype(dst.dtype)

    def fn(a: np.ndarray) -> np.ndarray:
        v = a.astype(np.float32) * scale + bias
        # std::round: half away from zero
        r = np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))
        return np.clip(r.astype(np.int64) + zp_out, info.min, info.max).astype(odt)

    return fn


@register_kernel("CONCATENATION", versions=range(1, 8))
def _concatenation(ctx: NodeContext) -> Prepared:
    if not ctx.inputs or any(t is None for t in ctx.inputs) or len(ctx.outputs) != 1:
        raise ctx.fail("expects at least 1 input and 1 output")
    out = ctx.outputs[0]
    dts = {t.dtype for t in ctx.inputs}
    if len(dts) != 1 or out.dtype not in dts:
        raise ctx.fail(f"inputs and output must share one dtype, got {sorted(dts)} -> {out.dtype}")
    dtype = out.dtype
    act = int(ctx.options.get("fused_activation_function", 0) or 0)
    if act != 0:
        # LiteRT's CONCATENATION kernels refuse any fused activation (only its XNNPACK delegate
        # takes such a node, and silently drops the activation); refuse too rather than guess
        raise ctx.fail(f"fused activation {act} is not supported by CONCATENATION (LiteRT refuses it)")
    converters = [None] * len(ctx.inputs)
    # LiteRT: uint8 inputs with other parameters are rescaled to the output's; int8 ones must share
    # them; int16 ones are copied as they are whatever their parameters (so are they here)
    if dtype in ("uint8", "int8"):
        for i, t in enumerate(ctx.inputs):
            if not same_quantization(t, out):
                if t.quantization is None or out.quantization is None or dtype == "int8":
                    raise ctx.fail("quantized inputs must share the output's scale and zero point")
                converters[i] = _requantizer(t, out)
    axis_opt = int(ctx.options.get("axis", 0) or 0)

    def plan(shapes: list[Shape]) -> tuple[int, Shape]:
        rank = len(shapes[0])
        axis = normalize_axis(ctx, axis_opt, max(rank, 1))
        total = 0
        for s in shapes:
            if len(s) != rank:
                raise ctx.fail(f"inputs have different ranks: {shapes}")
            for i, (d, d0) in enumerate(zip(s, shapes[0], strict=False)):
                if i != axis and d != d0:
                    raise ctx.fail(f"input shapes {shapes} differ outside the concatenation axis {axis}")
            total += s[axis]
        return axis, shapes[0][:axis] + (total,) + shapes[0][axis + 1:]

    def concat(inputs, axis):
        parts = [a if c is None else c(a) for a, c in zip(inputs, converters, strict=False)]
        return [np.concatenate(parts, axis=axis)]

    shapes = [known_shape(t) for t in ctx.inputs]
    if all(s is not None for s in shapes):
        axis, out_shape = plan(shapes)  # type: ignore[arg-type]
        return Prepared([out_shape], lambda inputs: concat(inputs, axis), fresh=True)
    return Prepared([None], lambda inputs: concat(inputs, plan([a.shape for a in inputs])[0]), fresh=True)


# ---- SPLIT / SPLIT_V ----------------------------------------------------------------------------

def _split_run(sizes: list[int], axis: int):
    bounds = np.cumsum(sizes)[:-1].tolist()

    def run(inputs_data: np.ndarray) -> list[np.ndarray]:
        return [fresh(p) for p in np.split(inputs_data, bounds, axis=axis)]

    return run


@register_kernel("SPLIT", versions=range(1, 6))
def _split(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 2)
    ax, x = ctx.inputs  # SPLIT takes the axis first
    n = int(ctx.options.get("num_splits", 0) or 0)
    if n <= 0 or n != len(ctx.outputs):
        raise ctx.fail(f"num_splits {n} must be positive and equal the number of outputs {len(ctx.outputs)}")

    def plan(shape: Shape, axis_vals) -> tuple[list[Shape], int]:
        flat = np.asarray(axis_vals).reshape(-1)
        if flat.size != 1:
            raise ctx.fail("axis must hold exactly one value")
        axis = normalize_axis(ctx, int(flat[0]), len(shape))
        if shape[axis] % n:
            raise ctx.fail(f"dimension {axis} of size {shape[axis]} does not split evenly into {n}")
        part = shape[:axis] + (shape[axis] // n,) + shape[axis + 1:]
        return [part] * n, axis

    axv = const_ints(ax)
    in_shape = known_shape(x)
    if axv is not None and in_shape is not None:
        out_shapes, axis = plan(in_shape, axv)
        fn = _split_run([in_shape[axis] // n] * n, axis)
        return Prepared(list(out_shapes), lambda inputs: fn(inputs[1]))

    def run_dynamic(inputs):
        data = inputs[1]
        _, axis = plan(data.shape, int_values(ctx, inputs[0], "axis"))
        return _split_run([data.shape[axis] // n] * n, axis)(data)

    return Prepared([None] * n, run_dynamic)


@register_kernel("SPLIT_V", versions=range(1, 4))
def _split_v(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 3)
    x, sz, ax = ctx.inputs
    n = len(ctx.outputs)

    def plan(shape: Shape, size_vals, axis_vals) -> tuple[list[Shape], list[int], int]:
        flat = np.asarray(axis_vals).reshape(-1)
        if flat.size != 1:
            raise ctx.fail("axis must hold exactly one value")
        axis = normalize_axis(ctx, int(flat[0]), len(shape))
        sizes = [int(v) for v in np.asarray(size_vals).reshape(-1)]
        if len(sizes) != n:
            raise ctx.fail(f"{len(sizes)} split sizes for {n} outputs")
        unknown = [i for i, v in enumerate(sizes) if v == -1]
        if len(unknown) > 1 or any(v < -1 for v in sizes):
            raise ctx.fail(f"invalid split sizes {sizes}")
        known = sum(v for v in sizes if v != -1)
        if unknown:
            sizes[unknown[0]] = shape[axis] - known
            if sizes[unknown[0]] < 0:
                raise ctx.fail(f"split sizes {sizes} exceed dimension {axis} of size {shape[axis]}")
        if sum(sizes) != shape[axis]:
            raise ctx.fail(f"split sizes {sizes} do not add up to dimension {axis} of size {shape[axis]}")
        return [shape[:axis] + (s,) + shape[axis + 1:] for s in sizes], sizes, axis

    szv, axv, in_shape = const_ints(sz), const_ints(ax), known_shape(x)
    if szv is not None and axv is not None and in_shape is not None:
        out_shapes, sizes, axis = plan(in_shape, szv, axv)
        fn = _split_run(sizes, axis)
        return Prepared(list(out_shapes), lambda inputs: fn(inputs[0]))

    def run_dynamic(inputs):
        data = inputs[0]
        _, sizes, axis = plan(data.shape, int_values(ctx, inputs[1], "size_splits"),
                              int_values(ctx, inputs[2], "axis"))
        return _split_run(sizes, axis)(data)

    return Prepared([None] * n, run_dynamic)


# ---- PACK / UNPACK ------------------------------------------------------------------------------

@register_kernel("PACK", versions=range(1, 6))
def _pack(ctx: NodeContext) -> Prepared:
    if not ctx.inputs or any(t is None for t in ctx.inputs) or len(ctx.outputs) != 1:
        raise ctx.fail("expects at least 1 input and 1 output")
    count = int(ctx.options.get("values_count", len(ctx.inputs)) or len(ctx.inputs))
    if count != len(ctx.inputs):
        raise ctx.fail(f"values_count {count} differs from the number of inputs {len(ctx.inputs)}")
    axis_opt = int(ctx.options.get("axis", 0) or 0)

    def plan(shapes: list[Shape]) -> tuple[int, Shape]:
        s0 = shapes[0]
        if any(s != s0 for s in shapes):
            raise ctx.fail(f"all inputs must have the same shape, got {shapes}")
        axis = normalize_axis(ctx, axis_opt, len(s0) + 1)
        return axis, s0[:axis] + (len(shapes),) + s0[axis:]

    shapes = [known_shape(t) for t in ctx.inputs]
    if all(s is not None for s in shapes):
        axis, out_shape = plan(shapes)  # type: ignore[arg-type]
        return Prepared([out_shape], lambda inputs: [np.stack(inputs, axis=axis)])
    return Prepared([None], lambda inputs: [np.stack(inputs, axis=plan([a.shape for a in inputs])[0])])


@register_kernel("UNPACK", versions=range(1, 7))
def _unpack(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 1)
    num = int(ctx.options.get("num", 0) or 0)
    if num != len(ctx.outputs):
        raise ctx.fail(f"num {num} differs from the number of outputs {len(ctx.outputs)}")
    axis_opt = int(ctx.options.get("axis", 0) or 0)

    def plan(shape: Shape) -> int:
        axis = normalize_axis(ctx, axis_opt, len(shape))
        if shape[axis] != num:
            raise ctx.fail(f"dimension {axis} has size {shape[axis]}, not num={num}")
        return axis

    def unpack(data: np.ndarray, axis: int) -> list[np.ndarray]:
        moved = np.moveaxis(data, axis, 0)
        return [fresh(moved[i]) for i in range(num)]

    in_shape = known_shape(ctx.inputs[0])
    if in_shape is not None:
        axis = plan(in_shape)
        part = in_shape[:axis] + in_shape[axis + 1:]
        return Prepared([part] * num, lambda inputs: unpack(inputs[0], axis))
    return Prepared([None] * num, lambda inputs: unpack(inputs[0], plan(inputs[0].shape)))


# ---- TILE / BROADCAST_TO ------------------------------------------------------------------------

@register_kernel("TILE", versions=range(1, 4))
def _tile(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 2)
    x, m = ctx.inputs
    if m.dtype not in ("int32", "int64"):
        raise ctx.fail(f"multiples must be int32 or int64, got {m.dtype}")

    def plan(shape: Shape, mult) -> tuple[int, ...]:
        reps = tuple(int(v) for v in np.asarray(mult).reshape(-1))
        if len(reps) != len(shape):
            raise ctx.fail(f"multiples {reps} do not match input rank {len(shape)}")
        if any(r < 0 for r in reps):
            raise ctx.fail(f"multiples {reps} must be non-negative")
        return reps

    mv, in_shape = const_ints(m), known_shape(x)
    if mv is not None and in_shape is not None:
        reps = plan(in_shape, mv)
        out_shape = tuple(d * r for d, r in zip(in_shape, reps, strict=False))
        return Prepared([out_shape], lambda inputs: [np.tile(inputs[0], reps).reshape(out_shape)])

    def run_dynamic(inputs):
        data = inputs[0]
        reps = plan(data.shape, int_values(ctx, inputs[1], "multiples"))
        return [np.tile(data, reps).reshape(tuple(d * r for d, r in zip(data.shape, reps, strict=False)))]

    return Prepared([None], run_dynamic)


@register_kernel("BROADCAST_TO", versions=range(2, 5))
def _broadcast_to(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 2)
    x, s = ctx.inputs
    if s.dtype not in ("int32", "int64"):
        raise ctx.fail(f"shape must be int32 or int64, got {s.dtype}")

    def plan(shape: Shape, target_vals) -> Shape:
        target = tuple(int(v) for v in np.asarray(target_vals).reshape(-1))
        if len(shape) > len(target):
            raise ctx.fail(f"cannot broadcast shape {shape} to the lower-rank shape {target}")
        padded = (1,) * (len(target) - len(shape)) + shape
        for d, t in zip(padded, target, strict=False):
            if d != t and d != 1:
                raise ctx.fail(f"cannot broadcast shape {shape} to {target}")
        return target

    sv, in_shape = const_ints(s), known_shape(x)
    if sv is not None and in_shape is not None:
        target = plan(in_shape, sv)
        return Prepared([target], lambda inputs: [fresh(np.broadcast_to(inputs[0], target))])

    def run_dynamic(inputs):
        data = inputs[0]
        return [fresh(np.broadcast_to(data, plan(data.shape, int_values(ctx, inputs[1], "shape"))))]

    return Prepared([None], run_dynamic)


# ---- DEPTH_TO_SPACE / SPACE_TO_DEPTH ------------------------------------------------------------

def _block_move(ctx: NodeContext, to_depth: bool) -> Prepared:
    """DEPTH_TO_SPACE and SPACE_TO_DEPTH (``to_depth``): each block_size x block_size block of pixels moved into
    the depth or out of it.  Both swap axes 2 and 3 of a 6-D view: SPACE_TO_DEPTH reads the input as (n, rows,
    block-rows, cols, block-cols, depth) and writes (n, rows, cols, block-rows, block-cols, depth), DEPTH_TO_SPACE
    the other way round."""
    _n_inputs(ctx, 1)
    b = int(ctx.options.get("block_size", 0) or 0)
    if b < 1:
        raise ctx.fail(f"block_size must be at least 1, got {b}")

    def plan(shapes: list[Shape | None]) -> tuple[list[Shape | None], Run]:
        shape = shapes[0]
        if len(shape) != 4:
            raise ctx.fail(f"input must be 4-D NHWC, got shape {shape}")
        n, h, w, c = shape
        if to_depth:
            if h % b or w % b:
                raise ctx.fail(f"height {h} and width {w} must be divisible by block_size {b}")
            view, out_shape = (n, h // b, b, w // b, b, c), (n, h // b, w // b, c * b * b)
        else:
            if c % (b * b):
                raise ctx.fail(f"depth {c} is not divisible by block_size^2 = {b * b}")
            view, out_shape = (n, h, w, b, b, c // (b * b)), (n, h * b, w * b, c // (b * b))

        def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            return [fresh(inputs[0].reshape(view).transpose(0, 1, 3, 2, 4, 5)).reshape(out_shape)]

        return [out_shape], run

    return plan_by_shape(ctx, plan)


@register_kernel("DEPTH_TO_SPACE", versions=range(1, 3))
def _depth_to_space(ctx: NodeContext) -> Prepared:
    return _block_move(ctx, to_depth=False)


@register_kernel("SPACE_TO_DEPTH", versions=range(1, 3))
def _space_to_depth(ctx: NodeContext) -> Prepared:
    return _block_move(ctx, to_depth=True)


# ---- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND ------------------------------------------------------

def _pad_value(t: TensorSpec) -> int | float:
    """The value that stands for real zero: the zero point of a quantized tensor."""
    q = t.quantization
    if q is not None and q.zero_point.size:
        return int(q.zero_point[0])
    return 0


def _block_planned(ctx: NodeContext, params: tuple[Any, Any], names: tuple[str, str],
                   plan: Callable[..., tuple[list[int], np.ndarray, Shape]],
                   run_with: Callable[..., list[np.ndarray]]) -> Prepared:
    """SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND: planned once where the block and its pads or crops are constant
    and the input's shape is known, else planned on each run from the values it gets (checked the same way)."""
    x = ctx.inputs[0]
    values, in_shape = [const_ints(p) for p in params], known_shape(x)
    if in_shape is not None and all(v is not None for v in values):
        planned = plan(ctx, in_shape, *values)
        return Prepared([planned[-1]], lambda inputs: run_with(inputs[0], *planned))

    def run_dynamic(inputs):
        data = inputs[0]
        got = [int_values(ctx, inputs[1 + i], name) for i, name in enumerate(names)]
        return run_with(data, *plan(ctx, data.shape, *got))

    return Prepared([None], run_dynamic)


def _block_shape(ctx: NodeContext, shape: Shape, block) -> list[int]:
    """SPACE_TO_BATCH_ND's and BATCH_TO_SPACE_ND's block_shape for an input of ``shape``: one positive entry per
    spatial dimension of a 3-D or 4-D input."""
    blk = [int(v) for v in np.asarray(block).reshape(-1)]
    if len(shape) not in (3, 4):
        raise ctx.fail(f"input must be 3-D or 4-D, got shape {shape}")
    if len(blk) != len(shape) - 2:
        raise ctx.fail(f"block_shape {blk} must have {len(shape) - 2} entries for a {len(shape)}-D input")
    if any(v < 1 for v in blk):
        raise ctx.fail(f"block_shape {blk} must be positive")
    return blk


def _s2b_plan(ctx: NodeContext, shape: Shape, block, pads) -> tuple[list[int], np.ndarray, Shape]:
    blk = _block_shape(ctx, shape, block)
    m = len(blk)
    pd = np.asarray(pads, dtype=np.int64).reshape(m, 2) if np.asarray(pads).size == 2 * m else None
    if pd is None:
        raise ctx.fail(f"paddings must have shape [{m}, 2]")
    if (pd < 0).any():
        raise ctx.fail(f"paddings must be non-negative, got {pd.tolist()}")
    spatial = []
    for i in range(m):
        padded = shape[1 + i] + int(pd[i, 0]) + int(pd[i, 1])
        if padded % blk[i]:
            raise ctx.fail(f"padded dimension {1 + i} of size {padded} is not divisible by block {blk[i]}")
        spatial.append(padded // blk[i])
    out = (shape[0] * prod(blk),) + tuple(spatial) + shape[1 + m:]
    return blk, pd, out


@register_kernel("SPACE_TO_BATCH_ND", versions=range(1, 5))
def _space_to_batch_nd(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 3)
    _, bs, pads = ctx.inputs
    fill = _pad_value(ctx.outputs[0])

    def run_with(data: np.ndarray, blk: list[int], pd: np.ndarray, out_shape: Shape) -> list[np.ndarray]:
        m = len(blk)
        width = [(0, 0)] + [(int(a), int(b)) for a, b in pd] + [(0, 0)] * (data.ndim - 1 - m)
        p = np.pad(data, width, constant_values=fill)
        n = p.shape[0]
        # [n, s0/b0, b0, s1/b1, b1, rest] -> [b0, b1, n, s0/b0, s1/b1, rest]
        split = [n]
        for i in range(m):
            split += [p.shape[1 + i] // blk[i], blk[i]]
        rest = p.shape[1 + m:]
        t = p.reshape(split + list(rest))
        perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)]
        perm += list(range(1 + 2 * m, t.ndim))
        return [fresh(t.transpose(perm)).reshape(out_shape)]

    return _block_planned(ctx, (bs, pads), ("block_shape", "paddings"), _s2b_plan, run_with)


def _b2s_plan(ctx: NodeContext, shape: Shape, block, crops) -> tuple[list[int], np.ndarray, Shape]:
    blk = _block_shape(ctx, shape, block)
    m = len(blk)
    if np.asarray(crops).size != 2 * m:
        raise ctx.fail(f"crops must have shape [{m}, 2]")
    cr = np.asarray(crops, dtype=np.int64).reshape(m, 2)
    if (cr < 0).any():
        raise ctx.fail(f"crops must be non-negative, got {cr.tolist()}")
    bprod = prod(blk)
    if shape[0] % bprod:
        raise ctx.fail(f"batch {shape[0]} is not divisible by the block size product {bprod}")
    spatial = []
    for i in range(m):
        full = shape[1 + i] * blk[i]
        size = full - int(cr[i, 0]) - int(cr[i, 1])
        if size < 0:
            raise ctx.fail(f"crops {cr[i].tolist()} exceed dimension {1 + i} of size {full}")
        spatial.append(size)
    out = (shape[0] // bprod,) + tuple(spatial) + shape[1 + m:]
    return blk, cr, out


@register_kernel("BATCH_TO_SPACE_ND", versions=range(1, 5))
def _batch_to_space_nd(ctx: NodeContext) -> Prepared:
    _n_inputs(ctx, 3)
    _, bs, crops = ctx.inputs

    def run_with(data: np.ndarray, blk: list[int], cr: np.ndarray, out_shape: Shape) -> list[np.ndarray]:
        m = len(blk)
        n = data.shape[0] // prod(blk)
        spatial = data.shape[1:1 + m]
        rest = data.shape[1 + m:]
        # [b0, b1, n, s0, s1, rest] -> [n, s0, b0, s1, b1, rest]
        t = data.reshape(blk + [n] + list(spatial) + list(rest))
        perm = [m]
        for i in range(m):
            perm += [m + 1 + i, i]
        perm += list(range(2 * m + 1, t.ndim))
        full = t.transpose(perm).reshape([n] + [spatial[i] * blk[i] for i in range(m)] + list(rest))
        idx = (slice(None),) + tuple(slice(int(cr[i, 0]), int(cr[i, 0]) + out_shape[1 + i]) for i in range(m))
        return [fresh(full[idx])]

    return _block_planned(ctx, (bs, crops), ("block_shape", "crops"), _b2s_plan, run_with)
