"""Merge a constant zero PAD of H/W into the convolution or pool that reads it."""

from __future__ import annotations

from .. import _capabilities
from .._geometry import PADDING_VALID, window_padding
from .._graph import GpuGraph, Report
from ._util import only_consumer

__all__ = ["merge_pad"]

_CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")
_POOLS = ("MAX_POOL_2D", "AVERAGE_POOL_2D")


def _pool_has_own_padding(attrs, in_hw) -> bool:
    if int(attrs.get("padding", PADDING_VALID)) == PADDING_VALID:
        return False
    kh, kw = int(attrs["filter_height"]), int(attrs["filter_width"])
    ph = window_padding(int(attrs["padding"]), in_hw[0], kh, int(attrs.get("stride_h", 1)))
    pw = window_padding(int(attrs["padding"]), in_hw[1], kw, int(attrs.get("stride_w", 1)))
    return any(ph) or any(pw)


def merge_pad(g: GpuGraph) -> Report:
    """Fold ``PAD``/``PADV2`` (constant, H/W only, non-negative) into the single node reading it.

    CONV_2D / DEPTHWISE_CONV_2D read zeros outside their input, so a zero pad
    becomes ``attrs["explicit_padding"] = (top, bottom, left, right)`` (added
    to whatever SAME padding the op computes on the padded size).  Pools skip
    out-of-bounds cells in TFLite (max ignores them, average does not count
    them), which differs from reading padded values, so a pool takes the pad
    only when it has no padding of its own, and records
    ``attrs["pad_value"]``: cells of the explicit padding hold that value and
    take part in the window (counted by AVERAGE_POOL_2D) -- exactly the PAD's
    meaning, for any pad value.  Pools take a pad only while
    ``_capabilities.POOL_TAKES_PAD_VALUE`` says the pool kernel implements it.
    """
    lines: Report = []
    consumers = g.consumers()
    for pad in list(g.nodes):
        if pad.op not in ("PAD", "PADV2") or not pad.bhwc or pad.epilogue:
            continue
        p = pad.attrs["paddings"]
        value = float(pad.attrs.get("pad_value", 0.0))
        if p[0] != (0, 0) or p[3] != (0, 0) or min(min(q) for q in p) < 0:
            continue
        t = pad.outputs[0]
        node = only_consumer(g, t, consumers)
        if node is None or not node.inputs or node.inputs[0] != t or t in node.inputs[1:]:
            continue
        src = pad.inputs[0]
        if node.op in _CONVS:
            if value != 0.0:
                continue
        elif node.op in _POOLS:
            if not _capabilities.POOL_TAKES_PAD_VALUE:
                continue
            if _pool_has_own_padding(node.attrs, g.tensors[t].shape[1:3]) or "pad_value" in node.attrs:
                continue
            node.attrs["pad_value"] = value
        else:
            continue
        ex = node.attrs.get("explicit_padding", (0, 0, 0, 0))
        node.attrs["explicit_padding"] = (ex[0] + p[1][0], ex[1] + p[1][1], ex[2] + p[2][0], ex[3] + p[2][1])
        node.inputs[0] = src
        node.origin = tuple(sorted(set(node.origin) | set(pad.origin)))
        g.remove_node(pad)
        consumers = g.consumers()
        lines.append(f"merged PAD#{pad.id} {p[1]}x{p[2]} into {node.describe()}")
    return [f"merged {len(lines)} PAD nodes into convolutions/pools", *lines]
