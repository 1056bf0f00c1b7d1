"""Partitioner: connectivity, acyclicity, limits, delegate order, folding, logging."""

from __future__ import annotations

import logging
import random

import litegpu
import numpy as np
import pytest
from _graphs import GraphBuilder
from litegpu import Delegate, DelegateKernel, Support
from litegpu._partition import (
    DependencyGraph,
    PartitionOptions,
    check_plan,
    partition,
)
from litegpu._plan import plan_subgraph


def pairs(sg, claimed, *, folded=None, options=None):
    """Partition with ``claimed`` (node -> delegate name, delegates in order of first claim) and list
    the segments as ``(backend, nodes)``, folded nodes first as a CPU segment."""
    names = list(dict.fromkeys(claimed[n] for n in sorted(claimed)))
    sources = [(name, {n: Support.yes() for n, d in claimed.items() if d == name}) for name in names]
    plan = partition(sg, sources, options, folded=folded)
    return [(backend, list(nodes)) for backend, nodes in plan.pairs(include_folded=True)]


def ops_supported(sg, *names, reason="not in the test's op list"):
    """A support callable: yes for ops named in ``names``."""
    return lambda i: Support.yes() if sg.operators[i].opcode in names else Support.no(reason)


def part_sets(plan, backend=None):
    return [set(s.node_indices) for s in plan.partitions(backend)]


def diamond():
    """x -> a(ADD) -> b(MUL) -> d(ADD);  a -> c(RESIZE, CPU) -> d."""
    g = GraphBuilder()
    x = g.input()
    a = g.op("ADD", [x, x])
    b = g.op("MUL", [a, a])
    c = g.op("RESIZE_NEAREST_NEIGHBOR", [a], version=3)
    d = g.op("ADD", [b, c])
    return g.build([d])


def test_chain_all_supported_is_one_partition():
    g = GraphBuilder()
    t = g.input()
    for _ in range(5):
        t = g.op("ADD", [t, t])
    sg = g.build([t])
    plan = partition(sg, [("gpu", ops_supported(sg, "ADD"))])
    check_plan(sg, plan)
    assert [s.backend for s in plan.segments] == ["gpu"]
    assert plan.segments[0].node_indices == (0, 1, 2, 3, 4)
    assert plan.summary == "5 of 5 ops on gpu in 1 partition"


def test_diamond_cpu_node_between_branches_splits_partition():
    sg = diamond()
    plan = partition(sg, [("gpu", ops_supported(sg, "ADD", "MUL"))])
    check_plan(sg, plan)
    # {0,1,3} is connected but would need the CPU node 2 in the middle of it: 0 -> 2 -> 3.
    assert part_sets(plan) == [{0, 1}, {3}]
    assert [s.backend for s in plan.segments] == ["gpu", "cpu", "gpu"]
    assert plan.claimed == {0: "gpu", 1: "gpu", 3: "gpu"}


def test_unrelated_branches_are_separate_partitions():
    g = GraphBuilder()
    x, y = g.input("x"), g.input("y")
    a = g.op("ADD", [x, x])
    a = g.op("ADD", [a, a])
    b = g.op("MUL", [y, y])
    sg = g.build([a, b])
    plan = partition(sg, [("gpu", ops_supported(sg, "ADD", "MUL"))])
    check_plan(sg, plan)
    assert sorted(map(sorted, part_sets(plan))) == [[0, 1], [2]]


def test_heads_sharing_an_input_tensor_are_one_partition():
    g = GraphBuilder()
    x = g.input()
    h1 = g.op("ADD", [x, x])
    h2 = g.op("MUL", [x, x])
    sg = g.build([h1, h2])
    plan = partition(sg, [("gpu", ops_supported(sg, "ADD", "MUL"))])
    assert part_sets(plan) == [{0, 1}]


def test_shared_constant_does_not_connect():
    g = GraphBuilder()
    x, y = g.input("x"), g.input("y")
    w = g.const(np.ones(4))
    a = g.op("MUL", [x, w])
    b = g.op("MUL", [y, w])
    sg = g.build([a, b])
    plan = partition(sg, [("gpu", ops_supported(sg, "MUL"))])
    assert sorted(map(sorted, part_sets(plan))) == [[0], [1]]


