"""The partitioner: which nodes of a subgraph run on which delegate, in what order.

Input: a subgraph, the delegates in preference order with their per-node
:class:`~litegpu.Support` answers, and :class:`PartitionOptions`.  Output: a
:class:`PartitionPlan` whose ``segments`` are ``(backend, node_indices)`` in a
valid execution order; ``backend`` is a delegate's name or ``"cpu"``.

This module works on node indices: the answers come from callbacks ``node index -> Support``
that the interpreter's plan builds (``_plan.plan_subgraph``, the one place that shows a node to
a delegate), and the subgraph is read only for its edges (which node writes and reads which
tensor) and, in log lines, the op's name and version.

Rules
-----
* **Constant folding first.**  A node whose inputs are all constant (or
  outputs of such nodes) is not delegated: the interpreter evaluates it once
  at prepare on the CPU and treats its outputs as constants (the
  interpreter decides and folds them, ``_plan._foldable``/``_plan._fold``,
  and passes them as ``folded``).  Stateful, random, control-flow and custom
  ops (:data:`NEVER_FOLD`) are never folded.
* **Delegates in order.**  Like LiteRT applying ``experimental_delegates`` one
  after the other, each delegate claims among the nodes still unclaimed; the
  partitions it keeps become fixed blocks that later delegates work around.
* **Connected partitions.**  Two nodes are connected when one reads a tensor
  the other writes, or both read the same non-constant tensor (two heads on
  one input).  Unrelated branches become separate partitions.
* **No cycles through the CPU.**  No path may leave a partition and come back
  into it (partition -> CPU node -> same partition): the partition must be
  runnable as one step.  Candidates are grouped by a topological sweep that
  runs every ready non-candidate node before opening a new candidate group
  (so groups are as large as the dependencies allow); each group is split
  into connected pieces, and pieces joined by an edge are merged back when
  no path between them passes through another block.
* **Limits.**  Partitions with fewer than ``min_nodes_per_partition`` nodes
  are dropped; of the rest only the ``max_delegated_partitions`` largest are
  kept (0 = no limit).  Dropped nodes stay available to later delegates, then
  fall back to the CPU.

Why 4 delegated partitions by default: LiteRT's GPU delegate defaults to 1
because every partition is a separate GPU program whose inputs and outputs
cross the host boundary.  litegpu keeps tensors on the device between
partitions of one delegate (``PartitionSpec.host_outputs``), so a split
costs only the transfers the CPU node in between really needs; allowing a
few partitions keeps the GPU busy around one or two unsupported ops in the
middle of a model (common in MediaPipe graphs) while still bounding the
number of host round trips and compiled programs per invoke.
``min_nodes_per_partition`` defaults to 1 so single-op models are delegated
(the op tests rely on it); raise it to avoid paying a round trip for a
lone op.

Logging (logger ``"litegpu"``, INFO): one line per node a delegate declines,
``op #42 RESIZE_NEAREST_NEIGHBOR v3 cannot be handled by opencl:
align_corners with half_pixel_centers``, and a summary per plan, ``12 of 15
ops on opencl in 2 partitions; the rest on CPU``.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ._delegate import Support
from ._errors import BackendUnavailableError, ModelError
from ._ir import Operator, Subgraph

__all__ = [
    "DEFAULT_MAX_DELEGATED_PARTITIONS",
    "DEFAULT_MIN_NODES_PER_PARTITION",
    "PartitionOptions",
    "Segment",
    "PartitionPlan",
    "partition",
    "NEVER_FOLD",
    "check_plan",
    "DependencyGraph",
]

logger = logging.getLogger("litegpu")

DEFAULT_MAX_DELEGATED_PARTITIONS = 4
DEFAULT_MIN_NODES_PER_PARTITION = 1

CPU = "cpu"

# Ops whose effects go beyond their outputs (resource variables, hash tables,
# subgraph calls): they keep their relative file order and are never folded.
_ORDERED_OPS = frozenset({
    "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE", "CALL", "WHILE", "IF",
    "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT", "HASHTABLE_SIZE",
})
#: Ops never evaluated at prepare even with constant inputs: the ordered ops above, control flow
#: (its body may have effects) and ops whose value changes from run to run.  Read by the
#: interpreter's folding (``_plan._foldable``), the one place that decides what folds.
NEVER_FOLD = _ORDERED_OPS | frozenset({
    "STABLEHLO_WHILE", "STABLEHLO_CASE", "STABLEHLO_COMPOSITE",
    "RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "STABLEHLO_RNG_BIT_GENERATOR",
})
_STATE_DTYPES = frozenset({"resource", "variant"})


ON_DEVICE_ERROR = ("fallback", "raise")
ON_DEVICE_ERROR_ENV = "LITEGPU_ON_DEVICE_ERROR"


def default_on_device_error() -> str:
    """``$LITEGPU_ON_DEVICE_ERROR`` when set (test suites and CI set ``raise`` so a GPU kernel bug
    fails loudly instead of being hidden by the CPU fallback), else ``fallback``."""
    value = os.environ.get(ON_DEVICE_ERROR_ENV, "").strip().lower()
    return value if value in ON_DEVICE_ERROR else "fallback"


@dataclass(frozen=True)
class PartitionOptions:
    """Partitioning limits (the configuration's ``partition`` section).

    ``max_delegated_partitions``: most partitions per delegate and subgraph,
    largest kept; 0 means no limit.  ``min_nodes_per_partition``: smaller
    partitions stay on the CPU.  ``log_unsupported_ops``: log one line per
    declined node.  ``fold_constants``: keep constant-only nodes off the
    delegates (the interpreter folds them at prepare).  ``on_device_error``:
    what a delegate failing at prepare or invoke does: ``fallback`` (a WARNING
    naming the error, then the delegate's partitions run on the CPU for that
    invoke and after) or ``raise`` (a :class:`~litegpu.DelegateError`).
    """

    max_delegated_partitions: int = DEFAULT_MAX_DELEGATED_PARTITIONS
    min_nodes_per_partition: int = DEFAULT_MIN_NODES_PER_PARTITION
    log_unsupported_ops: bool = True
    fold_constants: bool = True
    on_device_error: str = field(default_factory=default_on_device_error)

    def __post_init__(self) -> None:
        if self.on_device_error not in ON_DEVICE_ERROR:
            raise ValueError(f"on_device_error must be one of {', '.join(ON_DEVICE_ERROR)}, "
                             f"got {self.on_device_error!r}")

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any] | PartitionOptions | None) -> PartitionOptions:
        if m is None:
            return cls()
        if isinstance(m, PartitionOptions):
            return m
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in m.items() if k in known})


class Segment(NamedTuple):
    """One step of the execution order: ``backend`` runs ``node_indices`` (in order)."""

    backend: str
    node_indices: tuple[int, ...]
    delegate: int | None = None  # index into the delegate list; None for the CPU


@dataclass(frozen=True)
class PartitionPlan:
    """The partitioner's answer for one subgraph.

    ``segments``: CPU runs and delegated partitions, in execution order,
    without the ``folded`` nodes.  ``folded``: constant-only nodes, in a valid
    order, to evaluate once at prepare before anything else.  ``claimed``:
    node index -> backend name for every delegated node.  ``declined``:
    ``(node, backend) -> reason`` for each refusal asked.
    """

    segments: tuple[Segment, ...]
    folded: tuple[int, ...]
    claimed: Mapping[int, str]
    num_nodes: int
    declined: Mapping[tuple[int, str], str] = field(default_factory=dict)
    summary: str = ""
    #: the WARNING the partitioner logged (the summary and why nodes stay on the CPU), or ""
    warning: str = ""

    def partitions(self, backend: str | None = None) -> list[Segment]:
        """Delegated segments (of ``backend`` if given)."""
        return [s for s in self.segments if s.backend != CPU and (backend is None or s.backend == backend)]

    def pairs(self, include_folded: bool = True) -> list[tuple[str, tuple[int, ...]]]:
        """``[(backend, node_indices), ...]``; folded nodes first as a CPU segment when asked."""
        out: list[tuple[str, tuple[int, ...]]] = []
        if include_folded and self.folded:
            out.append((CPU, self.folded))
        for seg in self.segments:
            if include_folded and out and seg.backend == CPU and out[-1][0] == CPU:
                out[-1] = (CPU, out[-1][1] + seg.node_indices)
            else:
                out.append((seg.backend, seg.node_indices))
        return out


# ----------------------------------------------------------------------------
# Dependencies


class DependencyGraph:
    """Node-level dependencies of a subgraph.

    ``succ[i]``/``pred[i]``: nodes reading what ``i`` writes / written by what
    ``i`` reads, plus file-order edges between consecutive stateful nodes
    (resource variables, calls) whose order is not visible in the dataflow.
    ``order``: a topological order, equal to file order for a valid model.
    """

    def __init__(self, subgraph: Subgraph):
        ops = subgraph.operators
        n = len(ops)
        self.subgraph = subgraph
        self.producer: dict[int, int] = {}
        for op_i, op in enumerate(ops):
            for t in op.outputs:
                if t >= 0:
                    self.producer.setdefault(t, op_i)
        self.consumers: dict[int, list[int]] = {}
        self.succ: list[set[int]] = [set() for _ in range(n)]
        self.pred: list[set[int]] = [set() for _ in range(n)]
        for op_i, op in enumerate(ops):
            for t in op.inputs:
                if t < 0:
                    continue
                self.consumers.setdefault(t, []).append(op_i)
                p = self.producer.get(t)
                if p is not None and p != op_i:
                    self.succ[p].add(op_i)
                    self.pred[op_i].add(p)
        last_stateful = None
        for op_i, op in enumerate(ops):
            if self.is_stateful(op):
                if last_stateful is not None:
                    self.succ[last_stateful].add(op_i)
                    self.pred[op_i].add(last_stateful)
                last_stateful = op_i
        self.order = self._toposort()
        self.pos = {node: k for k, node in enumerate(self.order)}

    def is_stateful(self, op: Operator) -> bool:
        if op.opcode in _ORDERED_OPS:
            return True
        tensors = self.subgraph.tensors
        for t in op.inputs:
            if t >= 0 and (tensors[t].is_variable or tensors[t].dtype in _STATE_DTYPES):
                return True
        return False

    def _toposort(self) -> list[int]:
        n = len(self.succ)
        indeg = [len(p) for p in self.pred]
        heap = [i for i in range(n) if indeg[i] == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            i = heapq.heappop(heap)
            order.append(i)
            for j in self.succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(heap, j)
        if len(order) != n:
            stuck = sorted(set(range(n)) - set(order))[:5]
            raise ModelError(
                f"subgraph {self.subgraph.index} ({self.subgraph.name!r}): operators "
                f"{', '.join('#' + str(i) for i in stuck)} depend on each other in a cycle"
            )
        return order


# ----------------------------------------------------------------------------
# Partitioning

SupportSource = Callable[[int], Support] | Mapping[int, Support]


def _ask(source: SupportSource, node: int) -> Support:
    if callable(source):
        try:
            ans = source(node)
        except BackendUnavailableError:  # the backend's driver failed to start: no node's answer
            raise
        except Exception as exc:  # a delegate must answer with a reason, never raise
            return Support.no(f"supports() raised {exc!r}")
    else:
        ans = source.get(node, Support.no("not supported"))
    if isinstance(ans, Support):
        return ans
    return Support(bool(ans), "" if ans else "not supported")


class _Blocks:
    """The subgraph's active nodes grouped into blocks (single nodes or kept partitions)."""

    def __init__(self, graph: DependencyGraph, active: Sequence[int]):
        self.graph = graph
        self.nodes: dict[int, tuple[int, ...]] = {n: (n,) for n in active}  # block id -> nodes (by pos)
        self.owner: dict[int, int | None] = {n: None for n in active}
        self.block_of: dict[int, int] = {n: n for n in active}
        self.next_id = (max(active) + 1) if active else 0

    def key(self, b: int) -> int:
        return self.graph.pos[self.nodes[b][0]]

    def edges(self) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
        succ: dict[int, set[int]] = {b: set() for b in self.nodes}
        pred: dict[int, set[int]] = {b: set() for b in self.nodes}
        for b, members in self.nodes.items():
            for n in members:
                for m in self.graph.succ[n]:
                    c = self.block_of.get(m)
                    if c is not None and c != b:
                        succ[b].add(c)
                        pred[c].add(b)
        return succ, pred

    def contract(self, members: Sequence[int], owner: int) -> int:
        bid = self.next_id
        self.next_id += 1
        nodes = sorted((n for b in members for n in self.nodes[b]), key=self.graph.pos.__getitem__)
        for b in members:
            del self.nodes[b]
            del self.owner[b]
        self.nodes[bid] = tuple(nodes)
        self.owner[bid] = owner
        for n in nodes:
            self.block_of[n] = bid
        return bid


def _sweep(blocks: _Blocks, cand: set[int], succ: dict[int, set[int]], pred: dict[int, set[int]]) -> list[list[int]]:
    """Topological sweep: run all ready non-candidates, then grow one candidate group as far as possible."""
    indeg = {b: len(pred[b]) for b in blocks.nodes}
    ready_other: list[tuple[int, int]] = []
    ready_cand: list[tuple[int, int]] = []
    for b, d in indeg.items():
        if d == 0:
            heapq.heappush(ready_cand if b in cand else ready_other, (blocks.key(b), b))

    def release(b: int) -> None:
        for c in succ[b]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready_cand if c in cand else ready_other, (blocks.key(c), c))

    groups = []
    while ready_other or ready_cand:
        while ready_other:
            release(heapq.heappop(ready_other)[1])
        if ready_cand:
            group = []
            while ready_cand:
                b = heapq.heappop(ready_cand)[1]
                group.append(b)
                release(b)
            groups.append(group)
    return groups


