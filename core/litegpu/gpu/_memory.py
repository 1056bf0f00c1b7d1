"""Memory planning: intermediate tensors share one arena.

Each intermediate tensor (written and read inside the partition, not a
partition input/output, not a constant) lives from the op that writes it to
the last op that reads it, over the linear op order.  Tensors whose
lifetimes do not overlap may share bytes.  :func:`plan_arena` assigns byte
offsets with the *greedy-by-size* heuristic: tensors in decreasing size,
each placed at the offset of the smallest gap (among already placed tensors
whose lifetimes overlap) it fits in, else above them all.  The result is
compared with two numbers:

* ``naive_bytes``: every tensor in its own buffer (the sum of sizes);
* ``lower_bound``: the most bytes live at any one op (no plan can use less).

Sizes are rounded up to ``alignment`` bytes (a sub-buffer offset must be
aligned on most APIs: OpenCL's ``CL_DEVICE_MEM_BASE_ADDR_ALIGN`` is often
1024 bits, WebGPU's ``minStorageBufferOffsetAlignment`` is 256 bytes).
Partition inputs, outputs and constants get buffers of their own (inputs are
uploaded, outputs may outlive the partition, constants are read-only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field

import numpy as np

from .._errors import ConfigError
from .._records import dataclass  # no compiled methods: a warm start imports this module
from ._graph import GpuGraph
from ._layout import phwc4_nbytes

__all__ = ["MemoryPlan", "tensor_lifetimes", "plan_arena", "plan_graph_memory", "DEFAULT_ALIGNMENT"]

DEFAULT_ALIGNMENT = 256


@dataclass
class MemoryPlan:
    """Offsets of the intermediates in one arena, and how good the plan is."""

    offsets: dict[int, int]
    sizes: dict[int, int]  # aligned sizes
    lifetimes: dict[int, tuple[int, int]]
    arena_bytes: int
    naive_bytes: int
    lower_bound: int
    alignment: int
    strategy: str = "greedy_by_size"
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """``arena_bytes / lower_bound`` (1.0 is optimal)."""
        return self.arena_bytes / self.lower_bound if self.lower_bound else 1.0

    def summary(self) -> dict[str, float | int | str]:
        return {"strategy": self.strategy, "tensors": len(self.offsets), "arena_bytes": self.arena_bytes,
                "naive_bytes": self.naive_bytes, "lower_bound": self.lower_bound,
                "ratio_to_lower_bound": round(self.ratio, 4), "alignment": self.alignment, **self.extra}

    def check(self) -> None:
        """Assert that no two tensors with overlapping lifetimes overlap in memory."""
        ids = sorted(self.offsets, key=lambda t: self.offsets[t])
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                if self.offsets[b] >= self.offsets[a] + self.sizes[a]:
                    break
                (f1, l1), (f2, l2) = self.lifetimes[a], self.lifetimes[b]
                if f1 <= l2 and f2 <= l1:
                    raise AssertionError(f"tensors {a} and {b} overlap in time and memory")


def tensor_lifetimes(g: GpuGraph) -> dict[int, tuple[int, int]]:
    """``{tensor: (first op, last op)}`` for every intermediate tensor, over ``g.nodes`` order."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    excluded = set(g.inputs) | set(g.outputs)
    for i, n in enumerate(g.nodes):
        for t in n.outputs:
            if t not in excluded:
                first.setdefault(t, i)
                last[t] = max(last.get(t, i), i)
        for t in n.reads():
            if t in first:
                last[t] = i
    return {t: (first[t], last[t]) for t in first}


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _lower_bound(sizes: Mapping[int, int], lifetimes: Mapping[int, tuple[int, int]]) -> int:
    if not sizes:
        return 0
    n_ops = max(last for _, last in lifetimes.values()) + 2
    delta = np.zeros(n_ops, np.int64)
    for t, (f, la) in lifetimes.items():
        delta[f] += sizes[t]
        delta[la + 1] -= sizes[t]
    return int(np.cumsum(delta).max())


