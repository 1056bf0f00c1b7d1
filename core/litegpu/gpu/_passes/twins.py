"""Twin launches: launches of one kernel with the same options and params on different data, independent
of each other, become one launch serving them all as *branches* (kernel option ``branches``).

This pass works on the lowered launch list (``compile_graph`` runs it after lowering, before the memory
plan), so it takes any kernel: iris_landmark's and face_landmark's two output branches are equal chains
of depthwise -> 1x1 blocks, strided convs and 1x1 convs with different weights, each link a pair of equal
launches.  Per binding of the kernel, the branches either share the data (the same tensor or equal
constants: bound as before) or each have their own:

* constants (weights, biases, PRELU alphas) are stacked into one array, branch after branch;
* runtime tensors form a *group* (``GpuPlan.groups``) that the memory plan places back to back at a
  fixed stride (``_memory.plan_arena``'s ``groups``; partition inputs/outputs in one buffer of their own,
  ``_runtime``), so that one binding covers every branch's tensor.

The kernel finds its branch from the launch grid and reads each such buffer at the branch's offset, param
``BR_<binding>`` bytes further per branch (``gpu/lgk/branches``: a rewrite of the parsed template, no
template is edited).  Each tensor joins one group at most, at one position: a later pair whose tensors sit
in another group (or in reverse order, which a permutation of its branches cannot mend) stays apart.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .._cost import DeviceCost, estimate, in_invoke, launch_work
from .._graph import GpuOp, Report
from .._kernel_specs import stride_param

__all__ = ["merge_twin_launches", "branch_launches", "TWIN_LAUNCHES", "MAX_BRANCHES"]

#: A/B switch (``--set litegpu.gpu._passes.twins.TWIN_LAUNCHES=False``): False keeps one launch a branch
#: (and ``fuse_sibling_heads`` merges equal twin heads itself, as before this pass).
TWIN_LAUNCHES = True

#: the most launches one merged launch serves
MAX_BRANCHES = 8

#: how far apart (in launches) twins may be: bounds the pass's work on long launch lists (an unrolled sequence
#: LSTM's equal, dependent steps); iris_landmark's twins are at most 4 apart, face_landmark's 3
WINDOW = 256

#: the largest z range a merged launch may have (Vulkan's and WebGPU's guaranteed minimum of
#: ``maxComputeWorkGroupCount`` / ``maxComputeWorkgroupsPerDimension``, counted as if groups were 1 deep)
MAX_GRID_Z = 65535


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _signature(op: GpuOp) -> tuple | None:
    """What must be equal for two launches to be one launch's branches (None: not a candidate)."""
    if int(op.options.get("branches", 1)) > 1 or not op.bindings:
        return None
    consts = tuple((n, op.constants[s].shape, op.constants[s].dtype.str) if isinstance(s, str) else (n, None, None)
                   for n, s in op.bindings)
    return (op.kernel, _freeze(op.options), _freeze(op.params), op.precision, op.accumulator,
            _freeze(op.buffer_storage), consts)


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b))


def _descendants(ops: Sequence[GpuOp], i: int, end: int) -> set[int]:
    """Indices in ``(i, end)`` of the launches that read (directly or through others) what launch ``i`` writes."""
    made = set(ops[i].outputs)
    out: set[int] = set()
    for j in range(i + 1, min(end, len(ops))):
        if made.intersection(ops[j].inputs):
            out.add(j)
            made.update(ops[j].outputs)
    return out


def _ancestors(ops: Sequence[GpuOp], j: int, lo: int) -> set[int]:
    """Indices in ``(lo, j)`` of the launches whose results launch ``j`` reads, directly or through others."""
    need = set(ops[j].inputs)
    out: set[int] = set()
    for i in range(j - 1, lo, -1):
        if need.intersection(ops[i].outputs):
            out.add(i)
            need.update(ops[i].inputs)
    return out


def _grid_z(op: GpuOp) -> int:
    """The launch's z range (its kernel's grid, whatever the dialect)."""
    from ..kernels import render

    return render(op.kernel, "opencl", op.precision or "fp32", **op.options).global_size(op.params)[2]


def _pays(op: GpuOp, k: int, dev: DeviceCost | None) -> bool:
    """The cost model's word: one launch doing ``k`` launches' work (``k`` times the threads, bytes and flops)
    against ``k`` launches.  Kernels the model does not price merge: the merged launch does the same work
    with fewer launches (on NVIDIA about 5 us each)."""
    w = launch_work(op.kernel, op.options, op.params) if dev is not None else None
    if w is None or dev is None:
        return True
    merged = replace(w, threads=w.threads * k, cache_bytes=w.cache_bytes * k, flops=w.flops * k)
    return in_invoke(estimate(merged, dev), dev) < k * in_invoke(estimate(w, dev), dev)


