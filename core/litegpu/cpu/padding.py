"""Padding kernels: PAD, PADV2 (constant) and MIRROR_PAD (REFLECT / SYMMETRIC).

Dtype-generic.  PAD fills with zero, which for a quantized tensor means its zero
point; PADV2 fills with its constant-value input (already in the tensor's
representation).  Paddings are an int32/int64 [rank, 2] tensor; when it is not
constant the output shape is dynamic.
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, TensorSpec, register_kernel
from ._shapes import Shape, const_ints, int_values, known_shape

__all__ = ["pad_prepare", "PadPrepared"]


class PadPrepared(Prepared):
    """What the PAD kernel returns for a planned (constant paddings, known shape) node:
    the convolutions' fusions recognise it by this."""

MIRROR_REFLECT, MIRROR_SYMMETRIC = 0, 1
# LiteRT's PAD/PADV2 kernels handle at most 5 dimensions (MIRROR_PAD has no such limit)
_PAD_MAX_RANK = 5


def _zero_of(t: TensorSpec):
    q = t.quantization
    if q is not None and q.zero_point.size:
        return int(q.zero_point[0])
    return 0


def _pad_plan(ctx: NodeContext, shape: Shape, pads, max_rank: int | None = None
              ) -> tuple[list[tuple[int, int]], Shape]:
    rank = len(shape)
    if max_rank is not None and rank > max_rank:
        raise ctx.fail(f"padding supports at most {max_rank} dimensions, got {rank}")
    p = np.asarray(pads)
    if p.size != 2 * rank:
        raise ctx.fail(f"paddings of shape {p.shape} do not match input rank {rank} (want [{rank}, 2])")
    p = p.reshape(rank, 2).astype(np.int64)
    if (p < 0).any():
        raise ctx.fail(f"paddings must be non-negative, got {p.tolist()}")
    width = [(int(a), int(b)) for a, b in p]
    return width, tuple(d + a + b for d, (a, b) in zip(shape, width, strict=False))


def _pad_common(ctx: NodeContext, fill_of, kind: type[Prepared] = Prepared) -> Prepared:
    """PAD/PADV2: ``fill_of(inputs)`` gives the fill value at run (constant when possible);
    a planned node's Prepared is of ``kind``."""
    x, pads = ctx.inputs[0], ctx.inputs[1]
    if pads.dtype not in ("int32", "int64"):
        raise ctx.fail(f"paddings must be int32 or int64, got {pads.dtype}")
    if x.dtype == "string":
        raise ctx.fail("padding string tensors is not supported")
    pv, in_shape = const_ints(pads), known_shape(x)
    if pv is not None and in_shape is not None:
        width, out_shape = _pad_plan(ctx, in_shape, pv, _PAD_MAX_RANK)
        # np.pad re-plans on every call; the slices are fixed, so write the output directly:
        # the fill into each border slab (corners twice), the input into the interior.
        rank = len(out_shape)
        borders = []
        for ax, (a, b) in enumerate(width):
            pre = (slice(None),) * ax
            if a:
                borders.append(pre + (slice(0, a),))
            if b:
                borders.append(pre + (slice(out_shape[ax] - b, out_shape[ax]),))
        interior = tuple(slice(a, a + d) for (a, _), d in zip(width, in_shape, strict=True))
        odt = np.dtype(x.dtype)
        if rank == 0:
            return Prepared([out_shape], lambda inputs: [np.array(inputs[0], dtype=odt, copy=True)], fresh=True)

        def run(inputs):
            data = inputs[0]
            if data.shape != in_shape:  # a shape the planned slices do not fit
                return [np.pad(data, width, mode="constant", constant_values=fill_of(inputs))]
            out = np.empty(out_shape, odt)
            if borders:
                fill = fill_of(inputs)
                for sl in borders:
                    out[sl] = fill
            out[interior] = data
            return [out]
        return kind([out_shape], run, fresh=True)

    def run_dynamic(inputs):
        data = inputs[0]
        width, _ = _pad_plan(ctx, data.shape, int_values(ctx, inputs[1], "paddings"), _PAD_MAX_RANK)
        return [np.pad(data, width, mode="constant", constant_values=fill_of(inputs))]

    return Prepared([None], run_dynamic)


@register_kernel("PAD", versions=range(1, 7))
def pad_prepare(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs (input, paddings) and 1 output")
    zero = _zero_of(ctx.outputs[0])
    return _pad_common(ctx, lambda inputs: zero, PadPrepared)


@register_kernel("PADV2", versions=range(1, 7))
def _padv2(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) not in (2, 3) or ctx.inputs[0] is None or ctx.inputs[1] is None:
        raise ctx.fail("expects inputs (input, paddings[, constant_values])")
    cv = ctx.inputs[2] if len(ctx.inputs) == 3 else None
    if cv is None:
        zero = _zero_of(ctx.outputs[0])
        return _pad_common(ctx, lambda inputs: zero)
    if cv.dtype != ctx.inputs[0].dtype:
        raise ctx.fail(f"constant value dtype {cv.dtype} differs from input dtype {ctx.inputs[0].dtype}")
    if cv.shape is not None and int(np.prod(cv.shape)) != 1:
        raise ctx.fail(f"constant value must hold one element, got shape {tuple(cv.shape)}")
    if cv.data is not None:
        value = np.asarray(cv.data).reshape(-1)[0]
        return _pad_common(ctx, lambda inputs: value)
    return _pad_common(ctx, lambda inputs: np.asarray(inputs[2]).reshape(-1)[0])


@register_kernel("MIRROR_PAD", versions=range(1, 4))
def _mirror_pad(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs (input, paddings) and 1 output")
    x, pads = ctx.inputs
    if pads.dtype not in ("int32", "int64"):
        raise ctx.fail(f"paddings must be int32 or int64, got {pads.dtype}")
    mode = int(ctx.options.get("mode", 0) or 0)
    if mode not in (MIRROR_REFLECT, MIRROR_SYMMETRIC):
        raise ctx.fail(f"unknown mirror pad mode {mode}")
    np_mode = "reflect" if mode == MIRROR_REFLECT else "symmetric"
    # REFLECT excludes the edge element, so it can pad at most dim - 1; SYMMETRIC at most dim
    slack = 1 if mode == MIRROR_REFLECT else 0

    def plan(shape: Shape, pv):
        width, out_shape = _pad_plan(ctx, shape, pv)
        for d, (dim, (a, b)) in enumerate(zip(shape, width, strict=False)):
            if max(a, b) > dim - slack:
                raise ctx.fail(f"{np_mode} padding {(a, b)} is too large for dimension {d} of size {dim}")
        return width, out_shape

    pv, in_shape = const_ints(pads), known_shape(x)
    if pv is not None and in_shape is not None:
        width, out_shape = plan(in_shape, pv)
        return Prepared([out_shape], lambda inputs: [np.pad(inputs[0], width, mode=np_mode)])

    def run_dynamic(inputs):
        data = inputs[0]
        width, _ = plan(data.shape, int_values(ctx, inputs[1], "paddings"))
        return [np.pad(data, width, mode=np_mode)]

    return Prepared([None], run_dynamic)