def _place(order: list[int], asz: Mapping[int, int], lifetimes: Mapping[int, tuple[int, int]],
           best_fit: bool) -> dict[int, int]:
    """Place tensors in ``order``, each at the smallest (best fit) or lowest (first fit) gap left by the
    already placed tensors whose lifetimes overlap its own, else above them."""
    offsets: dict[int, int] = {}
    for t in order:
        f, la = lifetimes[t]
        size = asz[t]
        live = sorted((offsets[p], offsets[p] + asz[p]) for p in offsets
                      if lifetimes[p][0] <= la and f <= lifetimes[p][1])
        best, best_gap, cursor = None, None, 0
        for start, end in live:
            gap = start - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
                if not best_fit:
                    break
            cursor = max(cursor, end)
        offsets[t] = cursor if best is None else best
    return offsets


def _orders(asz: Mapping[int, int], lifetimes: Mapping[int, tuple[int, int]]) -> dict[str, list[int]]:
    by_size = sorted(asz, key=lambda t: (-asz[t], lifetimes[t][0], t))
    # breadth: walk the ops in order; at each, the not-yet-placed tensors live there, largest first
    points = sorted({i for f, la in lifetimes.values() for i in range(f, la + 1)})
    by_breadth: list[int] = []
    seen: set[int] = set()
    sizes_at = {i: 0 for i in points}
    for t, (f, la) in lifetimes.items():
        for i in range(f, la + 1):
            sizes_at[i] += asz[t]
    # the busiest ops first: their tensors are the ones that must pack tightly
    for i in sorted(points, key=lambda i: -sizes_at[i]):
        here = [t for t, (f, la) in lifetimes.items() if f <= i <= la and t not in seen]
        here.sort(key=lambda t: (-asz[t], t))
        by_breadth += here
        seen.update(here)
    by_span = sorted(asz, key=lambda t: (-(lifetimes[t][1] - lifetimes[t][0]), -asz[t], t))
    by_area = sorted(asz, key=lambda t: (-(lifetimes[t][1] - lifetimes[t][0] + 1) * asz[t], t))
    by_time = sorted(asz, key=lambda t: (lifetimes[t][0], -asz[t], t))
    return {"size": by_size, "breadth": by_breadth, "span": by_span, "area": by_area, "time": by_time}


#: the local search of plan_arena: positions of the order it moves, and placements it may spend
_SWAP_HEAD, _SWAP_BUDGET = 12, 400


def _swap_search(arena: int, label: str, offsets: dict[int, int], asz: Mapping[int, int],
                 lifetimes: Mapping[int, tuple[int, int]], lower: int) -> tuple[int, str, dict[int, int]]:
    """Improve a greedy placement by swapping two tensors of its order (see :func:`plan_arena`)."""
    fit = label.endswith("/best_fit")
    # the winning order, recovered from the placement: the greedy placed tensors in this order
    name = label.split("/")[0].removeprefix("greedy_by_")
    order = list(_orders(asz, lifetimes)[name])
    spent, improved = 0, True
    while improved and arena > lower * 1.02 and spent < _SWAP_BUDGET:
        improved = False
        for i in range(min(_SWAP_HEAD, len(order))):
            for j in range(i + 1, len(order)):
                if spent >= _SWAP_BUDGET:
                    break
                cand = order[:]
                cand[i], cand[j] = cand[j], cand[i]
                spent += 1
                offs = _place(cand, asz, lifetimes, fit)
                a = max((offs[t] + asz[t] for t in offs), default=0)
                if a < arena:
                    arena, order, offsets, improved = a, cand, offs, True
                    break
            if improved:
                break
    if spent:
        label = f"{label}+swaps"
    return arena, label, offsets