def alternating(sizes):
    """A chain of GPU runs of the given sizes separated by single CPU ops (opcode TOPK_V2)."""
    g = GraphBuilder()
    t = g.input()
    for k, n in enumerate(sizes):
        if k:
            t = g.op("TOPK_V2", [t])
        for _ in range(n):
            t = g.op("ADD", [t, t])
    return g.build([t])


@pytest.mark.parametrize(
    "max_parts, min_nodes, expected_sizes",
    [
        (1, 1, [3]),
        (2, 1, [3, 2]),
        (0, 1, [2, 3, 1]),  # 0 = no limit, listed in execution order
        (4, 2, [2, 3]),
        (1, 4, []),
    ],
)
def test_limits_keep_the_largest_partitions(max_parts, min_nodes, expected_sizes):
    sg = alternating([2, 3, 1])
    opts = PartitionOptions(max_delegated_partitions=max_parts, min_nodes_per_partition=min_nodes)
    plan = partition(sg, [("gpu", ops_supported(sg, "ADD"))], opts)
    check_plan(sg, plan)
    sizes = [len(s.node_indices) for s in plan.partitions()]
    assert sorted(sizes, reverse=True) == sorted(expected_sizes, reverse=True)
    if max_parts == 0:
        assert sizes == expected_sizes
    if max_parts == 1 and expected_sizes:
        assert plan.partitions()[0].node_indices == (3, 4, 5)  # the 3-op run, not the first one


def test_default_limits_documented_values():
    opts = PartitionOptions()
    assert opts.max_delegated_partitions == 4 and opts.min_nodes_per_partition == 1
    sg = alternating([1, 1, 1, 1, 1, 1])
    plan = partition(sg, [("gpu", ops_supported(sg, "ADD"))])
    assert len(plan.partitions()) == 4


def test_delegates_apply_in_order():
    g = GraphBuilder()
    x = g.input()
    a = g.op("ADD", [x, x])
    b = g.op("MUL", [a, a])
    c = g.op("ADD", [b, b])
    sg = g.build([c])
    first = ops_supported(sg, "ADD")
    second = ops_supported(sg, "ADD", "MUL")
    plan = partition(sg, [("A", first), ("B", second)])
    check_plan(sg, plan)
    assert [(s.backend, s.node_indices) for s in plan.segments] == [("A", (0,)), ("B", (1,)), ("A", (2,))]
    plan = partition(sg, [("B", second), ("A", first)])
    assert [(s.backend, s.node_indices) for s in plan.segments] == [("B", (0, 1, 2))]


def test_nodes_dropped_by_limit_go_to_next_delegate():
    sg = alternating([2, 3])
    opts = PartitionOptions(max_delegated_partitions=1)
    plan = partition(sg, [("A", ops_supported(sg, "ADD")), ("B", ops_supported(sg, "ADD"))], opts)
    check_plan(sg, plan)
    assert part_sets(plan, "A") == [{3, 4, 5}]
    assert part_sets(plan, "B") == [{0, 1}]


def test_second_delegate_cannot_wrap_around_first_delegates_partition():
    # x -> n0(A) -> n1(B) ; x -> n2(B) -> n3(A) ; n1,n3 -> n4(B)
    # {n0, n3} for A are separate (not connected); B's {n1, n2, n4} touch, but n2 -> n3(A) -> n4 and
    # n0(A) -> n1 must not create a cycle between the A and B blocks.
    g = GraphBuilder()
    x = g.input()
    n0 = g.op("ADD", [x, x])
    g.op("MUL", [n0, n0])
    n2 = g.op("MUL", [x, x])
    n3 = g.op("ADD", [n2, n2])
    n4 = g.op("MUL", [1, n3])
    sg = g.build([n4])
    plan = partition(sg, [("A", ops_supported(sg, "ADD")), ("B", ops_supported(sg, "MUL"))])
    check_plan(sg, plan)
    assert plan.claimed == {0: "A", 1: "B", 2: "B", 3: "A", 4: "B"}