def merge_twin_launches(ops: list[GpuOp], nbytes: Callable[[int], int], boundary: set[int], alignment: int,
                        cost: DeviceCost | None = None) -> tuple[list[GpuOp], list[tuple[int, ...]], Report]:
    """Merge equal independent launches of ``ops`` into branched launches (see the module doc).

    ``nbytes(t)``: a runtime tensor's bytes on the device; ``boundary``: the partition's inputs and outputs
    (a group of them shares one buffer; a group never mixes them with intermediates).  Returns the new
    launch list, the tensor groups (each placed back to back at the stride of its first tensor's size
    rounded up to ``alignment``) and the report."""
    if not TWIN_LAUNCHES:
        return ops, [], ["off (TWIN_LAUNCHES = False)"]
    ops = list(ops)
    chains = _Chains()
    lines: Report = []
    saved = 0
    declined: dict[str, int] = {}
    sigs: dict[int, tuple | None] = {}  # by id(op): the launch objects stay while the list is rebuilt

    def sig_of(op: GpuOp) -> tuple | None:
        if id(op) not in sigs:
            sigs[id(op)] = _signature(op)
        return sigs[id(op)]

    def positions() -> dict[tuple, list[int]]:
        """Each candidate signature's launch positions, in order (rebuilt after each merge)."""
        out: dict[tuple, list[int]] = {}
        for n, op in enumerate(ops):
            sg = sig_of(op)
            if sg is not None:
                out.setdefault(sg, []).append(n)
        return out

    where = positions()
    i = 0
    while i < len(ops):
        sig = sig_of(ops[i])
        end = min(len(ops), i + 1 + WINDOW)
        at = where.get(sig, []) if sig is not None else []
        same = at[bisect.bisect_right(at, i):bisect.bisect_left(at, end)]
        if not same:
            i += 1
            continue
        members = [i]
        end = same[-1] + 1  # no need to know more of the graph than the last candidate
        below = _descendants(ops, i, end)
        for j in same:
            if len(members) >= MAX_BRANCHES:
                break
            if j in below:
                continue
            members.append(j)
            below |= _descendants(ops, j, end)
        members = members[:max(1, MAX_GRID_Z // _grid_z(ops[i]))]
        if len(members) < 2:
            i += 1
            continue
        if not _pays(ops[i], len(members), cost):
            declined["the cost model prefers separate launches"] = declined.get(
                "the cost model prefers separate launches", 0) + 1
            i += 1
            continue
        merged, why = _merge([ops[m] for m in members], chains, nbytes, boundary, alignment)
        if merged is None:
            declined[why] = declined.get(why, 0) + 1
            i += 1
            continue
        # the merged launch takes the first one's place; what the others need and is computed between goes first
        hoist: set[int] = set()
        for m in members[1:]:
            hoist |= _ancestors(ops, m, i)
        taken = set(members)
        nodes = [ops[m].node for m in members]
        before = [ops[x] for x in sorted(hoist)]
        rest = [ops[x] for x in range(i + 1, len(ops)) if x not in hoist and x not in taken]
        ops = ops[:i] + before + [merged] + rest
        saved += len(members) - 1
        lines.append(f"merged {len(members)} {merged.kernel} launches (graph nodes "
                     f"{', '.join(str(n) for n in nodes)}) into one: {merged.describe()}")
        i += len(before) + 1
        where = positions()
    groups = chains.groups()
    summary = f"merged twin launches: {saved} launches fewer, {len(groups)} tensor groups"
    if declined:
        summary += " (kept apart: " + ", ".join(f"{v} {k}" for k, v in sorted(declined.items())) + ")"
    return ops, groups, [summary, *lines]


class _Chains:
    """Tensors placed back to back: each branched binding asks for its branches' tensors at consecutive
    places (a *window*); windows sharing tensors join into one chain (face_landmark: a merged launch writes
    (a, b), the next reads (b, c): one chain a, b, c).  ``nxt``/``prv``: a tensor's neighbours."""

    def __init__(self) -> None:
        self.nxt: dict[int, int] = {}
        self.prv: dict[int, int] = {}

    def fits(self, window: Sequence[int]) -> bool:
        """Whether ``window`` can be consecutive places of a chain, given the chains so far."""
        nxt, prv = dict(self.nxt), dict(self.prv)
        for a, b in itertools.pairwise(window):
            if nxt.get(a, b) != b or prv.get(b, a) != a:
                return False
            nxt[a], prv[b] = b, a
        # no cycle: walking forward from the window's start must end
        seen, t = set(), window[0]
        while t in nxt:
            if t in seen:
                return False
            seen.add(t)
            t = nxt[t]
        return t not in seen

    def add(self, window: Sequence[int]) -> None:
        for a, b in itertools.pairwise(window):
            self.nxt[a], self.prv[b] = b, a

    def chain_of(self, t: int) -> list[int]:
        while t in self.prv:
            t = self.prv[t]
        out = [t]
        while t in self.nxt:
            t = self.nxt[t]
            out.append(t)
        return out

    def groups(self) -> list[tuple[int, ...]]:
        return [tuple(self.chain_of(t)) for t in self.nxt if t not in self.prv]


def _merge(members: list[GpuOp], chains: _Chains, nbytes: Callable[[int], int], boundary: set[int],
           alignment: int) -> tuple[GpuOp | None, str]:
    """One launch serving ``members`` (equal signatures; their windows added to ``chains``), or (None, why)."""
    k = len(members)
    first = members[0]
    # the bindings whose runtime tensors differ: windows of chains, in one branch order for all
    differing = []
    for idx, (_name, src) in enumerate(first.bindings):
        if isinstance(src, str):
            continue
        srcs = tuple(m.bindings[idx][1] for m in members)
        if len(set(srcs)) == 1:
            continue
        if len(set(srcs)) != k:
            return None, "a tensor shared by some branches only"
        differing.append(srcs)
    order = None
    for perm in (itertools.permutations(range(k)) if k <= 4 else [tuple(range(k))]):
        trial = _Chains()
        trial.nxt, trial.prv = dict(chains.nxt), dict(chains.prv)
        ok = True
        for srcs in differing:
            window = tuple(srcs[p] for p in perm)
            if not trial.fits(window):
                ok = False
                break
            trial.add(window)
        if ok:
            order = perm
            break
    if order is None:
        return None, "tensors already placed in another order"
    for srcs in differing:  # one chain: all inputs/outputs or all intermediates, one size
        chain = trial.chain_of(srcs[0])
        if len({t in boundary for t in chain}) != 1:
            return None, "a partition input/output and an intermediate in one group"
        if len({-(-nbytes(t) // alignment) for t in chain}) != 1:
            return None, "tensors of different sizes"
    members = [members[p] for p in order]
    first = members[0]
    params = dict(first.params)
    constants: dict[str, np.ndarray] = {}
    bindings: list[tuple[str, int | str]] = []
    branched: list[str] = []
    for idx, (name, src) in enumerate(first.bindings):
        bindings.append((name, src))
        srcs = [m.bindings[idx][1] for m in members]
        if isinstance(src, str):
            arrs = [np.ascontiguousarray(m.constants[s]) for m, s in zip(members, srcs, strict=True)]
            if all(_same_array(a, arrs[0]) for a in arrs[1:]):
                constants[src] = arrs[0]
                continue
            if arrs[0].size % 4:  # a stride of whole elements of any binding type (up to a vec4 of its dtype)
                return None, "a constant of a size that is no whole number of vec4"
            constants[src] = np.stack(arrs)  # branch after branch
            params[stride_param(name)] = arrs[0].nbytes
        else:
            if len(set(srcs)) == 1:
                continue
            params[stride_param(name)] = -(-nbytes(srcs[0]) // alignment) * alignment
        branched.append(name)
    if not branched:
        return None, "nothing differs (the same launch twice)"
    chains.nxt, chains.prv = trial.nxt, trial.prv
    options = {**first.options, "branches": k, "branched": tuple(branched)}
    merged = GpuOp(kernel=first.kernel, params=params, options=options,
                   inputs=list(dict.fromkeys(t for m in members for t in m.inputs)),
                   outputs=[t for m in members for t in m.outputs], constants=constants, node=first.node,
                   origin=tuple(sorted({o for m in members for o in m.origin})), accumulator=first.accumulator,
                   bindings=bindings, precision=first.precision, buffer_storage=dict(first.buffer_storage))
    return merged, ""


def branch_launches(op: GpuOp, groups: Sequence[Sequence[int]]) -> list[GpuOp]:
    """The launches a branched launch stands for (``op`` itself when it has one branch), each binding its own
    tensors (the chain members after the one bound, ``groups`` = ``GpuPlan.groups``) and constants: what the
    merged launch means, for reference executors and reports."""
    k = int(op.options.get("branches", 1))
    if k <= 1:
        return [op]
    branched = set(op.options["branched"])
    where = {t: (grp, n) for grp in groups for n, t in enumerate(grp)}
    options = {o: v for o, v in op.options.items() if o not in ("branches", "branched")}
    params = {p: v for p, v in op.params.items() if p not in {stride_param(b) for b in branched}}
    out = []
    for b in range(k):
        bindings: list[tuple[str, int | str]] = []
        constants = {}
        for name, src in op.bindings:
            if isinstance(src, str):
                constants[src] = op.constants[src][b] if name in branched else op.constants[src]
                bindings.append((name, src))
            elif name in branched:
                grp, n = where[src]
                bindings.append((name, grp[n + b]))
            else:
                bindings.append((name, src))
        ids = {src for _n, src in bindings if isinstance(src, int)}
        out.append(replace(op, options=dict(options), params=dict(params), bindings=bindings, constants=constants,
                           inputs=[t for t in op.inputs if t in ids], outputs=[t for t in op.outputs if t in ids]))
    return out
