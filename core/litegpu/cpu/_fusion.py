"""Producer -> consumer fusions of two CPU nodes, applied by the interpreter at prepare.

A fusion runs two nodes as one step when the producer's only output is read by the
consumer alone (and is no graph output): the intermediate tensor is never made.  The
typical case is a zero PAD feeding a convolution, which already copies its input into
a zero-bordered buffer: the fused step pads by the PAD's widths as well, and the PAD's
copy disappears.

A fusion is registered for the *kinds of Prepared* the two kernels return::

    class DepthwisePrepared(Prepared): ...      # what the float depthwise kernel returns

    @register_fusion("PAD", "DEPTHWISE_CONV_2D", PadPrepared, DepthwisePrepared)
    def pad_depthwise(producer: FusionNode, consumer: FusionNode, slot: int) -> Prepared | None:
        ...

It only applies to nodes those exact kernels prepared: a kernel an application registers
later returns another Prepared and switches it off, while a kernel that hands a node to
the one registered before it (the hybrid int8-weight kernels do that for float nodes)
keeps it on, since the node then runs the original kernel.  ``slot`` is the consumer input
that reads the producer's output.  The returned :class:`Prepared` has the consumer's
outputs; its ``run`` receives the producer's inputs followed by the consumer's inputs,
with ``None`` in the consumer's ``slot``.  Returning None declines (the nodes then run
separately).  A fusion must give the same values as the two nodes run one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ._registry import NodeContext, Prepared, PrepareFn

__all__ = ["FusionNode", "register_fusion", "find_fusion"]


@dataclass(frozen=True)
class FusionNode:
    """A prepared node offered to a fusion: its context, what its kernel's prepare returned,
    and the kernel found for it.

    A producer that is already a fused step is offered as its last node, with its earlier
    nodes in ``chain`` (first to last); the fused step's inputs are those of the chain's
    nodes followed by its own, each consumer's slot of the previous node's output holding
    None.
    """

    ctx: NodeContext
    prepared: Prepared
    prepare: PrepareFn
    chain: tuple[FusionNode, ...] = ()


FuseFn = Callable[[FusionNode, FusionNode, int], Prepared | None]

_FUSIONS: dict[tuple[str, str], list[tuple[type, type, FuseFn]]] = {}


def register_fusion(producer_op: str, consumer_op: str, producer_kind: type[Prepared],
                    consumer_kind: type[Prepared]) -> Callable[[FuseFn], FuseFn]:
    def deco(fn: FuseFn) -> FuseFn:
        _FUSIONS.setdefault((producer_op, consumer_op), []).append((producer_kind, consumer_kind, fn))
        return fn

    return deco


def find_fusion(producer: FusionNode, consumer: FusionNode) -> FuseFn | None:
    for pk, ck, fn in _FUSIONS.get((producer.ctx.op.name, consumer.ctx.op.name), ()):
        if type(producer.prepared) is pk and type(consumer.prepared) is ck:
            return fn
    return None
