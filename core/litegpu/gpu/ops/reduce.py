"""Reductions: pooling windows (AVERAGE_POOL_2D, MAX_POOL_2D), axis reductions (MEAN, SUM, REDUCE_MAX,
REDUCE_MIN) and SOFTMAX; kernels in ``shaders/pool.lgk`` and ``shaders/reduce.lgk``.

They share the cost model's reduction split (``_cost.choose_reduce``): a global pool is lowered as a
``reduce`` launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._delegate import NodeView
from .. import _layout as L
from .. import _reference_ops as rf
from .._cost import choose_reduce
from .._geometry import conv_geometry
from .._graph import GpuOp
from .._kernel_specs import ACT_NO_PRELU, ACTIVATIONS, QDQ, SPLITS, KernelSpec, Opt, boolean, spec, split_wg
from ._entry import GpuOpEntry, Lowerer, opt

__all__ = ["OPS", "KERNELS", "REDUCE_KINDS", "is_global_pool"]

#: the reduce template's ``op`` option for each TFLite reduction
REDUCE_KINDS = {"MEAN": "MEAN", "SUM": "SUM", "REDUCE_MAX": "MAX", "REDUCE_MIN": "MIN"}

_AXES = {1: "axes"}
_POOL_OPTIONS = ("filter_height", "filter_width", "padding")


def _non_default(choice: dict[str, int]) -> dict[str, int]:
    """reduce's split / unroll as options: left out at their default 1."""
    return {k: v for k, v in choice.items() if v != 1}


def is_global_pool(attrs: Mapping[str, Any], in_hw: tuple[int, int], out_hw: tuple[int, int]) -> bool:
    """Is a pool with ``attrs`` one window over the whole ``in_hw`` map (a spatial mean or max)?  Its
    window, less the padding before it, covers every row and column, and no padding value was merged."""
    kh, kw = int(attrs["filter_height"]), int(attrs["filter_width"])
    pads = conv_geometry(attrs, in_hw, (kh, kw))["pads"]
    return (tuple(out_hw) == (1, 1) and kh - pads[0] >= in_hw[0] and kw - pads[2] >= in_hw[1]
            and attrs.get("pad_value") is None)


def check_pool(node: NodeView) -> str:
    if len(node.inputs[0].shape) != 4:
        return f"{node.op.name} needs a 4-D input"
    if min(opt(node, "filter_height", 1), opt(node, "filter_width", 1), opt(node, "stride_h", 1),
           opt(node, "stride_w", 1)) < 1:
        return f"{node.op.name} with a non-positive window or stride"
    return ""


