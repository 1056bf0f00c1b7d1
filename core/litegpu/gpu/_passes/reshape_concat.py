"""Merge a RESHAPE whose only reader is a CONCATENATION into the concat's read of that input."""

from __future__ import annotations

import math

from .._graph import GpuGraph, Report
from ._util import only_consumer

__all__ = ["fuse_reshape_concat", "FUSE_RESHAPE_CONCAT"]

#: A/B switch (``--set litegpu.gpu._passes.reshape_concat.FUSE_RESHAPE_CONCAT=False``): False keeps each such
#: RESHAPE a ``gather`` launch of its own.  Detection heads (palm_detection_full, face_detection_short_range:
#: 4 each) lose them; the concat then fetches each lane by its flat index, as the gather did.
FUSE_RESHAPE_CONCAT = True


def fuse_reshape_concat(g: GpuGraph) -> Report:
    """Remove a ``RESHAPE`` (float32, no epilogue) read only by a ``CONCATENATION`` along B, H or W: the concat
    reads the reshape's source instead, listed in ``attrs["reshaped_inputs"]``, and fetches each lane by its
    row-major flat index (template option ``reshaped``, a bit mask of such inputs, params ``RH/RW/RC<i>``: the
    source's dims), the very element the ``gather`` launch of the RESHAPE would have stored there.

    SSD-style detection heads reshape each level's per-anchor conv output to (1, 1, anchors, k) and concatenate
    the levels: palm_detection_full and face_detection_short_range lose 4 launches each.  Concats along the
    channel axis keep their reshapes (the template fetches whole channel runs there).
    """
    if not FUSE_RESHAPE_CONCAT:
        return ["off (FUSE_RESHAPE_CONCAT = False)"]
    lines: Report = []
    producers, consumers = g.producers(), g.consumers()
    for cat in list(g.nodes):
        if cat.op != "CONCATENATION" or not cat.bhwc or cat.epilogue or len(cat.outputs) != 1:
            continue
        out = g.tensors[cat.outputs[0]]
        axis = int(cat.attrs.get("axis", 3))
        if axis not in (0, 1, 2) or out.dtype != "float32" or len(out.shape) != 4:
            continue
        merged = set(cat.attrs.get("reshaped_inputs", ()))
        for i, t in enumerate(cat.inputs):
            rs = producers.get(t)
            if i in merged or rs is None or rs.op != "RESHAPE" or not rs.bhwc or rs.epilogue:
                continue
            src = rs.inputs[0]
            if only_consumer(g, t, consumers) is not cat or g.is_constant(src) or src in cat.inputs:
                continue
            if g.tensors[src].dtype != "float32" or math.prod(g.tensors[src].shape) != math.prod(g.tensors[t].shape):
                continue
            cat.inputs[i] = src
            merged.add(i)
            cat.origin = tuple(sorted(set(cat.origin) | set(rs.origin)))
            g.remove_node(rs)
            producers, consumers = g.producers(), g.consumers()
            lines.append(f"merged RESHAPE#{rs.id} into input {i} of {cat.describe()}")
        if merged:
            cat.attrs["reshaped_inputs"] = tuple(sorted(merged))
    return [f"merged {len(lines)} RESHAPE into concat reads", *lines]
