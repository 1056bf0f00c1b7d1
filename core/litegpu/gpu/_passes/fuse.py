"""Fuse elementwise chains and activations into the node producing their input."""

from __future__ import annotations

from collections import Counter

from .._capabilities import epilogue_fits
from .._graph import Epilogue, GpuGraph, GpuNode, Report
from ..ops import ACTIVATIONS_FUSABLE, ELEMENTWISE_FUSABLE
from ._util import CONV_LIKE, EPILOGUE_HOSTS, only_consumer, position

__all__ = ["fuse_elementwise", "fuse_activations", "fuse_shared_residual", "ELEMENTWISE_FUSABLE",
           "ACTIVATIONS_FUSABLE", "FUSE_SHARED_RESIDUAL"]

#: A/B switch (``--set litegpu.gpu._passes.fuse.FUSE_SHARED_RESIDUAL=False``): False leaves an ADD/MUL of a conv
#: result that another op reads too as a launch of its own.  Each fusion saves a launch (selfie_segmentation's
#: decoder: 3) for a second store of the conv result from the conv kernel.
FUSE_SHARED_RESIDUAL = True

#: binary nodes host a second elementwise op too (the binary kernel's residual option)
_ELEMENTWISE_HOSTS = CONV_LIKE | {"BATCH_MATMUL"} | ELEMENTWISE_FUSABLE


def _absorb(g: GpuGraph, host: GpuNode, nxt: GpuNode, step: Epilogue) -> None:
    """``host`` takes over ``nxt``: its result goes through ``step`` and ``nxt``'s own epilogue and is
    written to ``nxt``'s output.  The host moves to ``nxt``'s place when an operand of ``step`` is not
    ready at the host's place (always legal: the host's inputs are ready earlier and ``nxt`` was its
    only reader)."""
    pos = position(g)
    if step.operand is not None and not g.is_constant(step.operand) and not g.tensors[step.operand].is_input:
        producer = g.producers().get(step.operand)
        if producer is not None and pos[producer.id] > pos[host.id]:
            g.remove_node(host)
            g.nodes.insert(g.node_index(nxt), host)
    host.epilogue = [*host.epilogue, step, *nxt.epilogue]
    host.outputs = list(nxt.outputs)
    host.origin = tuple(sorted(set(host.origin) | set(nxt.origin)))
    g.remove_node(nxt)


def _broadcasts_into(g: GpuGraph, operand: int, shape: tuple[int, ...]) -> bool:
    s = g.tensors[operand].shape
    return all(a == b or a == 1 for a, b in zip(s, shape, strict=False))


def fuse_elementwise(g: GpuGraph) -> Report:
    """Fuse ``ADD``/``SUB``/``MUL``/``DIV``/``MAXIMUM``/``MINIMUM`` into the conv-like node
    (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV, Convolution2DTransposeBias,
    BATCH_MATMUL) producing one of its inputs, when that node has no other reader.

    The other operand -- a constant or a tensor computed elsewhere (a residual
    connection) -- becomes an :class:`Epilogue` operand, broadcast BHWC-wise
    into the result; the result must not itself be broadcast (same 4-D
    shape as the output).  When both inputs come from candidate nodes the
    later one absorbs the op, so the other operand is already computed.  Only
    chains the kernel's epilogue slots take are fused (``_capabilities``).
    """
    counts: Counter[str] = Counter()
    lines: Report = []
    changed = True
    while changed:
        changed = False
        producers, consumers, pos = g.producers(), g.consumers(), position(g)
        for nxt in list(g.nodes):
            if nxt.op not in ELEMENTWISE_FUSABLE or len(nxt.inputs) != 2 or not nxt.bhwc \
                    or nxt.attrs.get("zero_extend_rhs"):  # (channel_pad) its rhs is not broadcast
                continue
            out_shape = g.tensors[nxt.outputs[0]].shape
            cands = []
            for k in (0, 1):
                t, other = nxt.inputs[k], nxt.inputs[1 - k]
                host = producers.get(t)
                if host is None or host.op not in _ELEMENTWISE_HOSTS or other == t:
                    continue
                if only_consumer(g, t, consumers) is not nxt or g.tensors[t].shape != out_shape:
                    continue
                if g.tensors[t].dtype != "float32" or not _broadcasts_into(g, other, out_shape):
                    continue
                cands.append((pos[host.id], k, host))
            chosen = None
            for _, k, host in sorted(cands, key=lambda c: -c[0]):  # the later producer first
                step = Epilogue(nxt.op, nxt.inputs[1 - k], reverse=(k == 1))
                if epilogue_fits(g, host, [*host.epilogue, step, *nxt.epilogue]):
                    chosen = (host, step)
                    break
            if chosen is None:
                continue
            host, step = chosen
            _absorb(g, host, nxt, step)
            kind = "constant" if g.is_constant(step.operand) else "tensor"
            counts[f"{nxt.op} {kind}"] += 1
            lines.append(f"fused {nxt.op}#{nxt.id} ({kind} operand) into {host.describe()}")
            changed = True
            break
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
    return [f"fused {sum(counts.values())} elementwise ops: {summary}", *lines]