class _UnionFind:
    def __init__(self, items: Iterable[int]):
        self.parent = {i: i for i in items}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _touching(blocks: _Blocks, subgraph: Subgraph) -> dict[int, set[int]]:
    """Undirected "connected" relation between blocks: producer/consumer or shared non-constant input."""
    adj: dict[int, set[int]] = {b: set() for b in blocks.nodes}
    graph = blocks.graph
    for b, members in blocks.nodes.items():
        for n in members:
            for m in graph.succ[n] | graph.pred[n]:
                c = blocks.block_of.get(m)
                if c is not None and c != b:
                    adj[b].add(c)
    for t, readers in graph.consumers.items():
        if len(readers) < 2 or subgraph.tensors[t].data is not None:
            continue
        bs = {blocks.block_of[r] for r in readers if r in blocks.block_of}
        if len(bs) > 1:
            for b in bs:
                adj[b] |= bs - {b}
    return adj


def _components(groups: list[list[int]], adj: dict[int, set[int]]) -> list[list[int]]:
    comps = []
    for group in groups:
        members = set(group)
        uf = _UnionFind(group)
        for b in group:
            for c in adj[b]:
                if c in members:
                    uf.union(b, c)
        by_root: dict[int, list[int]] = {}
        for b in group:
            by_root.setdefault(uf.find(b), []).append(b)
        comps.extend(by_root.values())
    return comps


