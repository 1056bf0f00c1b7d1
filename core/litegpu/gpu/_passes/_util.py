"""Small graph queries the passes share."""

from __future__ import annotations

from .._graph import GpuGraph, GpuNode

__all__ = ["CONV_LIKE", "EPILOGUE_HOSTS", "only_consumer", "position"]

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
