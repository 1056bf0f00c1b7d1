"""Small graph queries the passes share."""

from __future__ import annotations

from typing import Literal

from .._capabilities import ACTIVATIONS
from .._graph import GpuGraph, GpuNode

__all__ = ["CONV_LIKE", "EPILOGUE_HOSTS", "only_consumer", "position", "conv_params", "fusion_pays", "one_activation",
           "fused_inputs", "why_not_fused_conv"]

#: nodes whose kernels compute a weighted sum and take an epilogue (conv family, FC, BMM)
CONV_LIKE = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV",
                       "Convolution2DTransposeBias"})

#: nodes whose kernels apply an epilogue chain (fused activations, elementwise operands) before storing
EPILOGUE_HOSTS = CONV_LIKE | frozenset({"BATCH_MATMUL", "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM",
                                        "AVERAGE_POOL_2D", "MAX_POOL_2D"})


def only_consumer(g: GpuGraph, t: int, consumers: dict[int, list[GpuNode]] | None = None) -> GpuNode | None:
    """The single node reading tensor ``t`` (once, as input or epilogue operand), if ``t`` is internal."""
    if g.tensors[t].is_output or g.tensors[t].is_input:
        return None
    cons = (consumers if consumers is not None else g.consumers()).get(t, [])
    if len(cons) != 1 or cons[0].reads().count(t) != 1:
        return None
    return cons[0]


def position(g: GpuGraph) -> dict[int, int]:
    """Node id -> index in execution order."""
    return {n.id: i for i, n in enumerate(g.nodes)}


def conv_params(b: int, src_hw: tuple[int, int], src_s: int, dst_hw: tuple[int, int], channels: int, slices: int,
                k: int = 1, stride: tuple[int, int] = (1, 1), pad: tuple[int, int] = (0, 0)) -> dict[str, int]:
    """The conv2d launch parameters the cost model's ``choose_conv`` prices (a k x k conv, undilated, from
    ``src_s`` input slices at ``src_hw`` to ``channels`` outputs in ``slices`` slices at ``dst_hw``): the one
    home of that dict for the fusing passes, which price the unfused 1x1 (or first) conv against their kernel."""
    return {"B": b, "SRC_H": src_hw[0], "SRC_W": src_hw[1], "SRC_S": src_s, "H": dst_hw[0], "W": dst_hw[1],
            "C": channels, "S": slices, "KH": k, "KW": k, "STRIDE_H": stride[0], "STRIDE_W": stride[1],
            "PAD_T": pad[0], "PAD_L": pad[1], "DIL_H": 1, "DIL_W": 1, "SRC_SG": src_s, "DST_SG": slices}


def fusion_pays(fused_us: float, apart_us: float, always: bool, what: str, declined: dict[str, int],
                lines: list[str]) -> bool:
    """The cost model's verdict on one fusion (``always``: a measurement switch that takes every pair): True
    when the fused launch's estimate is below the launches it replaces; otherwise the decline is counted and
    the report says both estimates (``what`` names the pair)."""
    if fused_us < apart_us or always:
        return True
    declined["estimate above the two launches"] += 1
    lines.append(f"kept {what}: est {fused_us:.1f} us fused, {apart_us:.1f} apart")
    return False


def one_activation(g: GpuGraph, node: GpuNode) -> tuple[bool, str | None]:
    """(fusable, activation) of a conv's epilogue where a fused kernel applies it as an attribute of the node
    (a depthwise's, or an expansion's before the conv after it reads the result): none, one activation, or a
    per-channel PRELU."""
    if not node.epilogue:
        return True, None
    if len(node.epilogue) != 1:
        return False, None
    e = node.epilogue[0]
    if e.operand is None and e.op in ACTIVATIONS:
        return True, e.op
    if e.op == "PRELU" and e.operand is not None and g.is_constant(e.operand):
        s = g.tensors[e.operand].shape
        if s[:3] == (1, 1, 1) and s[3] in (1, g.tensors[node.outputs[0]].shape[3]):
            return True, "PRELU"
    return False, None


def fused_inputs(g: GpuGraph, node: GpuNode) -> tuple[str | None, int, int]:
    """(activation, PRELU alpha tensor or -1, bias tensor or -1) of a conv whose epilogue :func:`one_activation`
    accepted: what a fused kernel takes of it as its own inputs (the three fusing passes alike)."""
    _, act = one_activation(g, node)
    alpha = node.epilogue[0].operand if act == "PRELU" else -1
    bias = node.inputs[2] if len(node.inputs) > 2 else -1
    return act, alpha, bias


def why_not_fused_conv(g: GpuGraph, conv: GpuNode, k: int = 1,
                       epilogue: Literal["activation", "any"] = "activation") -> str:
    """Why the CONV_2D ``conv`` cannot be one of the convs a fused kernel computes ('' when it can): the one
    home of that check for ``fuse_dw_pw`` (the projection after a depthwise), ``fuse_pw_dw`` (the expansion
    before one) and ``fuse_small_expand`` (the next block's expansion after a projection).  How the conv meets
    the node it joins (its readers, which tensor it reads) is each pass's own test.

    The conv must be a ``k`` x ``k`` conv over all its input channels (groups 1) with constant weights and bias,
    float32 in and out, and, for k = 1, stride 1 and unpadded; a larger ``k`` is ``fuse_pw_dw``'s stem, whose
    geometry its kernel takes.  None of the fused kernels (dw_pw_conv2d, dw_pw_small, pw_dw_conv2d) reads an
    input through a resize (``in_resize``), scales it or adds to it (``inputs[3]``, ``inputs[4]``) or stores a second result
    (``store_pre``): those are conv2d's alone.  ``fuse_dw_pw`` runs before the passes that set them, so there
    the test only keeps the pass right in any order.  ``epilogue``: ``"activation"`` where the kernel applies
    the conv's epilogue as an attribute of the node (:func:`one_activation`: the expansions, whose result a
    second conv reads in the same launch), ``"any"`` where the conv's epilogue becomes the fused node's
    (the projection: ``match_epilogue`` then tests it against the kernel's slots)."""
    if conv.op != "CONV_2D" or not conv.bhwc:
        return "not a CONV_2D"
    if len(conv.outputs) != 1 or conv.attrs.get("in_resize") or conv.attrs.get("store_pre"):
        return "conv reading a resize or storing twice"
    if any(t >= 0 for t in conv.inputs[3:]):
        return "conv with an input scale or addend"
    if not g.is_constant(conv.inputs[1]):
        return "non-constant weights"
    if len(conv.inputs) > 2 and conv.inputs[2] >= 0 and not g.is_constant(conv.inputs[2]):
        return "non-constant bias"
    x, z = g.tensors[conv.inputs[0]], g.tensors[conv.outputs[0]]
    if {x.dtype, z.dtype} != {"float32"}:
        return "not float32"
    wt = g.tensors[conv.inputs[1]].ir_shape
    if len(wt) != 4 or tuple(wt[1:3]) != (k, k) or wt[3] != x.shape[3]:
        return f"not a {k}x{k} conv over all channels (groups 1)"
    if k == 1 and (int(conv.attrs.get("stride_h", 1)) != 1 or int(conv.attrs.get("stride_w", 1)) != 1):
        return "conv with a stride"
    if k == 1 and (any(conv.attrs.get("explicit_padding", (0, 0, 0, 0))) or z.shape[:3] != x.shape[:3]):
        return "conv with padding"
    if epilogue == "activation" and not one_activation(g, conv)[0]:
        return "conv epilogue is not one activation"
    return ""