def _merge(blocks: _Blocks, comps: list[list[int]], succ: dict[int, set[int]], adj: dict[int, set[int]]) -> list[list[int]]:
    """Merge touching components when no path between them passes through another block.

    Works on the quotient graph whose vertices are the components and the
    remaining blocks; it is acyclic (the sweep's order is a topological order)
    and stays so after each accepted merge.  Reachability searches are pruned
    with a topological rank of that graph, recomputed after each merge.
    """
    comp_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    for k, comp in enumerate(comps):
        members[k] = list(comp)
        for b in comp:
            comp_of[b] = k

    def gid(b: int) -> tuple[str, int]:
        return ("c", comp_of[b]) if b in comp_of else ("b", b)

    def rebuild() -> tuple[dict[tuple[str, int], set[tuple[str, int]]], dict[tuple[str, int], int]]:
        gs: dict[tuple[str, int], set[tuple[str, int]]] = {}
        for b in blocks.nodes:
            g = gid(b)
            gs.setdefault(g, set()).update(gid(c) for c in succ[b])
        indeg = dict.fromkeys(gs, 0)
        for g, out in gs.items():
            out.discard(g)
            for h in out:
                indeg[h] += 1
        ready = [g for g, d in indeg.items() if d == 0]
        rank: dict[tuple[str, int], int] = {}
        while ready:
            g = ready.pop()
            rank[g] = len(rank)
            for h in gs[g]:
                indeg[h] -= 1
                if indeg[h] == 0:
                    ready.append(h)
        if len(rank) != len(gs):
            raise AssertionError("partitioner: cyclic quotient graph while merging")  # by construction
        return gs, rank

    gs, rank = rebuild()

    def reaches_indirectly(src: tuple[str, int], dst: tuple[str, int]) -> bool:
        horizon = rank[dst]  # only groups ranked before dst can lead to it
        stack = [g for g in gs[src] if g != dst and rank[g] < horizon]
        seen = set(stack)
        while stack:
            g = stack.pop()
            for h in gs[g]:
                if h == dst:
                    return True
                if h not in seen and rank[h] < horizon:
                    seen.add(h)
                    stack.append(h)
        return False

    budget = _MERGE_BUDGET
    changed = True
    while changed and budget > 0:
        changed = False
        for k in sorted(members):
            if k not in members:
                continue
            neigh = sorted({comp_of[c] for b in members[k] for c in adj[b] if c in comp_of} - {k})
            for j in neigh:
                if j not in members or k not in members or budget <= 0:
                    continue
                budget -= 1
                a, b = ("c", k), ("c", j)
                first, second = (a, b) if rank[a] < rank[b] else (b, a)
                if reaches_indirectly(first, second):
                    continue
                members[k].extend(members.pop(j))
                for blk in members[k]:
                    comp_of[blk] = k
                gs, rank = rebuild()
                changed = True
    return [members[k] for k in sorted(members)]


