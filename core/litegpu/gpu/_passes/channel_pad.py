"""Merge a zero channel PAD that only feeds a residual ADD into that ADD's read (BlazeFace-style blocks)."""

from __future__ import annotations

import math
from dataclasses import replace

from .._capabilities import epilogue_fits
from .._graph import GpuGraph, GpuNode, Report
from ._util import only_consumer

__all__ = ["fuse_channel_pad"]


def _channel_pad(g: GpuGraph, pad: GpuNode) -> bool:
    """``pad`` appends zero channels and does nothing else (a constant +0.0, trailing end of C only)."""
    if pad.op not in ("PAD", "PADV2") or not pad.bhwc or pad.epilogue or len(pad.outputs) != 1:
        return False
    p = [tuple(q) for q in pad.attrs["paddings"]]
    value = float(pad.attrs.get("pad_value", 0.0))
    if p[:3] != [(0, 0)] * 3 or p[3][0] != 0 or p[3][1] <= 0:
        return False
    # +0.0 only: x + (-0.0) keeps a -0.0 that the merged read (+0.0) would not
    if value != 0.0 or math.copysign(1.0, value) < 0:
        return False
    src, t = pad.inputs[0], pad.outputs[0]
    return (not g.is_constant(src) and g.tensors[src].dtype == "float32" and g.tensors[t].dtype == "float32"
            and g.tensors[src].shape[:3] == g.tensors[t].shape[:3])


def _into_epilogue(g: GpuGraph, node: GpuNode, t: int, src: int) -> bool:
    """``node``'s epilogue ADDs ``t``: the step reads ``src`` zero-extended, if the kernel's slot takes it."""
    if t in node.inputs:
        return False
    k = next(j for j, e in enumerate(node.epilogue) if e.operand == t)
    step = node.epilogue[k]
    if step.op != "ADD":
        return False
    steps = [*node.epilogue[:k], replace(step, operand=src, zero_extend=True), *node.epilogue[k + 1:]]
    if not epilogue_fits(g, node, steps):
        return False
    node.epilogue = steps
    return True


def _into_binary(g: GpuGraph, node: GpuNode, t: int, src: int) -> bool:
    """A plain ``ADD`` node reads ``t``: it reads ``src`` as its rhs, zero-extended (``binary`` kernel
    option ``rhs_channels="fewer"``).  ADD commutes, so ``t`` may be either input."""
    if node.op != "ADD" or not node.bhwc or len(node.inputs) != 2 or node.attrs.get("zero_extend_rhs"):
        return False
    if g.tensors[node.outputs[0]].shape != g.tensors[t].shape:  # the padded operand is not broadcast
        return False
    other = node.inputs[1] if node.inputs[0] == t else node.inputs[0]
    node.inputs = [other, src]
    node.attrs["zero_extend_rhs"] = True
    return True


def fuse_channel_pad(g: GpuGraph) -> Report:
    """Remove a ``PAD``/``PADV2`` that appends zero channels (paddings only at the end of C, value +0.0)
    when its only reader adds it: the reader reads the PAD's input instead, as zeros past its channels.

    BlazeFace-style residual blocks widen the skip path this way (``ADD(conv(x), PAD(x))``, often
    after a MAX_POOL_2D).  Two readers can take it:

    * a conv-like node whose epilogue ADDs the padded tensor (``fuse_elementwise`` made it the
      residual): the step becomes ``Epilogue(..., zero_extend=True)`` when the kernel's residual slot
      takes it (``_capabilities``: conv2d, option ``residual_channels="fewer"``);
    * an ``ADD`` node (``binary`` kernel): the PAD's input becomes its rhs with
      ``attrs["zero_extend_rhs"]`` (option ``rhs_channels="fewer"``).

    PADs of other axes, with another value, or read elsewhere (or a partition output) stay.
    Runs after the fusion passes, so the ADD already sits where it will be computed.
    """
    lines: Report = []
    consumers = g.consumers()
    for pad in list(g.nodes):
        if not _channel_pad(g, pad):
            continue
        src, t = pad.inputs[0], pad.outputs[0]
        node = only_consumer(g, t, consumers)
        if node is None:
            continue
        if any(e.operand == t for e in node.epilogue):
            if not _into_epilogue(g, node, t, src):
                continue
        elif not _into_binary(g, node, t, src):
            continue
        node.origin = tuple(sorted(set(node.origin) | set(pad.origin)))
        g.remove_node(pad)
        consumers = g.consumers()
        c = g.tensors[src].shape[3], g.tensors[t].shape[3]
        lines.append(f"merged PAD#{pad.id} (channels {c[0]} -> {c[1]}) into {node.describe()}")
    return [f"merged {len(lines)} channel PADs into residual reads", *lines]
