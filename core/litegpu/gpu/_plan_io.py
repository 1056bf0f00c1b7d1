"""A compiled :class:`GpuPlan` to and from cache sections (``dict[str, bytes]``).

The structure goes into one JSON section (``plan``); each re-laid-out
constant into a raw section of its own (``const/<op>/<name>``) whose dtype and
shape the JSON records.  No pickle: a cache file can never run code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._errors import CacheError
from ._graph import GpuOp, GpuPlan, PlanTensor

__all__ = ["plan_to_sections", "plan_from_sections", "PLAN_FORMAT", "CONST_PREFIX"]

PLAN_FORMAT = 2  # 2: GpuOp.precision and buffer_storage (mixed precision)
#: the names of the constants' sections start with this (the rest of an entry is small: JSON, sources, binaries)
CONST_PREFIX = "const/"


def _plain(v: Any) -> Any:
    """JSON-safe copy of params/options/report values (numpy scalars, tuples)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def plan_to_sections(plan: GpuPlan) -> dict[str, bytes]:
    sections: dict[str, bytes] = {}
    ops = []
    for i, op in enumerate(plan.ops):
        consts = {}
        for name, arr in op.constants.items():
            a = np.ascontiguousarray(arr)
            key = f"{CONST_PREFIX}{i}/{name}"
            sections[key] = a.tobytes()
            consts[name] = {"section": key, "dtype": a.dtype.str, "shape": list(a.shape)}
        ops.append({
            "kernel": op.kernel, "params": _plain(op.params), "inputs": list(op.inputs),
            "outputs": list(op.outputs), "constants": consts, "node": op.node, "origin": list(op.origin),
            "accumulator": op.accumulator, "options": _plain(op.options),
            "bindings": [[n, s] for n, s in op.bindings], "precision": op.precision,
            "buffer_storage": dict(op.buffer_storage),
        })
    tensors = [{
        "id": t.id, "name": t.name, "kind": t.kind, "shape": list(t.shape), "ir_shape": list(t.ir_shape),
        "dtype": t.dtype, "storage": t.storage, "layout": t.layout, "nbytes": t.nbytes, "offset": t.offset,
        "host_output": t.host_output, "quant": None if t.quant is None else [float(t.quant[0]), int(t.quant[1])],
    } for t in plan.tensors.values()]
    doc = {
        "format": PLAN_FORMAT, "ops": ops, "tensors": tensors, "inputs": list(plan.inputs),
        "outputs": list(plan.outputs), "precision": plan.precision, "arena_bytes": plan.arena_bytes,
        "alignment": plan.alignment, "memory": _plain(plan.memory), "report": _plain(plan.report),
        "warnings": list(plan.warnings), "aliases": [[k, v] for k, v in plan.aliases.items()],
        "groups": [list(grp) for grp in plan.groups],
    }
    sections["plan"] = json.dumps(doc, separators=(",", ":")).encode()
    return sections


def _tuplify(v: Any) -> Any:
    # Kernel options are hashed by the renderer: lists must come back as tuples.
    if isinstance(v, list):
        return tuple(_tuplify(x) for x in v)
    return v


def plan_from_sections(sections: Mapping[str, bytes | memoryview]) -> GpuPlan:
    """Rebuild a plan; raises :class:`CacheError` when the sections do not describe one.  The
    constants are read-only arrays over their sections (no copy: a memoryview section stays one)."""
    try:
        doc = json.loads(bytes(sections["plan"]))
        if doc.get("format") != PLAN_FORMAT:
            raise CacheError(f"plan format {doc.get('format')} (expected {PLAN_FORMAT})")
        ops = []
        for o in doc["ops"]:
            consts = {}
            for name, c in o["constants"].items():
                raw = sections[c["section"]]
                consts[name] = np.frombuffer(raw, dtype=np.dtype(c["dtype"])).reshape(c["shape"])
            ops.append(GpuOp(
                kernel=o["kernel"], params=dict(o["params"]), inputs=list(o["inputs"]),
                outputs=list(o["outputs"]), constants=consts, node=o["node"], origin=tuple(o["origin"]),
                accumulator=o["accumulator"], options={k: _tuplify(v) for k, v in o["options"].items()},
                bindings=[(n, s) for n, s in o["bindings"]], precision=o["precision"],
                buffer_storage=dict(o["buffer_storage"]),
            ))
        tensors = {t["id"]: PlanTensor(
            id=t["id"], name=t["name"], kind=t["kind"], shape=tuple(t["shape"]), ir_shape=tuple(t["ir_shape"]),
            dtype=t["dtype"], storage=t["storage"], layout=t["layout"], nbytes=t["nbytes"], offset=t["offset"],
            host_output=t["host_output"], quant=None if t.get("quant") is None else (float(t["quant"][0]),
                                                                                     int(t["quant"][1])))
            for t in doc["tensors"]}
        return GpuPlan(ops=ops, tensors=tensors, inputs=list(doc["inputs"]), outputs=list(doc["outputs"]),
                       precision=doc["precision"], arena_bytes=doc["arena_bytes"], alignment=doc["alignment"],
                       memory=doc["memory"], report=doc["report"], warnings=list(doc["warnings"]),
                       aliases={int(k): int(v) for k, v in doc.get("aliases", [])},
                       groups=[tuple(int(t) for t in grp) for grp in doc.get("groups", [])])
    except CacheError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise CacheError(f"cached GPU plan is unreadable: {e!r}") from e