_MERGE_BUDGET = 4000  # reachability searches per delegate; beyond it merging stops (still valid, maybe more parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def partition(
    subgraph: Subgraph,
    delegates: Sequence[tuple[str, SupportSource]],
    options: PartitionOptions | Mapping[str, Any] | None = None,
    *,
    folded: Iterable[int] | None = None,
) -> PartitionPlan:
    """Partition ``subgraph`` among ``delegates`` (``(name, supports)`` in preference order).

    ``supports`` is a mapping node index -> :class:`Support` (missing = no) or
    a callable ``node_index -> Support``, asked only for nodes still
    unclaimed when that delegate's turn comes.  ``folded``: nodes the caller
    has already folded into constants (they are neither asked about nor
    scheduled; the interpreter's plan decides them, ``_plan._foldable``);
    none by default.  See the module docstring for the rules.
    """
    opts = PartitionOptions.from_mapping(options)
    graph = DependencyGraph(subgraph)
    ops = subgraph.operators
    given = set(folded or ())
    folded = tuple(n for n in graph.order if n in given)
    folded_set = set(folded)
    active = [n for n in graph.order if n not in folded_set]
    blocks = _Blocks(graph, active)
    declined: dict[tuple[int, str], str] = {}
    kept_counts: list[tuple[str, int, int]] = []  # (name, nodes, partitions)

    for d_index, (name, source) in enumerate(delegates):
        cand: set[int] = set()
        for n in active:
            b = blocks.block_of[n]
            if blocks.owner[b] is not None:
                continue
            ans = _ask(source, n)
            if ans.ok:
                cand.add(b)
            else:
                reason = ans.reason or "no reason given"
                declined[(n, name)] = reason
                if opts.log_unsupported_ops:
                    op = ops[n]
                    logger.info("op #%d %s v%d cannot be handled by %s: %s", n, op.name, op.version, name, reason)
        if not cand:
            kept_counts.append((name, 0, 0))
            continue
        succ, pred = blocks.edges()
        adj = _touching(blocks, subgraph)
        comps = _components(_sweep(blocks, cand, succ, pred), adj)
        comps = _merge(blocks, comps, succ, adj)
        ranked = sorted(comps, key=lambda c: (-len(c), min(blocks.key(b) for b in c)))
        kept, limit = [], opts.max_delegated_partitions
        for comp in ranked:
            first, last = min(blocks.key(b) for b in comp), max(blocks.key(b) for b in comp)
            span = f"ops #{graph.order[first]}..#{graph.order[last]}" if first != last else f"op #{graph.order[first]}"
            if len(comp) < opts.min_nodes_per_partition:
                logger.info("%s partition of %s (%s) left to the CPU: min_nodes_per_partition=%d",
                            name, _plural(len(comp), "op"), span, opts.min_nodes_per_partition)
            elif limit and len(kept) >= limit:
                logger.info("%s partition of %s (%s) left to the CPU: max_delegated_partitions=%d keeps the "
                            "%d largest", name, _plural(len(comp), "op"), span, limit, limit)
            else:
                kept.append(comp)
        for comp in kept:
            blocks.contract(comp, d_index)
        kept_counts.append((name, sum(len(c) for c in kept), len(kept)))

    segments = _order_segments(blocks, [name for name, _ in delegates])
    claimed = {n: seg.backend for seg in segments if seg.backend != CPU for n in seg.node_indices}
    summary = _summary(subgraph, len(ops), kept_counts, len(folded)) if delegates else ""
    warning = ""
    if summary:
        on_cpu = [n for n in active if n not in claimed]
        if on_cpu:
            # Anything left to the CPU is a fallback the user should see without configuring logging.
            warning = summary + _why_on_cpu(ops, on_cpu, declined)
            logger.warning("%s", warning)
        else:
            logger.info("%s", summary)
    return PartitionPlan(tuple(segments), folded, claimed, len(ops), declined, summary, warning)


