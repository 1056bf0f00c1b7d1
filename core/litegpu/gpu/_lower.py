"""Lowering: what the GPU path accepts (:func:`supports`), and GPU nodes -> kernel launches (:class:`GpuOp`).

:func:`supports` answers the partitioner node by node, with a reason in words
when it declines.  :func:`compile_graph` / :func:`compile_partition` run the
passes, lower every node to template kernels (names, template options and
runtime params as the templates in ``core/litegpu/shaders/`` declare them,
see ``docs/gpu-kernels.md``), re-lay out constants once in the storage type,
plan the arena and return a :class:`GpuPlan` (format: ``docs/gpu-compiler.md``).

Which ops exist, their checks and lowerings: the op table (``_op_table.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._delegate import NodeView, PartitionSpec, Support
from .._errors import DelegateError
from .._ir import Subgraph, Tensor
from . import _layout as L
from ._capabilities import match_epilogue
from ._cost import profile_for
from ._graph import GpuGraph, GpuNode, GpuOp, GpuPlan, PlanTensor
from ._lowering import MAX_CONCAT_INPUTS, Lowerer
from ._memory import DEFAULT_ALIGNMENT, plan_arena
from ._op_table import OPS, PARAM_INPUTS, SUPPORTED_OPS
from ._passes import DEFAULT_PIPELINE, Pass, run_passes
from ._precision import PrecisionPolicy, fp16_risks, precision_policy
from ._quant import quantized_reason

__all__ = ["SUPPORTED_OPS", "supports", "lower_node", "compile_graph", "compile_partition", "MAX_CONCAT_INPUTS"]


# ---------------------------------------------------------------------------------------------------------
# supports
# ---------------------------------------------------------------------------------------------------------


def _constant_like(sg: Subgraph, t: int, depth: int = 0) -> bool:
    """A constant, or made from one by DEQUANTIZE/DENSIFY (folded at prepare)."""
    if t < 0:
        return True
    if sg.tensors[t].is_constant:
        return True
    if depth > 4:
        return False
    for op in sg.operators:
        if t in op.outputs:
            return op.name in ("DEQUANTIZE", "DENSIFY") and bool(op.inputs) and _constant_like(sg, op.inputs[0],
                                                                                              depth + 1)
    return False


def _float_like(t: Tensor) -> bool:
    return t.dtype in ("float32", "float16")


def supports(node: NodeView) -> Support:
    """Can the GPU path run ``node``?  Never raises; declines with a reason in words."""
    try:
        return _supports(node)
    except Exception as e:  # a malformed node is declined, the CPU path reports it properly
        return Support.no(f"could not analyse the node: {e}")


def _supports(node: NodeView) -> Support:
    op = node.op
    name = op.name
    if name not in SUPPORTED_OPS:
        return Support.no(f"{name} is not implemented on the GPU path")
    sg = node.subgraph
    ins = [t for t in node.inputs if t is not None]
    for t in (*ins, *node.outputs):
        if not t.has_rank:
            return Support.no(f"tensor {t.name!r} has unknown rank")
        if len(t.shape) > 4:
            return Support.no(f"rank {len(t.shape)} tensors")
        if t.is_dynamic and not t.is_constant:
            return Support.no(f"dynamic shape ({t.name!r} has signature {list(t.shape_signature)})")
        if 0 in t.shape and not t.is_constant:
            return Support.no(f"empty tensor {t.name!r}")
    params = PARAM_INPUTS.get(name, {})
    for i, what in params.items():
        if i < len(op.inputs) and op.inputs[i] >= 0 and not _constant_like(sg, op.inputs[i]):
            return Support.no(f"{name} with a non-constant {what}")

    # quantized activations: the float view (``_quant``) decides
    quant = quantized_reason(node, params)
    if quant is not None:
        if quant:
            return Support.no(quant)
        check = OPS[name].check
        reason = check(node) if check is not None else ""
        return Support.no(reason) if reason else Support.yes()

    # data types: activations are float (bool for LOGICAL_AND); parameters may be int32
    if name in ("DEQUANTIZE", "DENSIFY"):
        src = node.inputs[0]
        if src is None or not _constant_like(sg, op.inputs[0]):
            return Support.no(f"{name} of a non-constant tensor (only constant weights fold away)")
        if node.outputs[0].dtype not in ("float32", "float16"):
            return Support.no(f"{name} to {node.outputs[0].dtype}")
        return Support.yes()
    runtime = [(i, t) for i, t in enumerate(node.inputs) if t is not None and i not in params]
    for i, t in runtime + [(-1, t) for t in node.outputs]:
        if name == "LOGICAL_AND":
            if t.dtype != "bool":
                return Support.no(f"LOGICAL_AND of {t.dtype} tensors")
            continue
        if t.quantization is not None and t.dtype in ("int8", "uint8", "int16"):
            return Support.no(f"quantized {t.dtype} activations (the GPU path computes in float)")
        if t.dtype == "int32" or t.dtype == "int64":
            return Support.no(f"{t.dtype} tensors")
        if not _float_like(t) and not (t.is_constant or _constant_like(sg, op.inputs[i] if i >= 0 else -1)):
            return Support.no(f"{t.dtype} tensors")
    for i, what in params.items():
        if what in ("weights", "bias", "alpha") and i < len(node.inputs) and node.inputs[i] is not None:
            t = node.inputs[i]
            hybrid = what == "weights" and t.is_constant and t.dtype in ("int8", "uint8") \
                and t.quantization is not None  # dynamic-range: dequantized at prepare (float_view)
            if t.dtype not in ("float32", "float16") and not hybrid and not _dequantized(sg, op.inputs[i]):
                return Support.no(f"{name} with {t.dtype} {what}")
    check = OPS[name].check
    if check is not None:
        reason = check(node)
        if reason:
            return Support.no(reason)
    return Support.yes()


def _dequantized(sg: Subgraph, t: int) -> bool:
    return not sg.tensors[t].is_constant and _constant_like(sg, t)


def lower_node(g: GpuGraph, node: GpuNode, policy: PrecisionPolicy) -> list[GpuOp]:
    """The kernel launches computing ``node`` (after the passes; ``node.bhwc`` must be set)."""
    if not node.bhwc:
        raise DelegateError(f"{node.describe()}: not normalised to BHWC (run normalise_bhwc)")
    entry = OPS.get(node.op)
    if entry is None or entry.lower is None:
        raise DelegateError(f"{node.describe()}: no GPU kernel for {node.op}")
    return entry.lower(Lowerer(g, node, policy, match_epilogue(g, node)))


def compile_graph(g: GpuGraph, *, precision: str = "fp32", alignment: int = DEFAULT_ALIGNMENT,
                  passes: Sequence[Pass] = DEFAULT_PIPELINE, quantization_simulation: bool = True,
                  device: Any = None) -> GpuPlan:
    """Run ``passes`` on ``g`` (in place), lower it and plan its memory.

    ``quantization_simulation``: snap quantized results to their grids (``_passes/float_view``).
    ``device``: the :class:`~litegpu.gpu._device.DeviceInfo` the plan is for; kernel variants are chosen
    by the cost model (``_cost``) with its calibration (None: a generic GPU's)."""
    policy = precision_policy(precision)
    g.options["cost"] = profile_for(device)
    g.options["quantization_simulation"] = bool(quantization_simulation)
    reports = run_passes(g, passes)
    for x in g.tensors.values():
        if not x.is_constant and x.dtype in ("int8", "uint8", "int16"):
            raise DelegateError(f"tensor {x.name!r} is {x.dtype} on the GPU path (run the float_view pass)")
    ops: list[GpuOp] = []
    for node in g.nodes:
        ops += lower_node(g, node, policy)
    written = {t for op in ops for t in op.outputs}
    for t in g.outputs:
        if t not in written and t not in g.inputs:  # an output that is an input passes through
            raise DelegateError(f"partition output {g.tensors[t].name!r} is not computed on the GPU")

    boundary = set(g.inputs) | set(g.outputs)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        for t in op.outputs:
            if t not in boundary:
                first.setdefault(t, i)
                last[t] = max(last.get(t, i), i)
        for t in op.inputs:
            if t in first:
                last[t] = i
    lifetimes = {t: (first[t], last[t]) for t in first}
    sizes = {t: L.phwc4_nbytes(g.tensors[t].shape, policy.tensor_itemsize(g.tensors[t])) for t in lifetimes}
    mem = plan_arena(sizes, lifetimes, alignment=alignment)

    tensors: dict[int, PlanTensor] = {}
    used = set(boundary) | set(lifetimes)
    for t in sorted(used):
        x = g.tensors[t]
        kind = "input" if t in g.inputs else "output" if t in g.outputs else "intermediate"
        quant = (x.qview.scale, x.qview.zero_point) if x.qview is not None and kind != "intermediate" else None
        tensors[t] = PlanTensor(id=t, name=x.name, kind=kind, shape=x.shape, ir_shape=x.ir_shape,
                                dtype=x.qview.dtype if x.qview is not None else x.dtype, quant=quant,
                                storage=policy.storage(x), layout="PHWC4",
                                nbytes=L.phwc4_nbytes(x.shape, policy.tensor_itemsize(x)),
                                offset=mem.offsets.get(t), host_output=x.host_output and kind == "output")
    warnings = fp16_risks(g) if policy.mode != "fp32" else []
    plan = GpuPlan(ops=ops, tensors=tensors, inputs=list(g.inputs), outputs=list(g.outputs), precision=policy.mode,
                   arena_bytes=mem.arena_bytes, alignment=alignment, memory=mem.summary(), report=reports,
                   warnings=warnings)
    plan.report["lower"] = [f"{len(ops)} kernel launches: " + ", ".join(
        f"{k} {v}" for k, v in sorted(_count(op.kernel for op in ops).items()))]
    fused = sum(1 for op in ops if op.options.get("qdq") and op.options.get("op") != "NONE")
    alone = sum(1 for op in ops if op.options.get("qdq") and op.options.get("op") == "NONE")
    if fused or alone:
        plan.report["lower"].append(f"QDQ: {fused} fused into their producer's kernel, {alone} launches of "
                                    "their own (QUANTIZE, or after a kernel without the qdq option)")
    plan.report["memory"] = [f"arena {mem.arena_bytes} bytes for {len(lifetimes)} intermediates "
                             f"(naive {mem.naive_bytes}, lower bound {mem.lower_bound}, "
                             f"ratio {mem.ratio:.3f}, {mem.strategy})"]
    return plan


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def compile_partition(spec: PartitionSpec, *, precision: str = "fp32", alignment: int = DEFAULT_ALIGNMENT,
                      passes: Sequence[Pass] = DEFAULT_PIPELINE, quantization_simulation: bool = True,
                      device: Any = None) -> GpuPlan:
    """Compile one delegate partition into a :class:`GpuPlan` (``device``: see :func:`compile_graph`)."""
    return compile_graph(GpuGraph.from_partition(spec), precision=precision, alignment=alignment, passes=passes,
                         quantization_simulation=quantization_simulation, device=device)
