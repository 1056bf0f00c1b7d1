"""The warm plan record: what planning a subgraph decided, kept beside the delegates' cached plans.

A warm start (the serialization cache filled by an earlier run) used to redo, before any cached plan was
read, everything that decides *which* nodes a delegate takes: the CPU kernels' prepare of every node
(which resolves shapes), the constant folding (pose_landmark_full dequantizes 192 float16 weight tensors),
every delegate's ``supports()`` and the partitioner.  For the nodes a delegate then runs, the CPU side
of that work is thrown away.  The record keeps its outcome: every tensor's resolved shape, the folded
nodes, the groups (backend, nodes) in execution order, each delegated group's boundary tensors, and
the partitioner's WARNING (said again on every start that uses the record: a CPU fallback is never silent).

With a record, :func:`litegpu._plan.build_plan` prepares on the CPU only the nodes the CPU runs (and the
constant folds they read), asks each delegate for its partition from its cache only
(``prepare`` inside ``cached_only()``), and prepares the delegated nodes' CPU kernels only if a device fault needs the
CPU fallback.

Keyed, like the delegates' own entries, by everything that can change a decision: the model's bytes
(token), the subgraph and its input shapes, the partition options, every delegate's identity (its
``plan_identity``: backend, options, code fingerprint; litegpu's code is in it; not the device, which
would wait for the driver's start: the delegates' own entries are keyed by device and driver, so a
record made on another device finds none and is replaced).  A
record is written only for a plan with no state (no variables, no reset hooks, no seeded DEQUANTIZE)
and only when every delegate offers ``plan_identity`` and ``cached_only`` (litegpu's GPU delegates);
other delegates plan as before.  A record that no longer fits (a delegate's cached plan missing, a shape
that differs) is dropped with a WARNING and the subgraph is planned again, which rewrites it; an
unreadable one is a cache miss with the cache's warning.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["ENABLED", "PlanRecord", "RecordSlot", "StaleRecord", "slot_for"]

log = logging.getLogger("litegpu")

#: A/B switch (``bench/init.py --set litegpu._plan_record.ENABLED=False``): False plans every start in full
ENABLED = True

#: bump when the record's meaning changes
RECORD_VERSION = "1"
_SECTION = "record"
_BACKEND = "plan-record"


class StaleRecord(Exception):
    """A record that does not fit this start (internal: the plan is built again in full).  ``warn``:
    whether that is worth a WARNING (not where a delegate failed: planning in full reports that)."""

    def __init__(self, why: str, warn: bool = True):
        super().__init__(why)
        self.why, self.warn = why, warn


# Plain classes, not dataclasses: a (frozen) dataclass costs 1-5 ms of code generation at import, paid
# by every warm start (see docs/performance.md, fifth session).


class PartitionRecord(NamedTuple):
    """One delegated group's boundary, as :func:`litegpu._plan.partition_io` found it."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    host: frozenset[int]
    runnable: bool  # every node has a CPU kernel (the fallback can run it)


