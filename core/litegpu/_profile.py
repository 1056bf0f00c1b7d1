"""Measuring a prepared model: timings, memory, per-op profiles, delegate descriptions.

Shared by ``litegpu benchmark`` and backend auto-selection (:mod:`litegpu._autoselect`).
Timings are wall-clock (``time.perf_counter``) around ``Interpreter`` calls, the way
LiteRT's benchmark tool reports them: *init* (interpreter creation and
``allocate_tensors``: reading the plan, preparing kernels, compiling delegate
partitions), *first inference*, *warmup* and timed *inference* runs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "RunStats",
    "BenchResult",
    "run_stats",
    "benchmark_interpreter",
    "peak_rss_bytes",
    "current_rss_bytes",
    "delegate_descriptions",
    "device_memory_bytes",
    "memory_from_description",
    "transformations_from_description",
    "summarize_op_profile",
    "kernel_profiles",
    "summarize_kernel_profile",
    "random_inputs",
]


@dataclass(frozen=True)
class RunStats:
    """Summary of a list of durations, in microseconds."""

    count: int
    avg: float
    median: float
    std: float
    min: float
    max: float
    p90: float

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "avg": self.avg, "median": self.median, "std": self.std, "min": self.min,
                "max": self.max, "p90": self.p90}


def run_stats(us: Sequence[float]) -> RunStats | None:
    if not len(us):
        return None
    a = np.asarray(us, dtype=np.float64)
    return RunStats(int(a.size), float(a.mean()), float(np.median(a)), float(a.std()), float(a.min()),
                    float(a.max()), float(np.percentile(a, 90)))


def peak_rss_bytes() -> int | None:
    """Peak resident set size of this process so far (never decreases)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux reports KiB


def current_rss_bytes() -> int | None:
    """Current resident set size (psutil when installed, else /proc)."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        pass
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def random_inputs(details: Sequence[Mapping[str, Any]], rng: np.random.Generator, *,
                  gaussian: bool = True) -> list[np.ndarray]:
    """Seeded random values for inputs described by ``details`` (name, shape, dtype).

    Floats: standard normal (``gaussian``) or uniform in [0, 1); 8/16-bit integers: the
    whole range; wider integers: [0, 10) (often indices or sizes); bool: fair coin.
    Raises ``ValueError`` for types without random values (strings...).
    """
    arrays = []
    for d in details:
        shape = tuple(int(s) for s in d["shape"])
        dt = np.dtype(d["dtype"])
        if dt.kind == "f":
            a = rng.standard_normal(shape) if gaussian else rng.random(shape)
            arrays.append(a.astype(dt))
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            if dt.itemsize <= 2:
                arrays.append(rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt))
            else:
                arrays.append(rng.integers(0, 10, size=shape, dtype=dt))
        elif dt.kind == "b":
            arrays.append(rng.random(shape) < 0.5)
        elif dt.kind == "c":
            arrays.append((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt))
        else:
            raise ValueError(f"input {d['name']!r} has type {dt}, for which random values cannot be made")
    return arrays


# --------------------------------------------------------------------------- delegate descriptions

# Keys a DelegateKernel.describe() may use for the device memory it planned, most specific first.
_TOTAL_KEYS = ("device_memory_bytes", "gpu_memory_bytes", "planned_memory_bytes", "memory_bytes", "total_bytes")
_PART_KEYS = ("arena_bytes", "weights_bytes", "constant_bytes", "constants_bytes", "parameter_bytes")


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    return None


def memory_from_description(desc: Mapping[str, Any]) -> int | None:
    """Device bytes a kernel's ``describe()`` reports: a total key, else the sum of its parts
    (arena + weights...), also looked for in a nested ``memory`` mapping."""
    for scope in (desc, desc.get("memory") if isinstance(desc.get("memory"), Mapping) else {}):
        for k in _TOTAL_KEYS:
            v = _int(scope.get(k))
            if v is not None:
                return v
    parts = {}
    for scope in (desc.get("memory") if isinstance(desc.get("memory"), Mapping) else {}, desc):
        for k in _PART_KEYS:
            v = _int(scope.get(k))
            if v is not None:
                parts[k] = v
    return sum(parts.values()) if parts else None


def transformations_from_description(desc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Transformations a kernel's ``describe()`` reports, as ``{"pass", "details"}`` records:
    from ``transformations`` (a list of strings, or a mapping) or a GPU compiler's ``passes``
    (``{pass name: [what it did, ...]}``)."""
    out: list[dict[str, Any]] = []
    for key in ("transformations", "passes"):
        v = desc.get(key)
        if isinstance(v, Mapping):
            for name, what in v.items():
                details = [str(w) for w in what] if isinstance(what, (list, tuple)) else ([str(what)] if what else [])
                out.append({"pass": str(name), "details": details})
        elif isinstance(v, (list, tuple)):
            out.extend({"pass": str(x), "details": []} for x in v)
        elif isinstance(v, str) and v:
            out.append({"pass": v, "details": []})
    return out