def plan_arena(sizes: Mapping[int, int], lifetimes: Mapping[int, tuple[int, int]], *,
               alignment: int = DEFAULT_ALIGNMENT, groups: Sequence[Sequence[int]] = ()) -> MemoryPlan:
    """Assign arena offsets to tensors (bytes, lifetimes): greedy placement under a few orders.

    Orders tried: by size (largest first, the classic "greedy by size"), by
    breadth (the tensors of the busiest op first, largest first), by lifetime
    span, by area (size x span), by first use; each with best-fit and
    first-fit gap choice.  The smallest arena
    wins (all are cheap: O(n^2) in the number of intermediates).  When that is still more than 5% above
    the lower bound, a short local search swaps tensors of the winning order (one of its first
    ``_SWAP_HEAD`` with any other, first improvement kept) until within 2% of it or out of
    ``_SWAP_BUDGET`` placements: pose_landmark_full's arena, 10.9% above its bound with the staged
    depthwise kernel's graph, reaches the bound itself that way.

    ``groups``: tensors placed back to back, each at the previous one's offset plus the group's stride (its
    largest aligned size), one binding of a branched launch covering them all (``_passes/twins``): a group
    is placed as one block living from its first tensor's first use to its last tensor's last.
    """
    if alignment <= 0 or alignment & (alignment - 1):
        raise ConfigError(f"memory alignment must be a positive power of two, got {alignment}")
    if not groups:
        return _plan_blocks(sizes, lifetimes, alignment)
    asz = {t: _align(max(int(s), 1), alignment) for t, s in sizes.items()}
    grouped = {t for grp in groups for t in grp}
    if len(grouped) != sum(len(grp) for grp in groups) or not grouped <= set(asz):
        raise ValueError("memory groups must be disjoint sets of planned tensors")
    # a block per group, under a negative id (tensor ids are not negative)
    bsz = {t: a for t, a in asz.items() if t not in grouped}
    blife = {t: lifetimes[t] for t in bsz}
    strides = []
    for k, grp in enumerate(groups):
        stride = max(asz[t] for t in grp)
        strides.append(stride)
        bsz[-1 - k] = stride * len(grp)
        blife[-1 - k] = (min(lifetimes[t][0] for t in grp), max(lifetimes[t][1] for t in grp))
    plan = _plan_blocks(bsz, blife, alignment)
    offsets = {t: o for t, o in plan.offsets.items() if t >= 0}
    for k, grp in enumerate(groups):
        for n, t in enumerate(grp):
            offsets[t] = plan.offsets[-1 - k] + n * strides[k]
    return MemoryPlan(offsets=offsets, sizes=asz, lifetimes=dict(lifetimes), arena_bytes=plan.arena_bytes,
                      naive_bytes=sum(asz.values()), lower_bound=_lower_bound(asz, lifetimes), alignment=alignment,
                      strategy=plan.strategy, extra={"groups": len(groups)})


def _plan_blocks(sizes: Mapping[int, int], lifetimes: Mapping[int, tuple[int, int]], alignment: int) -> MemoryPlan:
    """:func:`plan_arena` without groups."""
    asz = {t: _align(max(int(s), 1), alignment) for t, s in sizes.items()}
    best: tuple[int, str, dict[int, int]] | None = None
    for name, order in _orders(asz, lifetimes).items():
        for fit in (True, False):
            offsets = _place(order, asz, lifetimes, fit)
            arena = max((offsets[t] + asz[t] for t in offsets), default=0)
            label = f"greedy_by_{name}/{'best' if fit else 'first'}_fit"
            if best is None or arena < best[0]:
                best = (arena, label, offsets)
    assert best is not None
    arena, label, offsets = best
    lower = _lower_bound(asz, lifetimes)
    if arena > lower * 1.05:
        arena, label, offsets = _swap_search(arena, label, offsets, asz, lifetimes, lower)
    return MemoryPlan(offsets=offsets, sizes=asz, lifetimes=dict(lifetimes), arena_bytes=arena,
                      naive_bytes=sum(asz.values()), lower_bound=lower,
                      alignment=alignment, strategy=label)


def plan_graph_memory(g: GpuGraph, *, itemsize: int = 4, alignment: int = DEFAULT_ALIGNMENT) -> MemoryPlan:
    """Plan the PHWC4 intermediates of ``g`` (``itemsize`` = bytes per element of the storage type)."""
    lifetimes = tensor_lifetimes(g)
    sizes = {t: phwc4_nbytes(g.tensors[t].shape, itemsize) for t in lifetimes}
    plan = plan_arena(sizes, lifetimes, alignment=alignment)
    boundary = {t for t in (*g.inputs, *g.outputs)}
    plan.extra["boundary_bytes"] = sum(_align(phwc4_nbytes(g.tensors[t].shape, itemsize), alignment)
                                       for t in boundary)
    return plan
