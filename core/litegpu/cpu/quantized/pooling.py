"""Quantized AVERAGE_POOL_2D and MAX_POOL_2D (int8, uint8, int16).

LiteRT's integer pools do not requantize: the output shares the input's scale and zero
point.  The average divides the window sum by the number of taps inside the image,
rounding half away from zero (``(sum +- count/2) / count`` truncated), then clamps to the
fused activation range; the max takes the largest in-image tap and clamps likewise.
"""

from __future__ import annotations

import numpy as np

from .._common import PADDING_SAME, PADDING_VALID
from .._registry import NodeContext, Prepared, register_kernel
from ._common import Shape, act_range, check_io, plan_by_shape
from .conv import _pads

__all__: list[str] = []

_Q = ("int8", "uint8", "int16")


def _pool(ctx: NodeContext, kind: str) -> Prepared:
    check_io(ctx, 1)
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.dtype != x.dtype:
        raise ctx.fail(f"output dtype {out.dtype} differs from input dtype {x.dtype}")
    o = ctx.options
    padding = int(o.get("padding", PADDING_SAME))
    if padding not in (PADDING_SAME, PADDING_VALID):
        raise ctx.fail(f"unknown padding {padding}")
    sh, sw = int(o.get("stride_h", 0)), int(o.get("stride_w", 0))
    fh, fw = int(o.get("filter_height", 0)), int(o.get("filter_width", 0))
    if min(sh, sw, fh, fw) <= 0:
        raise ctx.fail(f"strides ({sh}, {sw}) and filter size ({fh}, {fw}) must be positive")
    lo, hi = act_range(ctx, out)

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        if len(xs) != 4:
            raise ctx.fail(f"input must be 4-D NHWC, got {xs}")
        n, h, w, c = xs
        oh, pt, pb = _pads(padding, h, fh, sh, 1)
        ow, pl, pr = _pads(padding, w, fw, sw, 1)
        if oh <= 0 or ow <= 0:
            raise ctx.fail(f"output size {oh}x{ow} is empty for input {xs} and filter {(fh, fw)}")
        ph, pw = h + pt + pb, w + pl + pr
        # Windows may run past the padded extent on the far side; pad generously and mask.
        eh = max(ph, (oh - 1) * sh + fh)
        ew = max(pw, (ow - 1) * sw + fw)
        inside = np.zeros((eh, ew), bool)
        inside[pt:pt + h, pl:pl + w] = True
        count = np.zeros((oh, ow), np.int64)
        for ky in range(fh):
            for kx in range(fw):
                count += inside[ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw]
        if (count == 0).any():
            raise ctx.fail("a pooling window lies entirely in the padding")
        count = count[None, :, :, None]
        half = count // 2

        def windows(xp):
            for ky in range(fh):
                for kx in range(fw):
                    yield xp[:, ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw, :]

        if kind == "avg":
            def run(inputs):
                xp = np.zeros((n, eh, ew, c), np.int64)
                xp[:, pt:pt + h, pl:pl + w, :] = inputs[0]
                acc = np.zeros((n, oh, ow, c), np.int64)
                for win in windows(xp):
                    acc += win
                pos = acc > 0
                q = np.where(pos, (acc + half) // count, -((-acc + half) // count))
                return [np.clip(q, lo, hi).astype(out.dtype)]
        else:
            def run(inputs):
                xp = np.full((n, eh, ew, c), np.iinfo(np.int32).min, np.int32)
                xp[:, pt:pt + h, pl:pl + w, :] = inputs[0]
                acc = np.full((n, oh, ow, c), np.iinfo(np.int32).min, np.int32)
                for win in windows(xp):
                    np.maximum(acc, win, out=acc)
                return [np.clip(acc, lo, hi).astype(out.dtype)]

        return [(n, oh, ow, c)], run

    return plan_by_shape(ctx, plan)


@register_kernel("AVERAGE_POOL_2D", dtypes=_Q, versions=range(1, 4))
def average_pool_2d(ctx: NodeContext) -> Prepared:
    return _pool(ctx, "avg")


@register_kernel("MAX_POOL_2D", dtypes=_Q, versions=range(1, 4))
def max_pool_2d(ctx: NodeContext) -> Prepared:
    return _pool(ctx, "max")