def _order_segments(blocks: _Blocks, names: Sequence[str]) -> list[Segment]:
    succ, pred = blocks.edges()
    indeg = {b: len(p) for b, p in pred.items()}
    heap = [(blocks.key(b), b) for b, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    segments: list[Segment] = []
    while heap:
        b = heapq.heappop(heap)[1]
        owner = blocks.owner[b]
        if owner is None:
            if segments and segments[-1].backend == CPU:
                segments[-1] = Segment(CPU, segments[-1].node_indices + blocks.nodes[b], None)
            else:
                segments.append(Segment(CPU, blocks.nodes[b], None))
        else:
            segments.append(Segment(names[owner], blocks.nodes[b], owner))
        for c in succ[b]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, (blocks.key(c), c))
    if sum(len(s.node_indices) for s in segments) != len(blocks.block_of):
        raise AssertionError("partitioner produced a cyclic block graph")  # guarded by construction
    return segments


def _why_on_cpu(ops: Sequence[Any], on_cpu: Sequence[int], declined: Mapping[tuple[int, str], str]) -> str:
    """``"; declined: RESIZE_BILINEAR x2 (opencl: align_corners), ..."``: why the CPU ops are there,
    grouped by op name and reason (the first reason per node; nodes no delegate declined were
    left to the CPU by the partition limits)."""
    reasons: dict[int, str] = {}
    for (n, name), why in declined.items():
        reasons.setdefault(n, f"{name}: {why}")
    groups: dict[tuple[str, str], int] = {}
    for n in on_cpu:
        key = (ops[n].name, reasons.get(n, "partition limits"))
        groups[key] = groups.get(key, 0) + 1
    items = [f"{op}{f' x{k}' if k > 1 else ''} ({why})" for (op, why), k in groups.items()]
    if len(items) > 6:
        items = [*items[:6], f"{len(items) - 6} more (litegpu inspect MODEL lists them)"]
    return "; declined: " + ", ".join(items)