def test_merge_pass_rejoins_pieces_split_by_the_sweep():
    # g1 -> c1(cpu) -> g2 ;  h1 -> h2 -> h3 with c1 -> h2.  The sweep puts h1 before c1 and h2,h3
    # after it; h1 and {h2, h3} touch and nothing lies between them, so they are one partition
    # (with g2, which shares the input c1 with h2); g1 stays apart: g1 -> c1 -> g2.
    g = GraphBuilder()
    x, y = g.input("x"), g.input("y")
    g1 = g.op("ADD", [x, x])
    c1 = g.op("TOPK_V2", [g1])
    g2 = g.op("ADD", [c1, c1])
    h1 = g.op("MUL", [y, y])
    h2 = g.op("MUL", [h1, c1])
    h3 = g.op("MUL", [h2, h2])
    sg = g.build([g2, h3])
    plan = partition(sg, [("gpu", ops_supported(sg, "ADD", "MUL"))])
    check_plan(sg, plan)
    assert part_sets(plan) == [{0}, {2, 3, 4, 5}]


def test_logging_lines(caplog):
    sg = diamond()
    sup = ops_supported(sg, "ADD", "MUL", reason="align_corners with half_pixel_centers")
    with caplog.at_level(logging.INFO, logger="litegpu"):
        partition(sg, [("opencl", sup)])
    lines = [r.getMessage() for r in caplog.records if r.name == "litegpu"]
    assert lines == [
        "op #2 RESIZE_NEAREST_NEIGHBOR v3 cannot be handled by opencl: align_corners with half_pixel_centers",
        "3 of 4 ops on opencl in 2 partitions; the rest on CPU; declined: RESIZE_NEAREST_NEIGHBOR "
        "(opencl: align_corners with half_pixel_centers)",
    ]
    # the fallback summary is a WARNING (seen without configuring logging), the per-op lines INFO
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING]


def test_logging_each_node_once_per_delegate_and_switch_off(caplog):
    sg = alternating([1, 1, 1])
    with caplog.at_level(logging.INFO, logger="litegpu"):
        partition(sg, [("a", ops_supported(sg, "ADD")), ("b", ops_supported(sg, "NOTHING"))])
    lines = [r.getMessage() for r in caplog.records]
    assert sum("op #1 TOPK_V2 v1 cannot be handled by a" in m for m in lines) == 1
    assert sum("op #1 TOPK_V2 v1 cannot be handled by b" in m for m in lines) == 1
    # nodes claimed by a are not asked of b, hence not logged for b
    assert not any("op #0 ADD v1 cannot be handled by b" in m for m in lines)
    assert lines[-1].startswith(
        "3 of 5 ops on a in 3 partitions, 0 of 5 ops on b in 0 partitions; the rest on CPU; declined: TOPK_V2 x2")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="litegpu"):
        partition(sg, [("a", ops_supported(sg, "ADD"))], {"log_unsupported_ops": False})
    assert [r.getMessage() for r in caplog.records] == [
        "3 of 5 ops on a in 3 partitions; the rest on CPU; declined: TOPK_V2 x2 (a: not in the test's op list)"]


def _foldable_nodes(sg) -> list[int]:
    """The nodes the interpreter's plan folds (``_plan._foldable``, the one rule), in file order,
    constants propagating through folded nodes as at allocate_tensors."""
    from litegpu._plan import _foldable, _spec

    specs = [_spec(t) for t in sg.tensors]
    out = []
    for op in sg.operators:
        ins = [specs[i] if i >= 0 else None for i in op.inputs]
        outs = [specs[o] for o in op.outputs if o >= 0]
        if _foldable(op, ins, outs):
            out.append(op.index)
            for s in outs:
                s.data = np.zeros(s.shape or (), np.float32)  # stands for the folded value
    return out