def lower_pool(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    b, h, wd, c = lw.shape(x)
    _, oh, ow, _ = lw.shape(y)
    kh, kw = int(n.attrs["filter_height"]), int(n.attrs["filter_width"])
    geo = conv_geometry(n.attrs, (h, wd), (kh, kw))
    opts, _ = lw.epilogue()
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {"B": b, "SRC_H": h, "SRC_W": wd, "H": oh, "W": ow, "C": c, "S": L.slices(c), "KH": kh, "KW": kw,
              "STRIDE_H": geo["stride"][0], "STRIDE_W": geo["stride"][1], "PAD_T": geo["pads"][0],
              "PAD_L": geo["pads"][2]}
    options = {"op": "MAX" if n.op == "MAX_POOL_2D" else "AVG", **opts}
    if is_global_pool(n.attrs, (h, wd), (oh, ow)) and opts.get("act", "NONE") == "NONE":
        # a global pool (one window over the whole image) is a reduction: as one, its long sum is
        # split over a work group instead of walked by one thread per channel slice
        choice, _ = choose_reduce(b * L.slices(c), h * wd, lw.cost)
        params = {**lw.dims(x, "SRC_"), **lw.dims(y), "RB": 0, "RH": 1, "RW": 1, "RC": 0}
        return [lw.op("reduce", {"op": "MEAN" if options["op"] == "AVG" else "MAX",
                                 "qdq": opts.get("qdq"), **_non_default(choice)}, params)]
    if n.attrs.get("pad_value") is not None:
        # explicit padding merged from a PAD (only when _capabilities.POOL_TAKES_PAD_VALUE)
        ex = n.attrs["explicit_padding"]
        params.update({"EX_T": ex[0], "EX_B": ex[1], "EX_L": ex[2], "EX_R": ex[3],
                       "PAD_VALUE": float(n.attrs["pad_value"])})
        options["explicit_pad"] = True
    return [lw.op("pool2d", options, params)]


def lower_reduce(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    axes = set(n.attrs["axes"])
    opts, _ = lw.epilogue()
    lw.bind("src", n.inputs[0])
    lw.bind("dst", n.outputs[0])
    params = {**lw.dims(n.inputs[0], "SRC_"), **lw.dims(n.outputs[0]),
              "RB": int(0 in axes), "RH": int(1 in axes), "RW": int(2 in axes), "RC": int(3 in axes)}
    steps = 1
    for flag, dim in (("RB", "SRC_B"), ("RH", "SRC_H"), ("RW", "SRC_W"), ("RC", "SRC_S")):
        steps *= params[dim] if params[flag] else 1
    choice, _ = choose_reduce(params["B"] * params["H"] * params["W"] * params["S"], steps, lw.cost)
    return [lw.op("reduce", {"op": REDUCE_KINDS[n.op], **opts, **_non_default(choice)}, params)]


def lower_softmax(lw: Lowerer) -> list[GpuOp]:
    opts, _ = lw.epilogue()
    lw.bind("src", lw.n.inputs[0])
    lw.bind("dst", lw.n.outputs[0])
    return [lw.op("softmax", {"log": False, **opts},
                  {**lw.dims(lw.n.outputs[0]), "beta": float(lw.n.attrs.get("beta", 1.0))})]


# ---------------------------------------------------------------------------------------------------------
# kernels (shaders/pool.lgk, shaders/reduce.lgk) and table entries
# ---------------------------------------------------------------------------------------------------------

# reduce: its shared memory is one vec4 per thread, so its groups may reach the 1024 threads most GPUs take
_REDUCE_SPLITS = SPLITS + (256, 512, 1024)

KERNELS: tuple[KernelSpec, ...] = (
    spec("pool2d", "pool.lgk", "AVERAGE_POOL_2D / MAX_POOL_2D",
         {"op": Opt("AVG", ("AVG", "MAX")), "act": ACT_NO_PRELU, "qdq": QDQ},
         [{"op": "AVG"}, {"op": "MAX"}] + [{"op": op, "act": a} for op, a in zip("AVG MAX".split() * 4, ACTIVATIONS[1:], strict=False)]
         + [{"op": "AVG", "qdq": True}]),
    spec("reduce", "reduce.lgk", "SUM/MEAN/REDUCE_MAX/REDUCE_MIN/REDUCE_PROD over any BHWC axes",
         {"op": Opt("SUM", ("SUM", "MEAN", "MAX", "MIN", "PROD")), "split": Opt(1, _REDUCE_SPLITS),
          "unroll": Opt(1, (1, 2, 4, 8)), "qdq": QDQ},
         [{"op": op} for op in ("SUM", "MEAN", "MAX", "MIN", "PROD")]
         + [{"split": n, "op": op} for n, op in zip(SPLITS[1:], ("MEAN", "MAX", "SUM", "MIN", "MEAN", "PROD"), strict=True)]
         + [{"split": n, "op": op, "unroll": u} for n, op, u in
            ((256, "MEAN", 4), (512, "MAX", 2), (1024, "SUM", 4), (1, "MIN", 4), (64, "PROD", 2), (512, "MEAN", 8))]
         + [{"op": "MEAN", "qdq": True}, {"op": "MEAN", "split": 64, "qdq": True}],
         shared_wg=split_wg),
    spec("softmax", "reduce.lgk", "SOFTMAX / LOG_SOFTMAX over channels", {"log": boolean(), "qdq": QDQ},
         [{"log": False}, {"log": True}, {"qdq": True}]),
)

OPS: dict[str, GpuOpEntry] = {
    "AVERAGE_POOL_2D": GpuOpEntry("pool2d", lower_pool, check_pool, ref=rf.average_pool,
                                  options=_POOL_OPTIONS),
    "MAX_POOL_2D": GpuOpEntry("pool2d", lower_pool, check_pool, ref=rf.max_pool, options=_POOL_OPTIONS),
    "MEAN": GpuOpEntry("reduce", lower_reduce, params=_AXES, ref=rf.mean),
    "SUM": GpuOpEntry("reduce", lower_reduce, params=_AXES, ref=rf.reduce_sum),
    "REDUCE_MAX": GpuOpEntry("reduce", lower_reduce, params=_AXES, ref=rf.reduce_max),
    "REDUCE_MIN": GpuOpEntry("reduce", lower_reduce, params=_AXES, ref=rf.reduce_min),
    "SOFTMAX": GpuOpEntry("softmax", lower_softmax, ref=rf.softmax),
}
