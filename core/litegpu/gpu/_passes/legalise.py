"""Split epilogue steps a kernel cannot apply into elementwise nodes of their own."""

from __future__ import annotations

from .._capabilities import match_epilogue
from .._graph import Epilogue, GpuGraph, GpuNode, Report
from .float_view import QDQ_OP

__all__ = ["legalise_epilogues"]


def _step_node(g: GpuGraph, step: Epilogue, src: int, dst: int, origin: tuple[int, ...]) -> GpuNode:
    if step.op == "QDQ":  # a copy that snaps to the grid (float view of quantized models)
        node = g.new_node(QDQ_OP, [src], [dst], origin=origin)
        node.epilogue = [step]
        return node
    if step.operand is None:
        attrs = {"alpha": step.alpha} if step.alpha is not None else {}
        return g.new_node(step.op, [src], [dst], attrs, origin=origin)
    if step.zero_extend:  # a merged channel PAD (only ADD carries one, and ADD commutes): the binary rhs
        return g.new_node(step.op, [src, step.operand], [dst], {"zero_extend_rhs": True}, origin=origin)
    ins = [step.operand, src] if step.reverse else [src, step.operand]
    return g.new_node(step.op, ins, [dst], origin=origin)


def legalise_epilogues(g: GpuGraph) -> Report:
    """Make every node's epilogue fit its kernel's slots (``_capabilities``).

    Epilogues come from TFLite's own ``fused_activation_function`` (a
    CONCATENATION may carry RELU; no concat kernel takes one) as well as from
    the fusion passes (which only fuse what fits).  The longest fitting
    prefix stays; each remaining step becomes a node of its own after the
    node, writing the original output.
    """
    lines: Report = []
    for node in list(g.nodes):
        if not node.epilogue or match_epilogue(g, node) is not None:
            continue
        keep = len(node.epilogue)
        while keep > 0 and match_epilogue(g, node, node.epilogue[:keep]) is None:
            keep -= 1
        rest = node.epilogue[keep:]
        node.epilogue = node.epilogue[:keep]
        out = node.outputs[0]
        x = g.tensors[out]
        cur = g.add_tensor(x.name + "/pre_epilogue", x.shape, x.dtype)
        node.outputs[0] = cur
        at = g.node_index(node) + 1
        for j, step in enumerate(rest):
            dst = out if j == len(rest) - 1 else g.add_tensor(f"{x.name}/epilogue{j}", x.shape, x.dtype)
            # operands were ready at the node's place (fusion moved it if needed), so right after it is fine
            new = _step_node(g, step, cur, dst, node.origin)
            g.nodes.insert(at, new)
            at += 1
            cur = dst
        lines.append(f"split {len(rest)} epilogue step(s) off {node.describe()}: "
                     + ", ".join(e.describe() for e in rest))
    return [f"split epilogues of {len(lines)} nodes", *lines]
