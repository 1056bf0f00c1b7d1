"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (kernel ``resize`` in ``shaders/resize.lgk``), with
LiteRT's float32 coordinate rules (align_corners, half_pixel_centers)."""

from __future__ import annotations

import numpy as np

from ..._delegate import NodeView
from .. import _reference_ops as rf
from .._graph import GpuOp
from .._kernel_specs import QDQ, KernelSpec, Opt, spec
from ._entry import GpuOpEntry, Lowerer, check_4d, opt

__all__ = ["OPS", "KERNELS", "resize_scale"]


def resize_scale(in_n: int, out_n: int, align_corners: bool) -> float:
    """The resize kernels' SCALE along one axis (float32, as LiteRT computes it): also the conv kernels'
    RES_SCALE_* of a residual read through a resize (``residual_resize``)."""
    return float(np.float32((in_n - 1) / (out_n - 1) if align_corners and out_n > 1 else in_n / out_n))


def check_resize_nearest(node: NodeView) -> str:
    if opt(node, "align_corners", False) and opt(node, "half_pixel_centers", False):
        return "RESIZE_NEAREST_NEIGHBOR with align_corners and half_pixel_centers"
    return check_4d(node)


def check_resize_bilinear(node: NodeView) -> str:
    if opt(node, "align_corners", False) and opt(node, "half_pixel_centers", False):
        return "RESIZE_BILINEAR with align_corners and half_pixel_centers"
    return check_4d(node)


def lower_resize(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    _, h, w, _ = lw.shape(x)
    _, oh, ow, _ = lw.shape(y)
    align, half = bool(n.attrs.get("align_corners")), bool(n.attrs.get("half_pixel_centers"))
    opts, _ = lw.epilogue()
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {**lw.dims(y), "SRC_H": h, "SRC_W": w, "SCALE_H": resize_scale(h, oh, align),
              "SCALE_W": resize_scale(w, ow, align),
              "HALF_PIXEL": int(half), "ALIGN": int(align)}
    return [lw.op("resize", {"mode": "BILINEAR" if n.op == "RESIZE_BILINEAR" else "NEAREST", **opts}, params)]


# ---------------------------------------------------------------------------------------------------------
# kernels (shaders/resize.lgk) and table entries
# ---------------------------------------------------------------------------------------------------------

KERNELS: tuple[KernelSpec, ...] = (
    spec("resize", "resize.lgk", "RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR",
         {"mode": Opt("BILINEAR", ("BILINEAR", "NEAREST")), "qdq": QDQ},
         [{"mode": "BILINEAR"}, {"mode": "NEAREST"}, {"mode": "BILINEAR", "qdq": True}]),
)

OPS: dict[str, GpuOpEntry] = {
    "RESIZE_BILINEAR": GpuOpEntry("resize", lower_resize, check_resize_bilinear, {1: "size"},
                                  ref=rf.resize_bilinear),
    "RESIZE_NEAREST_NEIGHBOR": GpuOpEntry("resize", lower_resize, check_resize_nearest, {1: "size"},
                                          ref=rf.resize_nearest),
}