def _summary(subgraph: Subgraph, total: int, kept: list[tuple[str, int, int]], n_folded: int) -> str:
    parts = [f"{n} of {total} ops on {name} in {_plural(k, 'partition')}" for name, n, k in kept]
    text = ", ".join(parts)
    if sum(n for _, n, _ in kept) + n_folded < total:
        text += "; the rest on CPU"
    if n_folded:
        text += f" ({_plural(n_folded, 'constant op')} folded at prepare)"
    if subgraph.index:
        text = f"subgraph {subgraph.index} ({subgraph.name}): {text}"
    return text


# ----------------------------------------------------------------------------
# Validation (tests and debug builds)


def check_plan(subgraph: Subgraph, plan: PartitionPlan) -> None:
    """Raise ``AssertionError`` unless ``plan`` is a valid schedule of ``subgraph``.

    Checks: every node exactly once (folded nodes first); every dependency
    of a node runs before it in the flattened order (which proves that no
    path leaves a partition and re-enters it: each partition is contiguous in
    a topological order); every delegated segment is connected.
    """
    graph = DependencyGraph(subgraph)
    seen: list[int] = list(plan.folded) + [n for s in plan.segments for n in s.node_indices]
    assert sorted(seen) == list(range(len(subgraph.operators))), f"nodes not scheduled exactly once: {seen}"
    ready = {t.index for t in subgraph.tensors if t.data is not None} | set(subgraph.inputs)
    ready |= {t.index for t in subgraph.tensors if t.is_variable}
    order = list(plan.folded) + [n for s in plan.segments for n in s.node_indices]
    done: set[int] = set()
    for n in order:
        op = subgraph.operators[n]
        for t in op.inputs:
            if t >= 0 and t not in ready and t in graph.producer:
                raise AssertionError(f"op #{n} reads tensor {t} before op #{graph.producer[t]} writes it")
        for p in graph.pred[n]:
            assert p in done, f"op #{n} runs before its dependency op #{p}"
        done.add(n)
        ready.update(t for t in op.outputs if t >= 0)
    for seg in plan.partitions():
        members = set(seg.node_indices)
        uf = _UnionFind(members)
        for n in members:
            for m in (graph.succ[n] | graph.pred[n]) & members:
                uf.union(n, m)
        for t, readers in graph.consumers.items():
            rs = [r for r in readers if r in members]
            if len(rs) > 1 and subgraph.tensors[t].data is None:
                for r in rs[1:]:
                    uf.union(rs[0], r)
        roots = {uf.find(n) for n in members}
        assert len(roots) == 1, f"{seg.backend} partition {seg.node_indices} is not connected"