def delegate_descriptions(interp: Any) -> list[dict[str, Any]]:
    """``describe()`` of each delegate partition of the interpreter's main plan."""
    plan = interp._main.plan
    if plan is None:
        return []
    seg_of = {n: seg.backend for seg in plan.segments for n in seg.node_indices}
    rows = []
    for st in plan.steps:
        if st.kind != "delegate" or st.kernel is None:
            continue
        try:
            desc = dict(st.kernel.describe() or {})
        except Exception as e:  # describe() is informational: never fail a command on it
            desc = {"error": f"describe() raised {type(e).__name__}: {e}"}
        rows.append({"label": st.label, "backend": seg_of.get(st.node_indices[0], "?"),
                     "node_indices": list(st.node_indices), "describe": desc,
                     "memory_bytes": memory_from_description(desc),
                     "transformations": transformations_from_description(desc)})
    return rows


def device_memory_bytes(interp: Any) -> int | None:
    """Sum of the device memory the delegate partitions report (None when none reports any)."""
    vals = [r["memory_bytes"] for r in delegate_descriptions(interp) if r["memory_bytes"] is not None]
    return sum(vals) if vals else None


# --------------------------------------------------------------------------- benchmarking


@dataclass
class BenchResult:
    """One backend's measurements (durations in microseconds, memory in bytes)."""

    backend: str
    options: dict[str, Any]
    init_us: float
    first_us: float
    warmup_us: list[float] = field(default_factory=list)
    runs_us: list[float] = field(default_factory=list)
    peak_rss_bytes: int | None = None
    rss_bytes: int | None = None
    device_memory_bytes: int | None = None
    op_profile: list[dict[str, Any]] = field(default_factory=list)
    execution_plan: list[dict[str, Any]] = field(default_factory=list)
    stopped_by_max_secs: bool = False
    kernel_profile: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        inf = run_stats(self.runs_us)
        warm = run_stats(self.warmup_us)
        return {
            "backend": self.backend,
            "options": self.options,
            "init_us": self.init_us,
            "first_inference_us": self.first_us,
            "warmup_runs": len(self.warmup_us),
            "warmup_avg_us": warm.avg if warm else None,
            "inference_us": inf.as_dict() if inf else None,
            "peak_rss_bytes": self.peak_rss_bytes,
            "rss_bytes": self.rss_bytes,
            "device_memory_bytes": self.device_memory_bytes,
            "stopped_by_max_secs": self.stopped_by_max_secs,
            "execution_plan": self.execution_plan,
            "op_profile": self.op_profile,
            "kernel_profile": self.kernel_profile,
        }


