"""Small graph queries the passes share."""

from __future__ import annotations

from .._graph import GpuGraph, GpuNode

__all__ = ["CONV_LIKE", "EPILOGUE_HOSTS", "only_consumer", "position", "conv_params", "fusion_pays"]

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