def test_constant_only_nodes_are_folded_not_delegated(caplog):
    g = GraphBuilder()
    x = g.input()
    w = g.const(np.arange(4))
    wd = g.op("DEQUANTIZE", [w])
    w2 = g.op("MUL", [wd, wd])
    y = g.op("MUL", [x, w2])
    sg = g.build([y])
    assert _foldable_nodes(sg) == [0, 1]  # the interpreter's rule (_plan._foldable)
    with caplog.at_level(logging.INFO, logger="litegpu"):
        plan = partition(sg, [("gpu", ops_supported(sg, "MUL", "DEQUANTIZE"))], folded=(1, 0))
    check_plan(sg, plan)
    assert plan.folded == (0, 1)
    assert [(s.backend, s.node_indices) for s in plan.segments] == [("gpu", (2,))]
    assert caplog.records[-1].getMessage() == "1 of 3 ops on gpu in 1 partition (2 constant ops folded at prepare)"
    assert pairs(sg, {0: "gpu", 1: "gpu", 2: "gpu"}, folded=[0, 1]) == [("cpu", [0, 1]), ("gpu", [2])]
    assert pairs(sg, {0: "gpu", 1: "gpu", 2: "gpu"}) == [("gpu", [0, 1, 2])]  # nothing folded: all offered
    # a caller that folded node 0 only (its own rules) gets exactly that
    assert pairs(sg, {1: "gpu", 2: "gpu"}, folded=[0]) == [("cpu", [0]), ("gpu", [1, 2])]
    # (the folding itself, values and read-only constants: test_interpreter's
    # test_constant_only_nodes_fold_once_at_allocate)


def test_stateful_random_and_custom_ops_are_not_folded():
    g = GraphBuilder()
    x = g.input()
    c = g.const([1, 2])
    r = g.op("RANDOM_UNIFORM", [c])
    g.ops.append(litegpu._ir.Operator(1, "CUSTOM", 1, (c,), (g._tensor("cu", (2,), "float32"),),
                                      custom_code="MyOp"))
    y = g.op("ADD", [x, r])
    sg = g.build([y])
    assert _foldable_nodes(sg) == []


def test_stateful_ops_keep_file_order():
    g = GraphBuilder()
    x = g.input()
    h = g.op("VAR_HANDLE", [])
    g.ops.append(litegpu._ir.Operator(1, "ASSIGN_VARIABLE", 1, (h, x), ()))
    r = g.op("READ_VARIABLE", [h])
    y = g.op("ADD", [r, x])
    sg = g.build([y])
    graph = DependencyGraph(sg)
    assert 2 in graph.succ[1]  # assign before read, though no tensor links them
    plan = partition(sg, [("gpu", ops_supported(sg, "ADD"))])
    check_plan(sg, plan)
    flat = [n for s in plan.segments for n in s.node_indices]
    assert flat.index(1) < flat.index(2)


def test_cyclic_model_is_a_model_error():
    g = GraphBuilder()
    x = g.input()
    a = g.op("ADD", [x, 2])  # reads the output of the next op
    g.op("ADD", [a, a])
    sg = g.build([a])
    with pytest.raises(litegpu.ModelError, match="cycle"):
        partition(sg, [])


class FakeDelegate(Delegate):
    def __init__(self, name, ops, reason="unsupported here"):
        super().__init__()
        self.name, self.ops, self.reason, self.asked = name, set(ops), reason, []

    def supports(self, node):
        self.asked.append(node.op.index)
        if node.op.opcode == "BOOM":
            raise RuntimeError("kaput")
        return Support.yes() if node.op.opcode in self.ops else Support.no(self.reason)

    def prepare(self, partition) -> DelegateKernel:  # pragma: no cover - not used here
        raise NotImplementedError