def benchmark_interpreter(
    make: Callable[[], Any],
    inputs: Sequence[np.ndarray],
    *,
    backend: str = "cpu",
    options: Mapping[str, Any] | None = None,
    num_runs: int = 50,
    warmup_runs: int = 1,
    max_secs: float | None = None,
    min_runs: int = 1,
    op_profiling: bool = False,
    kernel_profile_runs: int = 0,
    tick: Callable[[], None] | None = None,
) -> BenchResult:
    """Create an interpreter with ``make()`` (timed as *init*), then run it: one first
    inference, ``warmup_runs`` warmups, and up to ``num_runs`` timed runs (at least
    ``min_runs``; stopping once the timed runs have taken ``max_secs``).
    ``tick()`` is called after every run (progress bars).  ``kernel_profile_runs`` > 0: after the
    timed runs, the delegate partitions' per-kernel accounting (:func:`kernel_profiles`, that many
    passes per launch)."""
    perf = time.perf_counter
    t = perf()
    interp = make()
    init = perf() - t
    details = interp.get_input_details()
    for d, a in zip(details, inputs, strict=True):
        interp.set_tensor(d["index"], a)
    t = perf()
    interp.invoke()
    first = perf() - t
    if tick:
        tick()
    warm = []
    for _ in range(max(0, warmup_runs)):
        t = perf()
        interp.invoke()
        warm.append(perf() - t)
        if tick:
            tick()
    if op_profiling:
        interp._profile = True
        interp._profile_reset()
    runs = []
    stopped = False
    start = perf()
    try:
        for k in range(max(num_runs, min_runs)):
            if k >= min_runs and max_secs is not None and perf() - start >= max_secs:
                stopped = True
                break
            t = perf()
            interp.invoke()
            runs.append(perf() - t)
            if tick:
                tick()
    finally:
        if op_profiling:
            interp._profile = False
    profile = interp._profile_records() if op_profiling else []
    kernels = kernel_profiles(interp, kernel_profile_runs) if kernel_profile_runs > 0 else None
    for r in profile:
        r["avg_us"] = r["total_s"] / r["runs"] * 1e6 if r["runs"] else 0.0
    return BenchResult(
        backend=backend,
        options=dict(options or {}),
        init_us=init * 1e6,
        first_us=first * 1e6,
        warmup_us=[w * 1e6 for w in warm],
        runs_us=[r * 1e6 for r in runs],
        peak_rss_bytes=peak_rss_bytes(),
        rss_bytes=current_rss_bytes(),
        device_memory_bytes=device_memory_bytes(interp),
        op_profile=profile,
        execution_plan=interp.get_execution_plan(),
        stopped_by_max_secs=stopped,
        kernel_profile=kernels,
    )


def kernel_profiles(interp: Any, runs: int = 10) -> list[dict[str, Any]]:
    """Per-kernel accounting of each delegate partition whose kernel can give it (the GPU backends:
    ``profile_kernels``), after at least one invoke: the partition's ``label``, ``backend``, ``device``,
    ``api``, what was timed (``source``) and one row per launch (``kernel``, ``variant``, ``grid``,
    ``workgroup``, ``us``, ``nodes``: the graph nodes it covers, ``ops``: their op names).  Partitions
    whose kernel has no accounting come back with ``source`` saying so and no rows."""
    plan = interp._main.plan
    if plan is None:
        return []
    seg_of = {n: seg.backend for seg in plan.segments for n in seg.node_indices}
    ops = plan.subgraph.operators
    out = []
    for st in plan.steps:
        if st.kind != "delegate" or st.kernel is None:
            continue
        backend = seg_of.get(st.node_indices[0], "?") if st.node_indices else "?"
        fn = getattr(st.kernel, "profile_kernels", None)
        if fn is None:
            out.append({"label": st.label, "backend": backend, "source": "this delegate gives no per-kernel "
                        "accounting", "launches": []})
            continue
        rec = dict(fn(runs))
        for row in rec["launches"]:
            row["ops"] = [ops[n].name for n in row["nodes"] if 0 <= n < len(ops)]
        out.append({"label": st.label, "backend": backend, **rec})
    return out


def summarize_kernel_profile(partition: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One partition's launches per kernel template: launches, total us, share of the partition's total."""
    rows: dict[str, dict[str, Any]] = {}
    for ln in partition["launches"]:
        a = rows.setdefault(ln["kernel"], {"kernel": ln["kernel"], "launches": 0, "us": 0.0, "nodes": 0})
        a["launches"] += 1
        a["us"] += ln["us"]
        a["nodes"] += len(ln["nodes"])
    total = sum(a["us"] for a in rows.values()) or 1.0
    for a in rows.values():
        a["percent"] = 100.0 * a["us"] / total
    return sorted(rows.values(), key=lambda a: -a["us"])


def summarize_op_profile(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per op type (CPU nodes) or per backend partition (delegates): count, avg us, share of the total."""
    total = sum(r.get("avg_us", 0.0) for r in records) or 1.0
    agg: dict[str, dict[str, Any]] = {}
    for r in records:
        key = r["op_names"][0] if r["kind"] == "cpu" and r["op_names"] else f"[{r['backend']} partition]"
        a = agg.setdefault(key, {"op": key, "backend": r["backend"], "count": 0, "avg_us": 0.0})
        a["count"] += 1
        a["avg_us"] += r.get("avg_us", 0.0)
    rows = sorted(agg.values(), key=lambda a: -a["avg_us"])
    for a in rows:
        a["percent"] = 100.0 * a["avg_us"] / total
    return rows
