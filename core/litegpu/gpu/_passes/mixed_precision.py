"""Mark the tensors kept in float32 storage, and the nodes computed in float32, in the fp16 modes.

The marks (``GpuTensor.fp32``, ``GpuNode.fp32``) change nothing in ``fp32``;
in ``fp16``/``fp16_fp32acc`` the lowering stores marked tensors in float32,
renders marked nodes in ``fp32`` (their constants in float32) and makes every
kernel convert on load/store where a buffer's storage differs from the
precision it computes in (``_precision``, ``docs/gpu-compiler.md`` §6).

Two rules, both properties of the graph alone:

host outputs
    A float partition output the host reads is stored in float32 and its
    producer computes in float32; when that producer only moves data
    (RESHAPE, CONCATENATION, TRANSPOSE, slices... of detector heads), the
    same goes for the tensors it moves and the nodes computing them, back to
    the last arithmetic.  The host receives float32 anyway, so an fp16 copy
    only loses: float16 has no value below 2^-24 (6e-8) and only a
    few significant bits below 2^-14 (6.1e-5), so the tail of a LOGISTIC,
    EXP or SOFTMAX result -- a probability of 6e-10 -- comes back as exactly 0
    (a relative error of 1); and half-precision ``1/(1+exp(-x))`` overflows
    ``exp`` for x < -11.1 and returns 0 before anything is stored.  Costs the
    output's bytes twice and one kernel in float32.
broadcast values
    A runtime tensor with one value per channel (H*W == 1) that a node
    replicates over a feature map (an elementwise operand of a larger result,
    or a RESIZE source, or the input scale of a conv that took a gate's MUL,
    ``fuse_squeeze_excite``) -- the gate of a squeeze-and-excitation block, a
    global-pooling branch -- is stored in float32, together with the chain
    of per-channel tensors computing it (global pool -> 1x1 convs -> gate);
    their producers and the broadcasting node compute in float32.  A rounding
    error in such a value is the same at every pixel it is applied to, so the
    convolutions after it add it up coherently instead of averaging it out:
    rounding the 16 gate values of one block disturbs the output about as much
    as rounding the whole 64x64x16 map they scale.  The tensors are tiny, so
    float32 costs no bandwidth.

Partition inputs and outputs that stay on the device between partitions keep
the plan's storage (another partition reads those buffers as they are).
"""

from __future__ import annotations

from .._graph import GpuGraph, Report
from .squeeze_excite import in_scale_of

__all__ = ["mixed_precision", "BROADCASTING_OPS", "DATA_MOVEMENT_OPS"]

#: ops that only move data: a host output they make is as exact as the tensors they read
DATA_MOVEMENT_OPS = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CONCATENATION", "TRANSPOSE", "SLICE",
                               "STRIDED_SLICE", "SPLIT", "SPLIT_V", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH"})

#: ops whose kernels replicate a per-channel operand over the output's pixels
BROADCASTING_OPS = frozenset({"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW",
                              "PRELU", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"})

_FLOAT = ("float32", "float16")


def _pixels(g: GpuGraph, t: int) -> int:
    _, h, w, _ = g.tensors[t].shape
    return h * w


def _storable(g: GpuGraph, t: int) -> bool:
    """A float tensor of the partition's inside whose storage this plan alone decides."""
    x = g.tensors[t]
    return (x.dtype in _FLOAT and not x.is_constant and not x.is_input
            and (not x.is_output or x.host_output))


def mixed_precision(g: GpuGraph) -> Report:
    """Mark float32 storage / compute for the fp16 modes (see the module docstring)."""
    producers = g.producers()
    outputs: list[str] = []
    for t in g.outputs:
        x = g.tensors[t]
        node = producers.get(t)
        if node is None or not x.host_output or x.is_input or x.dtype not in _FLOAT:
            continue
        chain = []
        todo = [t]
        while todo:  # the output, and through data movement the values it is made of
            u = todo.pop()
            node = producers.get(u)
            if node is None or g.tensors[u].fp32 or not _storable(g, u):
                continue
            g.tensors[u].fp32 = node.fp32 = True
            chain.append(node.describe())
            if node.op in DATA_MOVEMENT_OPS and not node.epilogue:
                todo += [i for i in node.inputs if i >= 0 and not g.is_constant(i)]
        outputs.append(f"{x.name!r} ({', '.join(chain)})")

    gates: list[str] = []
    marked_nodes: set[int] = set()

    def keep_chain(t: int) -> None:
        """``t`` (one value per channel) and the per-channel chain computing it, in float32."""
        todo = [t]
        while todo:
            u = todo.pop()
            if g.tensors[u].fp32 or not _storable(g, u):
                continue
            g.tensors[u].fp32 = True
            node = producers.get(u)
            if node is None:
                continue
            node.fp32 = True
            marked_nodes.add(node.id)
            todo += [i for i in node.reads() if _pixels(g, i) == 1 and not g.is_constant(i)]

    for node in g.nodes:
        out = node.outputs[0] if node.outputs else -1
        if out < 0 or _pixels(g, out) == 1:
            continue
        operands = list(node.inputs) if node.op in BROADCASTING_OPS else []
        operands += [e.operand for e in node.epilogue if e.operand is not None] + [in_scale_of(node)]
        hit = [t for t in operands if t >= 0 and not g.is_constant(t) and _pixels(g, t) == 1
               and g.tensors[t].dtype in _FLOAT]
        if not hit:
            continue
        for t in hit:
            keep_chain(t)
        node.fp32 = True
        marked_nodes.add(node.id)
        gates.append(f"{node.describe()} broadcasts " + ", ".join(repr(g.tensors[t].name) for t in hit))

    n_tensors = sum(1 for x in g.tensors.values() if x.fp32)
    n_nodes = sum(1 for n in g.nodes if n.fp32)
    kept = sum(x.size for x in g.tensors.values() if x.fp32 and not x.is_constant)
    total = sum(x.size for x in g.tensors.values() if not x.is_constant and x.dtype in _FLOAT)
    lines: Report = [f"fp16 modes: {n_tensors} tensors stored and {n_nodes} nodes computed in float32 "
                     f"({kept} of {total} activation elements); {len(outputs)} host outputs, "
                     f"{len(gates)} broadcast per-channel values"]
    lines += [f"host output {s}" for s in outputs]
    lines += gates
    return lines