def test_plan_subgraph_asks_delegates_and_skips_passthrough(caplog):
    g = GraphBuilder()
    x = g.input()
    a = g.op("ADD", [x, x])
    b = g.op("BOOM", [a])
    c = g.op("MUL", [b, b])
    sg = g.build([c])
    cpu = litegpu.load_delegate("cpu")
    d1, d2 = FakeDelegate("one", {"ADD"}), FakeDelegate("two", {"MUL", "ADD"})
    with caplog.at_level(logging.INFO, logger="litegpu"):
        plan = plan_subgraph(sg, [cpu, d1, d2])
    check_plan(sg, plan)
    assert [(s.backend, s.delegate) for s in plan.segments] == [("one", 1), ("cpu", None), ("two", 2)]
    assert d1.asked == [0, 1, 2] and d2.asked == [1, 2]  # only still-unclaimed nodes are asked
    msgs = [r.getMessage() for r in caplog.records]
    assert "op #1 BOOM v1 cannot be handled by one: supports() raised RuntimeError('kaput')" in msgs
    assert not any("by cpu" in m for m in msgs)
    d1.asked.clear()
    assert plan_subgraph(sg, [d1], folded=[0]).folded == (0,) and d1.asked == [1, 2]  # folded: not asked


def test_claimed_nodes_grouped_into_partitions():
    sg = diamond()
    out = pairs(sg, {0: "gpu", 1: "gpu", 3: "gpu"})
    assert out == [("gpu", [0, 1]), ("cpu", [2]), ("gpu", [3])]
    assert pairs(sg, {}) == [("cpu", [0, 1, 2, 3])]
    # limits: claimed nodes beyond max_delegated_partitions come back as CPU nodes
    assert pairs(sg, {0: "gpu", 1: "gpu", 3: "gpu"}, options={"max_delegated_partitions": 1}) == [
        ("gpu", [0, 1]), ("cpu", [2, 3])]


def random_graph(rng: random.Random, n: int):
    g = GraphBuilder()
    avail = [g.input("x"), g.input("y")]
    for _ in range(n):
        k = rng.choice([1, 2, 2, 3])
        ins = [rng.choice(avail[-6:]) if rng.random() < 0.7 else rng.choice(avail) for _ in range(k)]
        avail.append(g.op(rng.choice(["ADD", "MUL", "SUB", "CPU", "CPU2"]), ins))
    return g.build(avail[-3:])


def _mergeable(sg, plan, p, q):
    """Would merging partitions p and q keep the block graph acyclic?  (brute force)"""
    graph = DependencyGraph(sg)
    block = {n: n for n in range(len(sg.operators))}
    for seg in plan.partitions():
        for n in seg.node_indices:
            block[n] = min(seg.node_indices)
    rep = min(p | q)
    for n in p | q:
        block[n] = rep
    succ = {b: set() for b in block.values()}
    for n in range(len(sg.operators)):
        succ[block[n]] |= {block[m] for m in graph.succ[n]} - {block[n]}
    indeg = {b: 0 for b in succ}
    for b in succ:
        for c in succ[b]:
            indeg[c] += 1
    ready = [b for b, d in indeg.items() if d == 0]
    done = 0
    while ready:
        b = ready.pop()
        done += 1
        for c in succ[b]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    return done == len(succ)


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_valid_and_locally_maximal(seed):
    rng = random.Random(seed)
    sg = random_graph(rng, rng.randint(5, 30))
    limits = PartitionOptions(max_delegated_partitions=0)
    sources = [("A", ops_supported(sg, "ADD", "SUB")), ("B", ops_supported(sg, "MUL", "ADD"))]
    plan = partition(sg, sources, limits)
    check_plan(sg, plan)
    graph = DependencyGraph(sg)
    for name in ("A", "B"):
        parts = part_sets(plan, name)
        for i, p in enumerate(parts):
            for q in parts[i + 1:]:
                if any(m in q for n in p for m in graph.succ[n] | graph.pred[n]):
                    assert not _mergeable(sg, plan, p, q), f"{name}: {p} and {q} could be one partition"
    limited = partition(sg, sources, PartitionOptions(max_delegated_partitions=2, min_nodes_per_partition=2))
    check_plan(sg, limited)
    for name in ("A", "B"):
        assert len(limited.partitions(name)) <= 2
        assert all(len(s.node_indices) >= 2 for s in limited.partitions(name))
