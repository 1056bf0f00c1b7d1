"""Merge a RESIZE_BILINEAR into the read of its only reader: a conv's residual read (``fuse_resize_residual``)
or a CONV_2D's input read (``fuse_resize_input``).  Both sample the resize's source with the resize kernel's
coordinate rules and blend (``bilinear_coord`` / ``bilerp`` in ``common.lgk``), so the values are those the
resize launch would have stored."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from .. import _layout as L
from .._capabilities import epilogue_fits
from .._cost import PROFILES, DeviceCost, dw_pw_work, estimate, in_invoke, input_loads, resize_work
from .._graph import DW_PW_OP, GpuGraph, GpuNode, Report
from ..ops.conv import dw_pw_split_tiling
from ._util import only_consumer

__all__ = ["fuse_resize_residual", "fuse_resize_input", "FUSE_RESIZE_RESIDUAL", "FUSE_RESIZE_INPUT",
           "FUSE_RESIZE_DW_INPUT"]

#: A/B switch (``bench/gpu_profile.py --set litegpu.gpu._passes.resize_read.FUSE_RESIZE_RESIDUAL=False``):
#: False keeps every resize a launch of its own.  Each merge saves one launch (pose_landmark_full: 5); the
#: conv kernel then makes four residual loads and a blend per output instead of one load.
FUSE_RESIZE_RESIDUAL = True

#: A/B switch (``--set litegpu.gpu._passes.resize_read.FUSE_RESIZE_INPUT=False``): False keeps the resize in
#: front of a conv a launch of its own.  Each merge saves one launch (selfie_segmentation's decoder: 3,
#: palm_detection_full's feature pyramid: 2); the conv then makes four loads and a blend per input value
#: instead of one load (cheap on 1x1 convs, which read each value once; a k x k conv re-blends k^2 times).
FUSE_RESIZE_INPUT = True

#: A/B switch (``--set litegpu.gpu._passes.resize_read.FUSE_RESIZE_DW_INPUT=False``): False keeps a resize read by a
#: fused depthwise -> 1x1 node (``dw_pw_conv2d``, unstaged) a launch of its own.  Each merge saves one launch
#: (pose_landmark_full's last upsampling, 128x128 -> 256x256 x 8 channels, read by the next block's depthwise and
#: as its residual); the depthwise then blends four loads per tap (a 3x3 window: 36 loads instead of 9), so the
#: cost model weighs the two (``_dw_input_pays``).
FUSE_RESIZE_DW_INPUT = True


def _resize_flags(g: GpuGraph, node: GpuNode) -> tuple[bool, bool] | None:
    """(align_corners, half_pixel_centers) of a plain float32 BHWC RESIZE_BILINEAR (no epilogue), else None."""
    if node.op != "RESIZE_BILINEAR" or not node.bhwc or node.epilogue or len(node.outputs) != 1:
        return None
    src, t = node.inputs[0], node.outputs[0]
    if g.is_constant(src) or g.tensors[src].dtype != "float32" or g.tensors[t].dtype != "float32":
        return None
    s, o = g.tensors[src].shape, g.tensors[t].shape
    if len(s) != 4 or len(o) != 4 or s[0] != o[0] or s[3] != o[3]:
        return None
    return bool(node.attrs.get("align_corners")), bool(node.attrs.get("half_pixel_centers"))


def _resizes_read_once(g: GpuGraph) -> Iterator[tuple[GpuNode, tuple[bool, bool], GpuNode]]:
    """(resize, its flags, its only reader) for each plain RESIZE_BILINEAR (``_resize_flags``) that one node
    reads; the graph may change between items (each reader is looked up when its resize comes)."""
    for rs in list(g.nodes):
        flags = _resize_flags(g, rs)
        if flags is None:
            continue
        node = only_consumer(g, rs.outputs[0])
        if node is not None:
            yield rs, flags, node


def fuse_resize_residual(g: GpuGraph) -> Report:
    """Remove a ``RESIZE_BILINEAR`` whose only reader is a conv-like node adding (or multiplying) it as its
    residual: the epilogue step reads the resize's input with ``Epilogue.resize = (align_corners,
    half_pixel_centers)`` and the kernel samples it bilinearly at each output pixel as it reads the residual
    (template option ``residual_resize``, params ``RES_H/RES_W/RES_SCALE_*/RES_HALF``; the same coordinate
    rules and blend as the resize kernel, ``bilinear_coord``/``bilerp`` in ``common.lgk``).

    Feature-pyramid top-down paths (pose_landmark_full: ``ADD(resize(coarse), conv(fine))`` five times) lose
    the resize launch.  Runs after ``fuse_dw_pw`` (the fused depthwise -> 1x1 kernel takes it too) and
    after ``fuse_pool_residual`` (a residual is merged with one producer at most).  Resizes read elsewhere,
    with an epilogue, or feeding a kernel without the option (depthwise_conv2d, conv2d_tiled is then not
    chosen) stay.
    """
    if not FUSE_RESIZE_RESIDUAL:
        return ["off (FUSE_RESIZE_RESIDUAL = False)"]
    lines: Report = []
    for rs, flags, node in _resizes_read_once(g):
        src, t = rs.inputs[0], rs.outputs[0]
        if t in node.inputs:
            continue
        j = next((i for i, e in enumerate(node.epilogue) if e.operand == t), None)
        if j is None or node.epilogue[j].op not in ("ADD", "MUL"):
            continue
        step = node.epilogue[j]
        if step.pool or step.zero_extend or step.resize is not None:
            continue
        steps = [*node.epilogue[:j], replace(step, operand=src, resize=flags), *node.epilogue[j + 1:]]
        if not epilogue_fits(g, node, steps):
            continue
        node.epilogue = steps
        node.origin = tuple(sorted(set(node.origin) | set(rs.origin)))
        g.remove_node(rs)
        lines.append(f"merged RESIZE_BILINEAR#{rs.id} into the residual read of {node.describe()}")
    return [f"merged {len(lines)} RESIZE_BILINEAR into residual reads", *lines]


def fuse_resize_input(g: GpuGraph) -> Report:
    """Remove a ``RESIZE_BILINEAR`` whose only reader is a ``CONV_2D`` reading it as its input (once, not also
    as a residual): the conv reads the resize's source instead, with ``attrs["in_resize"] = (H, W,
    align_corners, half_pixel_centers)`` (the resized size: the conv's geometry is unchanged), and blends
    four loads per input value (template option ``in_resize``, params ``IN_H/IN_W/IN_SCALE_*/IN_HALF``).

    Decoder / feature-pyramid blocks that upsample and then project (``conv1x1(resize(x))``:
    selfie_segmentation 3, palm_detection_full 2).  Runs before ``fuse_squeeze_excite``, which then folds a
    gate MUL the resize read into the conv as well (the kernel scales the four loads before the blend:
    selfie_segmentation's first decoder block).  Resizes with an epilogue or another reader stay; so do
    resizes read by depthwise or fused depthwise -> 1x1 nodes (no such option).
    """
    if not FUSE_RESIZE_INPUT:
        return ["off (FUSE_RESIZE_INPUT = False)"]
    lines: Report = _fuse_resize_dw_input(g)
    for rs, flags, node in _resizes_read_once(g):
        src, t = rs.inputs[0], rs.outputs[0]
        if node.op != "CONV_2D" or not node.bhwc or node.inputs[0] != t or len(node.inputs) > 3:
            continue
        if node.attrs.get("in_resize") or g.tensors[t].dtype != "float32":
            continue
        _, h, w, _ = g.tensors[t].shape
        node.inputs[0] = src
        node.attrs["in_resize"] = (h, w, *flags)
        node.origin = tuple(sorted(set(node.origin) | set(rs.origin)))
        g.remove_node(rs)
        lines.append(f"merged RESIZE_BILINEAR#{rs.id} into the input read of {node.describe()}")
    merged = sum(ln.startswith("merged") for ln in lines)  # (the lines of resizes kept say "kept")
    return [f"merged {merged} RESIZE_BILINEAR into conv input reads", *lines]


def _fuse_resize_dw_input(g: GpuGraph) -> Report:
    """The ``DW_PW_CONV_2D`` half of :func:`fuse_resize_input` (``FUSE_RESIZE_DW_INPUT``): a plain resize whose only
    reader is an unstaged fused depthwise -> 1x1 node (kernel ``dw_pw_conv2d``; not ``small`` nor ``staged``)
    reading it as its depthwise's input, and perhaps once more as the operand of its epilogue's first ADD / MUL
    (a residual block after an upsampling: pose_landmark_full's last one).  The node reads the resize's source
    with ``attrs["in_resize"]`` (its depthwise taps each the resize kernel's blend of four loads, template option
    ``in_resize``), and the residual read, if any, samples it the same way (``Epilogue.resize``, as
    :func:`fuse_resize_residual` sets it).

    Taken where the cost model says it pays (:func:`_dw_input_pays`): the merged launch blends four loads at every
    tap, so it is slower on the GPU than the resize and the block's launch together (pose's 256x256 x 8-channel
    block: 18.6 us against 5.2 + 8.7 on an H100, docs/performance.md tenth session); it saves a launch, which pays
    where the API's host cost of a launch (``launch_host_us``: NVIDIA's OpenCL) is above the difference, not
    where a replay is one command buffer (Vulkan)."""
    if not FUSE_RESIZE_DW_INPUT:
        return []
    dev = g.options.get("cost") or PROFILES["generic"]
    lines: Report = []
    consumers = g.consumers()
    for rs in list(g.nodes):
        flags = _resize_flags(g, rs)
        if flags is None:
            continue
        src, t = rs.inputs[0], rs.outputs[0]
        readers = consumers.get(t, [])
        if g.tensors[t].is_output or len(readers) != 1:
            continue
        node = readers[0]
        if node.op != DW_PW_OP or not node.bhwc or node.inputs[0] != t or node.attrs.get("in_resize") \
                or node.attrs.get("small") or node.attrs.get("staged") or t in node.inputs[1:]:
            continue
        steps = list(node.epilogue)
        uses = [j for j, e in enumerate(steps) if e.operand == t]
        if uses:
            step = steps[uses[0]]
            if uses != [0] or step.op not in ("ADD", "MUL") or step.pool or step.zero_extend or step.resize is not None:
                continue
            steps[0] = replace(step, operand=src, resize=flags)
            if not epilogue_fits(g, node, steps):
                continue
        pays, fused_us, apart_us = _dw_input_pays(g, node, t, dev)
        if not pays:
            lines.append(f"kept RESIZE_BILINEAR#{rs.id} before {node.describe()}: est {fused_us:.1f} us merged, "
                         f"{apart_us:.1f} apart")
            continue
        _, h, w, _ = g.tensors[t].shape
        node.inputs[0] = src
        node.epilogue = steps
        node.attrs["in_resize"] = (h, w, *flags)
        node.origin = tuple(sorted(set(node.origin) | set(rs.origin)))
        g.remove_node(rs)
        consumers = g.consumers()
        lines.append(f"merged RESIZE_BILINEAR#{rs.id} into the depthwise input read of {node.describe()}"
                     + (" and its residual read" if uses else "") + f" (est {fused_us:.1f} us against {apart_us:.1f})")
    return lines


def _dw_input_pays(g: GpuGraph, node: GpuNode, t: int, dev: DeviceCost) -> tuple[bool, float, float]:
    """(pays, merged us, apart us): the cost model's word on reading the resize ``t`` inside the DW_PW node ``node``
    -- its ``dw_pw_conv2d`` launch with the input read ``in_resize`` makes (``_cost.input_loads``) and the tiling
    the lowering renders (``ops.conv.dw_pw_split_tiling``) against the resize launch (``resize_work``) and the
    plain one, each launch's share of an invoke (``in_invoke``)."""
    b, h, w, _ = g.tensors[t].shape
    _, oh, ow, o = g.tensors[node.outputs[0]].shape
    dw_w = g.tensors[node.inputs[1]].ir_shape
    p = {"B": b, "H": oh, "W": ow, "S": L.slices(o), "SRC_S": L.slices(g.tensors[t].shape[3]),
         "KH": int(dw_w[1]), "KW": int(dw_w[2])}
    tiling = dw_pw_split_tiling(b, oh, ow, p["SRC_S"], p["S"], dev)
    merged = in_invoke(estimate(dw_pw_work(p, **tiling, in_loads=input_loads({"in_resize": True}, p)), dev), dev)
    resize = resize_work({"B": b, "H": h, "W": w, "S": p["SRC_S"]})
    apart = in_invoke(estimate(resize, dev), dev) + in_invoke(estimate(dw_pw_work(p, **tiling), dev), dev)
    return merged < apart, merged, apart
