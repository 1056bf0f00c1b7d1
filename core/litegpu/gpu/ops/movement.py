"""Data movement: CONCATENATION, the gather copies (RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE), the window
copies (SLICE, STRIDED_SLICE, SPLIT, SPLIT_V), PAD / PADV2 / MIRROR_PAD, DEPTH_TO_SPACE and SPACE_TO_DEPTH;
all kernels in ``shaders/copy.lgk``.  No arithmetic and no epilogue: each output element is one input
element (or the pad value).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..._delegate import NodeView
from .. import _layout as L
from .. import _reference_ops as rf
from .._graph import GpuOp
from .._kernel_specs import KernelSpec, Opt, boolean, spec
from ._entry import GpuOpEntry, Lowerer, check_4d, opt

__all__ = ["OPS", "KERNELS", "MAX_CONCAT_INPUTS"]

MAX_CONCAT_INPUTS = 8  # the concat template renders up to 8 inputs


def check_concat(node: NodeView) -> str:
    n = len([t for t in node.inputs if t is not None])
    if n > MAX_CONCAT_INPUTS:
        return f"CONCATENATION of {n} inputs (the kernel takes up to {MAX_CONCAT_INPUTS})"
    return ""


def check_strided_slice(node: NodeView) -> str:
    if opt(node, "ellipsis_mask") or opt(node, "new_axis_mask"):
        return "STRIDED_SLICE with ellipsis_mask or new_axis_mask"
    return ""


def lower_concat(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    ins = [t for t in n.inputs if t >= 0]
    axis = int(n.attrs["axis"])
    params = lw.dims(n.outputs[0])
    # _passes/reshape_concat: inputs read through a RESHAPE merged into the read (their logical extent along
    # the axis is what is left of the output's other dims; RH/RW/RC the source tensor's own BHWC dims)
    reshaped = set(n.attrs.get("reshaped_inputs", ()))
    out = lw.shape(n.outputs[0])
    others = int(np.prod([d for a, d in enumerate(out) if a != axis]))
    mask = 0
    for i, t in enumerate(ins):
        lw.tensor_or_const(f"in{i}", t)
        if i in reshaped:
            _, rh, rw, rc = lw.shape(t)
            params[f"E{i}"] = int(np.prod(lw.shape(t))) // others
            params.update({f"RH{i}": rh, f"RW{i}": rw, f"RC{i}": rc})
            mask |= 1 << i
        else:
            params[f"E{i}"] = lw.shape(t)[axis]
    lw.bind("dst", n.outputs[0])
    return [lw.op("concat", {"axis": axis, "n": len(ins), "reshaped": mask or None}, params)]


def _row_major_strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def lower_gather(lw: Lowerer) -> list[GpuOp]:
    """RESHAPE and TRANSPOSE as the ``gather`` template: output logical dims D0..D5 (row-major, leading 1s),
    T_i the source row-major stride of the axis output axis i comes from."""
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    out = lw.shape(y)
    if n.op == "TRANSPOSE":
        perm = list(n.attrs["perm"])
        src_strides = _row_major_strides(lw.shape(x))
        dims = [1, 1, *out]
        strides = [0, 0, *[src_strides[p] for p in perm]]
    else:
        total = int(np.prod(out))
        dims = [1, 1, 1, 1, 1, total]
        strides = [0, 0, 0, 0, 0, 1]
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {**lw.dims(y), "SRC_H": lw.shape(x)[1], "SRC_W": lw.shape(x)[2], "SRC_C": lw.shape(x)[3],
              "SRC_S": L.slices(lw.shape(x)[3])}
    params.update({f"D{i}": dims[i] for i in range(1, 6)})
    params.update({f"T{i}": strides[i] for i in range(6)})
    return [lw.op("gather", {}, params)]


def _slice_op(lw: Lowerer, src: int, dst: int, ranges: Sequence[tuple[int, int, int]]) -> GpuOp:
    sub = Lowerer(lw.g, lw.n, lw.p, lw._epilogue)
    sub.bind("src", src)
    sub.bind("dst", dst)
    s = lw.shape(src)
    params = {**sub.dims(dst), "SRC_H": s[1], "SRC_W": s[2], "SRC_C": s[3], "SRC_S": L.slices(s[3])}
    for ax, name in enumerate("BHWC"):
        params[f"BEG_{name}"] = int(ranges[ax][0])
        params[f"STR_{name}"] = int(ranges[ax][2])
    return sub.op("slice", {}, params, outputs=[dst])


def lower_slice(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    return [_slice_op(lw, n.inputs[0], n.outputs[0], n.attrs["ranges"])]


def lower_split(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    x = n.inputs[1] if n.op == "SPLIT" else n.inputs[0]
    axis = int(n.attrs["axis"])
    ops, offset = [], 0
    for t in n.outputs:
        ranges = [(0, 0, 1)] * 4
        ranges[axis] = (offset, 0, 1)
        ops.append(_slice_op(lw, x, t, ranges))
        offset += lw.shape(t)[axis]
    return ops


def lower_pad(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    p = n.attrs["paddings"]
    mode = "CONSTANT" if n.op != "MIRROR_PAD" else ("REFLECT" if int(n.attrs.get("mode", 0)) == 0 else "SYMMETRIC")
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {**lw.dims(y), **lw.dims(x, "SRC_"), "P_B": p[0][0], "P_H": p[1][0], "P_W": p[2][0], "P_C": p[3][0],
              "value": float(n.attrs.get("pad_value", 0.0))}
    return [lw.op("pad", {"mode": mode}, params)]


def lower_space(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    lw.bind("src", x)
    lw.bind("dst", y)
    s = lw.shape(x)
    params = {**lw.dims(y), "SRC_H": s[1], "SRC_W": s[2], "SRC_S": L.slices(s[3]), "BS": int(n.attrs["block_size"])}
    if n.op == "SPACE_TO_DEPTH":
        params["SRC_C"] = s[3]
    return [lw.op(n.op.lower(), {}, params)]


# ---------------------------------------------------------------------------------------------------------
# kernels (shaders/copy.lgk) and table entries
# ---------------------------------------------------------------------------------------------------------

KERNELS: tuple[KernelSpec, ...] = (
    spec("concat", "copy.lgk", "CONCATENATION of n inputs along a BHWC axis",
         {"axis": Opt(3, (0, 1, 2, 3)), "n": Opt(2, tuple(range(1, 9))),
          # a bit mask over the (up to 8) inputs
          "reshaped": Opt(0, check=lambda m: isinstance(m, int) and 0 <= m < 1 << MAX_CONCAT_INPUTS),
          "dst_bhwc": boolean()},
         [{"axis": a, "n": 2} for a in range(3)] + [{"axis": 3, "n": k} for k in range(1, 9)] + [{"axis": 1, "n": 8}]
         # inputs read through a merged RESHAPE (_passes/reshape_concat): palm / face detection heads
         + [{"axis": 2, "n": 2, "reshaped": 3}, {"axis": 1, "n": 3, "reshaped": 5}, {"axis": 0, "n": 2, "reshaped": 2}]
         # a host output written as dense BHWC (gpu/_runtime.compile_graph: no phwc4_to_bhwc launch)
         + [{"axis": 2, "n": 2, "reshaped": 3, "dst_bhwc": True}, {"axis": 3, "n": 3, "dst_bhwc": True}]),
    spec("gather", "copy.lgk", "TRANSPOSE (up to 6-D) / RESHAPE as a gather-by-index copy"),
    spec("slice", "copy.lgk", "SLICE / STRIDED_SLICE / SPLIT / SPLIT_V (a strided window)"),
    spec("pad", "copy.lgk", "PAD / PADV2 / MIRROR_PAD",
         {"mode": Opt("CONSTANT", ("CONSTANT", "REFLECT", "SYMMETRIC"))},
         [{"mode": m} for m in ("CONSTANT", "REFLECT", "SYMMETRIC")]),
    spec("depth_to_space", "copy.lgk", "DEPTH_TO_SPACE (DCR order)"),
    spec("space_to_depth", "copy.lgk", "SPACE_TO_DEPTH"),
)

OPS: dict[str, GpuOpEntry] = {
    "CONCATENATION": GpuOpEntry("concat", lower_concat, check_concat, ref=rf.concatenation),
    "RESHAPE": GpuOpEntry("gather", lower_gather, params={1: "shape"}, ref=rf.reshape),
    "SQUEEZE": GpuOpEntry("gather", lower_gather, ref=rf.reshape),
    "EXPAND_DIMS": GpuOpEntry("gather", lower_gather, params={1: "axis"}, ref=rf.reshape),
    "TRANSPOSE": GpuOpEntry("gather", lower_gather, params={1: "permutation"}, ref=rf.transpose),
    "SLICE": GpuOpEntry("slice", lower_slice, params={1: "begin", 2: "size"}, ref=rf.slice_op),
    "STRIDED_SLICE": GpuOpEntry("slice", lower_slice, check_strided_slice,
                                {1: "begin", 2: "end", 3: "strides"}, ref=rf.slice_op),
    "SPLIT": GpuOpEntry("slice", lower_split, params={0: "axis"}, ref=rf.split),
    "SPLIT_V": GpuOpEntry("slice", lower_split, params={1: "size_splits", 2: "axis"}, ref=rf.split),
    "PAD": GpuOpEntry("pad", lower_pad, params={1: "paddings"}, ref=rf.pad),
    "PADV2": GpuOpEntry("pad", lower_pad, params={1: "paddings", 2: "pad value"}, ref=rf.pad),
    "MIRROR_PAD": GpuOpEntry("pad", lower_pad, params={1: "paddings"}, ref=rf.pad),
    "DEPTH_TO_SPACE": GpuOpEntry("depth_to_space", lower_space, check_4d, ref=rf.depth_to_space,
                                 options=("block_size",)),
    "SPACE_TO_DEPTH": GpuOpEntry("space_to_depth", lower_space, check_4d, ref=rf.space_to_depth,
                                 options=("block_size",)),
}