class PlanRecord:
    """What planning one subgraph decided (see the module docstring)."""

    __slots__ = ("shapes", "folded", "skip", "groups", "partitions", "summary", "warning")

    def __init__(self, shapes: tuple[tuple[int, ...] | None, ...], folded: tuple[int, ...], skip: frozenset[int],
                 groups: tuple[tuple[str, tuple[int, ...]], ...], partitions: tuple[PartitionRecord, ...],
                 summary: str, warning: str):
        self.shapes = shapes  # per tensor of the subgraph
        self.folded = folded  # in evaluation order
        self.skip = skip  # nodes whose CPU prepare a warm start leaves out
        self.groups = groups
        self.partitions = partitions  # one per delegated group, in order
        self.summary, self.warning = summary, warning

    def to_json(self) -> bytes:
        return json.dumps({
            "version": RECORD_VERSION,
            "shapes": [None if s is None else list(s) for s in self.shapes],
            "folded": list(self.folded), "skip": sorted(self.skip),
            "groups": [[b, list(ns)] for b, ns in self.groups],
            "partitions": [{"inputs": list(p.inputs), "outputs": list(p.outputs), "host": sorted(p.host),
                            "runnable": p.runnable} for p in self.partitions],
            "summary": self.summary, "warning": self.warning,
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> PlanRecord:
        """Raises ValueError/TypeError/KeyError on a record this code cannot read."""
        d = json.loads(data)
        if d.get("version") != RECORD_VERSION:
            raise ValueError(f"record version {d.get('version')!r}, expected {RECORD_VERSION}")

        def ints(v: Any) -> tuple[int, ...]:
            if not isinstance(v, list) or not all(isinstance(x, int) for x in v):
                raise TypeError("expected a list of integers")
            return tuple(v)

        shapes = tuple(None if s is None else ints(s) for s in d["shapes"])
        groups = tuple((str(b), ints(ns)) for b, ns in d["groups"])
        parts = tuple(PartitionRecord(ints(p["inputs"]), ints(p["outputs"]), frozenset(ints(p["host"])),
                                      bool(p["runnable"])) for p in d["partitions"])
        return cls(shapes, ints(d["folded"]), frozenset(ints(d["skip"])), groups, parts,
                   str(d["summary"]), str(d["warning"]))


class RecordSlot:
    """Where the record of one (model, subgraph, input shapes, options, delegates) lives."""

    def __init__(self, cache: Any, key: Any):
        self.cache, self.key = cache, key

    def load(self) -> PlanRecord | None:
        got = self.cache.load(self.key)
        if got is None or _SECTION not in got:
            return None
        try:
            return PlanRecord.from_json(bytes(got[_SECTION]))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            log.warning("litegpu cache: ignoring an unreadable plan record (%s: %s); planning the model "
                        "in full and writing it again", type(e).__name__, e)
            return None

    def store(self, record: PlanRecord) -> None:
        self.cache.store(self.key, {_SECTION: record.to_json()})


def slot_for(runtime: Any, subgraph_index: int, input_shapes: Sequence[tuple[int, ...] | None] | None,
             delegates: Sequence[Any]) -> RecordSlot | None:
    """The record slot of this plan, or None where records do not apply (switched off, a delegate
    without ``plan_identity``/``cached_only`` or without a cache, tensors preserved for debugging,
    a custom kernel registry)."""
    from .cpu._registry import CPU_KERNELS

    if not ENABLED or not delegates or runtime.preserve_all_tensors or runtime.registry is not CPU_KERNELS:
        return None
    identities: list[dict[str, Any]] = []
    cache = None
    for d in delegates:
        if getattr(d, "passthrough", False):
            identities.append({"name": getattr(d, "name", ""), "passthrough": True})
            continue
        ident = getattr(d, "plan_identity", None)
        if not callable(ident) or not callable(getattr(d, "cached_only", None)):
            return None
        try:
            got = ident(runtime.model)
        except Exception:  # noqa: BLE001 - a delegate that cannot say (its device failed): plan in full
            return None
        if got is None:
            return None
        cache = cache if cache is not None else got[0]
        identities.append(got[1])
    first = next((i for i in identities if not i.get("passthrough")), None)
    if cache is None or first is None:
        return None
    from .cache import EntryKey

    shapes = None if input_shapes is None else [None if s is None else [int(x) for x in s] for s in input_shapes]
    key = EntryKey(
        first["model"], _BACKEND, RECORD_VERSION, "-", "-",  # the device: see GpuDelegate.plan_identity
        options={"delegates": identities, "subgraph": int(subgraph_index), "input_shapes": shapes,
                 "partition": dataclasses.asdict(runtime.partition_options),
                 "fold_constants": bool(runtime.fold_constants), "fuse_kernels": bool(runtime.fuse_kernels)},
        code=str(first["code"]),
        model_name=_model_name(runtime.model))
    return RecordSlot(cache, key)


def _model_name(model: Any) -> str:
    import os

    source = getattr(model, "source", None)
    return os.path.basename(source) if isinstance(source, str) and source else "model"