def fuse_shared_residual(g: GpuGraph) -> Report:
    """Fuse a residual ``ADD``/``MUL`` into the ``CONV_2D`` producing one of its inputs when another op reads
    that conv result too (which keeps ``fuse_elementwise`` from fusing it): the conv applies the residual and
    also stores its value from just before it, in ``outputs[1]`` (``attrs["store_pre"]``; conv2d option
    ``store_pre``, binding ``dst_pre``).

    selfie_segmentation's decoder blocks compute ``u = conv(x)``, ``s = ADD(skip, u)`` (read by a
    squeeze-excite gate) and ``MUL(skip, gate) + u``: three ADD launches go.  The other operand must be
    ready where the conv is (an input, a constant, or computed earlier: the conv cannot move past the other
    readers of its result) and of the result's shape; the conv must take the step in its residual slot.
    """
    if not FUSE_SHARED_RESIDUAL:
        return ["off (FUSE_SHARED_RESIDUAL = False)"]
    lines: Report = []
    producers, consumers, pos = g.producers(), g.consumers(), position(g)
    for nxt in list(g.nodes):
        if nxt.op not in ("ADD", "MUL") or len(nxt.inputs) != 2 or not nxt.bhwc or nxt.attrs.get("zero_extend_rhs"):
            continue
        out_shape = g.tensors[nxt.outputs[0]].shape
        for k in (0, 1):
            t, other = nxt.inputs[k], nxt.inputs[1 - k]
            host = producers.get(t)
            if host is None or host.op != "CONV_2D" or not host.bhwc or len(host.outputs) != 1 or other == t:
                continue
            readers = consumers.get(t, [])
            if len(readers) < 2 or nxt.reads().count(t) != 1 or g.tensors[t].is_input:
                continue
            if g.tensors[t].shape != out_shape or g.tensors[other].shape != out_shape:
                continue
            if g.tensors[t].dtype != "float32" or g.tensors[nxt.outputs[0]].dtype != "float32":
                continue
            op = producers.get(other)
            if op is not None and pos[op.id] > pos[host.id]:  # not ready where the conv runs
                continue
            steps = [*host.epilogue, Epilogue(nxt.op, other, reverse=(k == 1)), *nxt.epilogue]
            host.attrs["store_pre"] = True
            host.outputs = [nxt.outputs[0], t]
            if not epilogue_fits(g, host, steps):
                del host.attrs["store_pre"]
                host.outputs = [t]
                continue
            host.epilogue = steps
            host.origin = tuple(sorted(set(host.origin) | set(nxt.origin)))
            g.remove_node(nxt)
            producers, consumers, pos = g.producers(), g.consumers(), position(g)
            lines.append(f"fused {nxt.op}#{nxt.id} into {host.describe()}, which also stores t{t} (read by "
                         + ", ".join(r.describe() for r in readers if r is not nxt) + ")")
            break
    return [f"fused {len(lines)} residual ops whose conv result has other readers", *lines]


def fuse_activations(g: GpuGraph) -> Report:
    """Fuse an activation (RELU, RELU6, RELU_N1_TO_1, TANH, LOGISTIC, HARD_SWISH, LEAKY_RELU, ELU, and
    PRELU with a constant alpha) into the node producing its input, when that node's kernel takes an
    epilogue (``EPILOGUE_HOSTS``) that takes the resulting chain (``_capabilities``) and the activation is
    its only reader."""
    counts: Counter[str] = Counter()
    lines: Report = []
    changed = True
    while changed:
        changed = False
        producers, consumers = g.producers(), g.consumers()
        for act in list(g.nodes):
            if act.op in ACTIVATIONS_FUSABLE:
                step = Epilogue(act.op, alpha=float(act.attrs.get("alpha", 0.0)) if act.op == "LEAKY_RELU" else None)
            elif act.op == "PRELU" and len(act.inputs) == 2 and g.is_constant(act.inputs[1]) and act.bhwc:
                step = Epilogue("PRELU", act.inputs[1])
            else:
                continue
            t = act.inputs[0]
            host = producers.get(t)
            if host is None or host.op not in EPILOGUE_HOSTS or only_consumer(g, t, consumers) is not act:
                continue
            if g.tensors[t].shape != g.tensors[act.outputs[0]].shape or g.tensors[t].dtype != "float32":
                continue
            if not epilogue_fits(g, host, [*host.epilogue, step, *act.epilogue]):
                continue
            _absorb(g, host, act, step)
            counts[act.op] += 1
            lines.append(f"fused {act.op}#{act.id} into {host.describe()}")
            changed = True
            break
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
    return [f"fused {sum(counts.values())} activations: {summary}", *lines]
