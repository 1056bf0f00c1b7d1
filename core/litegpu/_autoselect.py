"""Benchmark-driven backend selection: what ``backend: auto`` means.

For one model, every available backend (``cpu`` included) is tried at every
precision the configuration allows (``autoselect.precisions``):

1. *prepare*: the interpreter is created with the backend's delegate (timed: init);
2. *check*: outputs on seeded random inputs are compared with the single-thread
   CPU reference; a candidate whose largest error, relative to the reference
   output's range, is above ``autoselect.tolerance`` is rejected with the reason;
3. *time*: warm inferences run for the candidate's share of ``time_budget_s``
   (at least three), the median is its latency; one inference is run under
   ``tracemalloc`` for its host memory, and the delegate partitions' ``describe()``
   give its device memory.

The policy (``latency``, ``init_time`` or ``memory``) picks the winner among the
accepted candidates.  The decision and all measurements are stored as JSON in
``<cache dir>/autoselect/``, keyed by the model's SHA-256 and by everything the
measurements depend on (litegpu/numpy/Python versions, the available backends
with their versions, devices and drivers, and the autoselect settings), so the
next load of the same model on the same machine reuses it without measuring.

Decisions are entries of the serialization cache (:mod:`litegpu.cache`, backend
name ``autoselect``), in the same folder as the compiled delegate payloads
(``cache.dir``), with its rules: private folder and files (0700/0600), owner and
mode checks, no symbolic links, checksums, atomic writes through unpredictable
temporary names, the size cap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ._errors import ConfigError, LiteGPUError

__all__ = [
    "POLICIES",
    "AutoselectSettings",
    "Candidate",
    "Decision",
    "autoselect",
    "cached_decision",
    "decision_dir",
    "list_decisions",
    "clear_decisions",
]

logger = logging.getLogger("litegpu")

POLICIES = ("latency", "init_time", "memory")
_FORMAT = 1  # version of the decision file layout
_MIN_RUNS = 3
_TARGET_RUNS = 30  # enough for a stable median; fewer when the budget share runs out


@dataclass(frozen=True)
class AutoselectSettings:
    """The ``autoselect`` section of the configuration."""

    policy: str = "latency"
    time_budget_s: float = 10.0
    tolerance: float = 0.01
    precisions: tuple[str, ...] = ("fp32", "fp16_fp32acc", "fp16")

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"autoselect.policy: {self.policy!r} is not one of {', '.join(POLICIES)}",
                              path="autoselect.policy")
        if not self.time_budget_s >= 0:
            raise ConfigError("autoselect.time_budget_s must be >= 0", path="autoselect.time_budget_s")
        if not self.tolerance >= 0:
            raise ConfigError("autoselect.tolerance must be >= 0", path="autoselect.tolerance")

    @classmethod
    def from_config(cls, config: Any = None, **overrides: Any) -> AutoselectSettings:
        data: dict[str, Any] = {}
        section = _config_section(config, "autoselect")
        for f in dataclasses.fields(cls):
            if f.name in section and section[f.name] is not None:
                data[f.name] = section[f.name]
        data.update({k: v for k, v in overrides.items() if v is not None})
        if "precisions" in data:
            data["precisions"] = tuple(data["precisions"])
        for k in ("time_budget_s", "tolerance"):  # YAML may give ints; keys must not depend on it
            if k in data:
                data[k] = float(data[k])
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "time_budget_s": self.time_budget_s, "tolerance": self.tolerance,
                "precisions": list(self.precisions)}


@dataclass
class Candidate:
    """One (backend, precision) tried by :func:`autoselect`."""

    backend: str
    precision: str | None
    options: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"  # ok | rejected | failed | skipped | unavailable
    reason: str = ""
    init_us: float | None = None
    first_us: float | None = None
    latency_us: float | None = None  # median of the warm runs
    latency_std_us: float | None = None
    latency_runs: int = 0
    max_error: float | None = None  # relative to the reference output's range
    host_memory_bytes: int | None = None
    device_memory_bytes: int | None = None
    delegated_nodes: int = 0
    effective_precision: str | None = None  # what the partitions report running at, when it differs

    @property
    def label(self) -> str:
        return self.backend if self.precision is None else f"{self.backend}/{self.precision}"

    @property
    def memory_bytes(self) -> int | None:
        if self.host_memory_bytes is None and self.device_memory_bytes is None:
            return None
        return (self.host_memory_bytes or 0) + (self.device_memory_bytes or 0)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["label"] = self.label
        d["memory_bytes"] = self.memory_bytes
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Candidate:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class Decision:
    """What :func:`autoselect` chose, why, and the measurements behind it."""

    backend: str
    precision: str | None
    options: dict[str, Any]
    policy: str
    reason: str
    fingerprint: str
    key: str
    measured_at: str
    measure_s: float
    settings: dict[str, Any]
    environment: dict[str, Any]
    candidates: list[Candidate]
    cached: bool = False  # this process read it from the cache (not stored)
    path: str | None = None  # the decision file (not stored)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": _FORMAT, "backend": self.backend, "precision": self.precision, "options": self.options,
            "policy": self.policy, "reason": self.reason, "fingerprint": self.fingerprint, "key": self.key,
            "measured_at": self.measured_at, "measure_s": self.measure_s, "settings": self.settings,
            "environment": self.environment, "candidates": [c.as_dict() for c in self.candidates],
            "cached": self.cached, "path": self.path,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        if d.get("format") != _FORMAT:
            raise ValueError(f"decision file format {d.get('format')!r}, expected {_FORMAT}")
        return cls(
            backend=str(d["backend"]), precision=d.get("precision"), options=dict(d.get("options") or {}),
            policy=str(d["policy"]), reason=str(d.get("reason", "")), fingerprint=str(d["fingerprint"]),
            key=str(d["key"]), measured_at=str(d["measured_at"]), measure_s=float(d.get("measure_s", 0.0)),
            settings=dict(d.get("settings") or {}), environment=dict(d.get("environment") or {}),
            candidates=[Candidate.from_dict(c) for c in d.get("candidates", [])],
        )

    def delegate_options(self) -> dict[str, Any]:
        """Options to pass to ``load_delegate(self.backend, ...)``."""
        opts = dict(self.options)
        if self.precision is not None:
            opts["precision"] = self.precision
        return opts


# --------------------------------------------------------------------------- configuration helpers


def _config_section(config: Any, name: str) -> dict[str, Any]:
    if config is None:
        return {}
    data = getattr(config, "data", config)
    if isinstance(data, Mapping):
        sec = data.get(name)
        return dict(sec) if isinstance(sec, Mapping) else {}
    return {}


def _load_config(config: Any) -> Any:
    """A layered litegpu Config where the configuration system exists; else ``config`` itself."""
    import litegpu

    fn = getattr(litegpu, "load_config", None)
    if fn is None or (config is not None and hasattr(config, "backend_options")):
        return config
    return fn(config) if config is not None else fn()


def decision_dir(config: Any = None, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding the decisions: the serialization cache's (``cache_dir``, else the
    configuration's ``cache.dir``, else the user cache directory)."""
    return _decision_store(config, cache_dir).dir


def _decision_store(config: Any = None, cache_dir: str | os.PathLike[str] | None = None) -> Any:
    from .cache import DEFAULT_MAX_BYTES, DelegateCache

    conf = _config_section(config, "cache")
    if cache_dir is None:
        cache_dir = conf.get("dir")
    return DelegateCache(cache_dir, max_bytes=conf.get("max_bytes", DEFAULT_MAX_BYTES))


def _cache_enabled(config: Any) -> bool:
    return bool(_config_section(config, "cache").get("enabled", True))


# --------------------------------------------------------------------------- environment / key


def _backend_rows() -> list[dict[str, Any]]:
    import litegpu

    fn = getattr(litegpu, "available_backends", None)
    if fn is None:
        return [{"name": "cpu", "version": getattr(litegpu, "__version__", "0"), "available": True, "reason": "",
                 "devices": [], "is_gpu": False}]
    rows = []
    for b in fn():
        d = b.as_dict() if hasattr(b, "as_dict") else dict(vars(b))
        rows.append(d)
    if not any(r["name"] == "cpu" for r in rows):
        rows.insert(0, {"name": "cpu", "version": getattr(litegpu, "__version__", "0"), "available": True,
                        "reason": "", "devices": [], "is_gpu": False})
    return rows


def _driver(name: str) -> str | None:
    """A backend's driver description, when its BackendSpec offers one (``driver`` or ``driver_version``)."""
    try:
        from ._plugins import backend_registry
    except ImportError:
        return None
    entry = backend_registry().get(name)
    if entry is None:
        return None
    for attr in ("driver", "driver_version"):
        v = getattr(entry.spec, attr, None)
        try:
            v = v() if callable(v) else v
        except Exception:  # informational only
            v = None
        if v:
            return str(v)
    return None


def _environment(rows: Sequence[Mapping[str, Any]], settings: AutoselectSettings,
                 only: Sequence[str] | None) -> dict[str, Any]:
    import litegpu

    return {
        "litegpu": getattr(litegpu, "__version__", "0"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "system": platform.system(),
        "backends": [{"name": r["name"], "version": str(r.get("version", "")),
                      "devices": [str(d) for d in r.get("devices") or ()], "driver": _driver(r["name"])}
                     for r in rows if r.get("available")],
        # What the choice depends on; the time budget only bounds how long measuring may take.
        "settings": {k: v for k, v in settings.as_dict().items() if k != "time_budget_s"},
        "only_backends": sorted(only) if only else None,
    }


def _key(environment: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(environment, sort_keys=True).encode()).hexdigest()[:16]


_RECORD = "autoselect"  # the cache "backend" name of decision entries


def _decision_key(fingerprint: str, key: str) -> Any:
    from .cache import EntryKey

    return EntryKey(model_token=f"sha256:{fingerprint}", backend=_RECORD, backend_version=str(_FORMAT),
                    device="", driver_version="", options={"key": key})


# --------------------------------------------------------------------------- model helpers


def _model_bytes(model: Any) -> tuple[bytes, str]:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), "<bytes>"
    if isinstance(model, (str, os.PathLike)):
        p = Path(model)
        try:
            return p.read_bytes(), p.name
        except FileNotFoundError:
            raise LiteGPUError(f"model file not found: {os.fspath(model)}") from None
    data = getattr(model, "data", None)  # the CLI's LoadedModel
    if isinstance(data, bytes):
        return data, getattr(model, "name", "<model>")
    raise TypeError(f"model must be a .tflite path or bytes, got {type(model).__name__}")


def _rel_error(ref: np.ndarray, got: np.ndarray) -> float:
    """Largest |ref - got| over the range of ``ref`` (the range is 1 when ``ref`` is constant)."""
    r = np.asarray(ref, dtype=np.float64)
    g = np.asarray(got, dtype=np.float64)
    if r.shape != g.shape:
        return float("inf")
    if not r.size:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(r - g)
    same = (r == g) | (np.isnan(r) & np.isnan(g))
    d[same] = 0.0
    if np.isnan(d).any():
        return float("inf")
    finite = r[np.isfinite(r)]
    span = float(finite.max() - finite.min()) if finite.size else 0.0
    return float(d.max()) / (span if span > 0 else 1.0)


# --------------------------------------------------------------------------- the selection


def cached_decision(model: Any, *, config: Any = None, cache_dir: str | os.PathLike[str] | None = None,
                    backends: Sequence[str] | None = None, **overrides: Any) -> Decision | None:
    """The stored decision for ``model`` on this machine with these settings, or None.  Never measures."""
    config = _load_config(config)
    settings = AutoselectSettings.from_config(config, **overrides)
    data, _ = _model_bytes(model)
    fingerprint = hashlib.sha256(data).hexdigest()
    env = _environment(_backend_rows(), settings, backends)
    return _read_decision(_decision_store(config, cache_dir), fingerprint, _key(env))


def _decode_decision(sections: Mapping[str, bytes], fingerprint: str | None, where: Path) -> Decision | None:
    try:
        dec = Decision.from_dict(json.loads(sections["decision"].decode("utf-8")))
        if fingerprint is not None and dec.fingerprint != fingerprint:
            raise ValueError("model fingerprint differs")
    except (ValueError, KeyError, TypeError) as e:
        logger.warning("autoselect: ignoring unusable decision %s (%s)", where, e)
        return None
    dec.cached = True
    dec.path = str(where)
    return dec


def _read_decision(store: Any, fingerprint: str, key: str) -> Decision | None:
    ekey = _decision_key(fingerprint, key)
    sections = store.load(ekey)
    return None if sections is None else _decode_decision(sections, fingerprint, store.path_for(ekey))


def _write_decision(store: Any, dec: Decision) -> None:
    body = dec.as_dict()
    body.pop("cached")
    body.pop("path")
    ekey = _decision_key(dec.fingerprint, dec.key)
    path = store.store(ekey, {"decision": json.dumps(body, indent=2, default=str).encode("utf-8")})
    if path is not None:  # else the cache logged why (unsafe folder, write error, cap)
        dec.path = str(path)


def _candidates(rows: Sequence[Mapping[str, Any]], settings: AutoselectSettings, config: Any,
                only: Sequence[str] | None) -> list[Candidate]:
    cands: list[Candidate] = []
    names = [r["name"] for r in rows]
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise ConfigError(f"autoselect: unknown backend(s) {', '.join(unknown)} "
                              f"(registered: {', '.join(names)})")
    for r in rows:
        name = r["name"]
        if only and name not in only:
            continue
        base = _backend_options(config, name)
        if name == "cpu":
            cands.append(Candidate("cpu", None, {}))
            continue
        if not r.get("available"):
            cands.append(Candidate(name, None, base, status="unavailable", reason=str(r.get("reason") or "")))
            continue
        for p in settings.precisions:
            cands.append(Candidate(name, p, base))
    if not any(c.backend == "cpu" for c in cands):  # the reference is always a candidate
        cands.insert(0, Candidate("cpu", None, {}))
    return cands


def _backend_options(config: Any, name: str) -> dict[str, Any]:
    if config is None or not hasattr(config, "backend_options"):
        return {}
    try:
        opts = dict(config.backend_options(name) or {})
    except LiteGPUError:
        return {}
    opts.pop("cache", None)
    opts.pop("precision", None)
    return opts


def _make(model: Any, cand: Candidate, config: Any) -> Any:
    import litegpu

    from ._interpreter import Interpreter

    delegates = []
    if cand.backend != "cpu":
        opts = dict(cand.options)
        if cand.precision is not None:
            opts["precision"] = cand.precision
        delegates.append(litegpu.load_delegate(cand.backend, opts))
    interp = Interpreter(model_content=model, experimental_delegates=delegates)
    setter = getattr(interp, "set_partition_options", None)
    if config is not None and callable(setter) and hasattr(config, "partition_options"):
        setter(config.partition_options())
    interp.allocate_tensors()
    return interp


def _measure(model: Any, cand: Candidate, config: Any, inputs: list[list[np.ndarray]],
             reference: list[list[np.ndarray]], out_names: list[str], tolerance: float, share_s: float,
             target_runs: int = _TARGET_RUNS, done: Sequence[Candidate] = ()) -> None:
    from ._profile import delegate_descriptions, device_memory_bytes

    perf = time.perf_counter
    t = perf()
    try:
        interp = _make(model, cand, config)
    except (LiteGPUError, ValueError, RuntimeError) as e:
        cand.status, cand.reason = "failed", f"prepare failed: {e}"
        return
    cand.init_us = (perf() - t) * 1e6
    plan = interp.get_execution_plan()
    cand.delegated_nodes = sum(len(s["node_indices"]) for s in plan if s["backend"] not in ("cpu", "folded"))
    if cand.backend != "cpu" and cand.delegated_nodes == 0:
        cand.status, cand.reason = "skipped", "claims no node of this model (it would run as cpu)"
        return
    # A device without fp16 runs an fp16 request in fp32: the same thing as a candidate already
    # measured needs no second measurement (and must not win under a misleading label).
    precisions = {d["describe"].get("precision") for d in delegate_descriptions(interp)} - {None}
    if cand.precision is not None and len(precisions) == 1 and cand.precision not in precisions:
        cand.effective_precision = str(precisions.pop())
        twin = next((c for c in done if c.backend == cand.backend and c.status == "ok"
                     and (c.effective_precision or c.precision) == cand.effective_precision), None)
        if twin is not None:
            cand.status = "skipped"
            cand.reason = f"runs as {cand.effective_precision} on this device, like {twin.label}"
            return
    in_idx = [d["index"] for d in interp.get_input_details()]
    out_idx = [d["index"] for d in interp.get_output_details()]
    worst = 0.0
    try:
        for k, (xs, want) in enumerate(zip(inputs, reference, strict=True)):
            for i, a in zip(in_idx, xs, strict=True):
                interp.set_tensor(i, a)
            t = perf()
            interp.invoke()
            if k == 0:
                cand.first_us = (perf() - t) * 1e6
            for name, i, w in zip(out_names, out_idx, want, strict=True):
                e = _rel_error(w, interp.get_tensor(i))
                if e > worst:
                    worst = e
                if e > tolerance:
                    cand.max_error = e
                    cand.status = "rejected"
                    cand.reason = (f"output {name!r} differs from the CPU reference: max error {e:.3g} of the "
                                   f"output range > tolerance {tolerance:g}")
                    return
    except (LiteGPUError, ValueError, RuntimeError) as e:
        cand.status, cand.reason = "failed", f"inference failed: {e}"
        return
    cand.max_error = worst
    runs = []
    start = perf()
    tracing = tracemalloc.is_tracing()
    try:
        while len(runs) < _MIN_RUNS or (len(runs) < target_runs and perf() - start < share_s):
            t = perf()
            interp.invoke()
            runs.append((perf() - t) * 1e6)
        if not tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        interp.invoke()
        cand.host_memory_bytes = int(tracemalloc.get_traced_memory()[1] - base)
    except (LiteGPUError, ValueError, RuntimeError) as e:
        cand.status, cand.reason = "failed", f"inference failed while timing: {e}"
        return
    finally:
        if not tracing and tracemalloc.is_tracing():
            tracemalloc.stop()
    cand.latency_us = float(np.median(runs))
    cand.latency_std_us = float(np.std(runs))
    cand.latency_runs = len(runs)
    cand.device_memory_bytes = device_memory_bytes(interp)
    cand.status = "ok"


def _choose(cands: list[Candidate], policy: str) -> tuple[Candidate, str]:
    ok = [c for c in cands if c.status == "ok"]
    if not ok:  # cannot happen while cpu measures fine; be explicit anyway
        raise LiteGPUError("autoselect: no candidate ran: " + "; ".join(f"{c.label}: {c.reason}" for c in cands))
    inf = float("inf")

    def lat(c: Candidate) -> float:
        return c.latency_us if c.latency_us is not None else inf

    if policy == "latency":
        best = min(ok, key=lambda c: (lat(c), c.backend != "cpu"))
        metric, unit, val = "median warm latency", "us", lat
    elif policy == "init_time":
        best = min(ok, key=lambda c: (c.init_us if c.init_us is not None else inf, lat(c)))
        metric, unit, val = "init time", "us", (lambda c: c.init_us if c.init_us is not None else inf)
    else:
        best = min(ok, key=lambda c: (c.memory_bytes if c.memory_bytes is not None else inf, lat(c)))
        metric, unit, val = "memory (host peak of one inference + device)", "bytes", \
            (lambda c: float(c.memory_bytes) if c.memory_bytes is not None else inf)
    others = [c for c in ok if c is not best]
    fmt = (lambda v: f"{v:.0f} {unit}") if unit == "bytes" else (lambda v: f"{v:.1f} {unit}")
    reason = f"{best.label} has the lowest {metric} ({fmt(val(best))})"
    if others:
        reason += "; others: " + ", ".join(f"{c.label} {fmt(val(c))}" for c in others)
    rejected = [c for c in cands if c.status in ("rejected", "failed")]
    if rejected:
        reason += "; excluded: " + "; ".join(f"{c.label} ({c.status}: {c.reason})" for c in rejected)
    return best, reason


def autoselect(
    model: Any,
    *,
    config: Any = None,
    policy: str | None = None,
    time_budget_s: float | None = None,
    tolerance: float | None = None,
    precisions: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    force: bool = False,
    seed: int = 0,
    num_inputs: int = 2,
    progress: Callable[[str], None] | None = None,
) -> Decision:
    """Choose the backend and precision for ``model`` (path or bytes) on this machine.

    The stored decision is returned without measuring when one exists for the same model,
    environment and settings (``force=True`` measures anyway; ``use_cache=False`` neither
    reads nor writes the cache).  Arguments left None come from the configuration's
    ``autoselect`` section.  ``backends`` limits the candidates (``cpu`` is always one).
    ``progress(label)`` is called before each candidate.
    """
    from ._interpreter import Interpreter
    from ._profile import random_inputs
    from ._reader import read_model

    config = _load_config(config)
    settings = AutoselectSettings.from_config(config, policy=policy, time_budget_s=time_budget_s,
                                              tolerance=tolerance, precisions=precisions)
    data, label = _model_bytes(model)
    fingerprint = hashlib.sha256(data).hexdigest()
    rows = _backend_rows()
    env = _environment(rows, settings, backends)
    key = _key(env)
    caching = use_cache and _cache_enabled(config)
    store = _decision_store(config, cache_dir)
    if caching and not force:
        dec = _read_decision(store, fingerprint, key)
        if dec is not None:
            logger.info("autoselect: using the cached decision for %s: %s (measured %s; %s)",
                        label, dec.backend if dec.precision is None else f"{dec.backend}/{dec.precision}",
                        dec.measured_at, dec.path)
            return dec

    start = time.perf_counter()
    cands = _candidates(rows, settings, config, backends)
    todo = [c for c in cands if c.status == "pending"]
    if len(todo) == 1:
        # Nothing to compare: no measurement, nothing stored (there is no choice to remember).
        only = todo[0]
        only.status, only.reason = "ok", "the only candidate"
        others = "; ".join(f"{c.label}: {c.status} ({c.reason})" for c in cands if c is not only)
        reason = f"{only.label} is the only available candidate" + (f" ({others})" if others else "")
        logger.info("autoselect: %s for %s; nothing measured", reason, label)
        return Decision(
            backend=only.backend, precision=only.precision, options=dict(only.options), policy=settings.policy,
            reason=reason, fingerprint=fingerprint, key=key,
            measured_at=datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            measure_s=time.perf_counter() - start, settings=settings.as_dict(), environment=env, candidates=cands)
    ir = read_model(data)
    # The reference: single-thread CPU on seeded random inputs.
    ref = Interpreter(model_content=ir, num_threads=1)
    ref.allocate_tensors()
    details = ref.get_input_details()
    out_details = ref.get_output_details()
    rng = np.random.default_rng(seed)
    inputs = [random_inputs(details, rng) for _ in range(max(1, num_inputs))]
    reference = []
    for xs in inputs:
        for d, a in zip(details, xs, strict=True):
            ref.set_tensor(d["index"], a)
        ref.invoke()
        reference.append([ref.get_tensor(d["index"]) for d in out_details])
    out_names = [d["name"] for d in out_details]
    del ref

    budget = settings.time_budget_s
    for n, cand in enumerate(todo):
        elapsed = time.perf_counter() - start
        if n > 0 and elapsed >= budget:
            cand.status, cand.reason = "skipped", f"time budget of {budget:g} s used up"
            continue
        if progress is not None:
            progress(cand.label)
        share = max(0.0, budget - elapsed) / (len(todo) - n)
        # Each candidate gets at most its share of what is left (prepare and checks included).
        # A lone candidate is chosen whatever its numbers: time it only briefly.
        _measure(ir, cand, config, inputs, reference, out_names, settings.tolerance, share * 0.5,
                 target_runs=_TARGET_RUNS if len(todo) > 1 else _MIN_RUNS, done=todo[:n])
        if cand.status == "ok" and cand.effective_precision:
            cand.reason = f"runs as {cand.effective_precision} on this device"
        logger.debug("autoselect: %s: %s %s", cand.label, cand.status, cand.reason)

    best, reason = _choose(cands, settings.policy)
    measure_s = time.perf_counter() - start
    dec = Decision(
        backend=best.backend, precision=best.precision, options=dict(best.options), policy=settings.policy,
        reason=reason, fingerprint=fingerprint, key=key,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="microseconds"), measure_s=measure_s,
        settings=settings.as_dict(), environment=env, candidates=cands,
    )
    if caching:
        _write_decision(store, dec)
    logger.info("autoselect: measured %d candidates of %s in %.2f s: %s", len(todo), label, measure_s, reason)
    return dec


def list_decisions(config: Any = None, cache_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every stored decision (file, model fingerprint, backend, policy, when)."""
    store = _decision_store(_load_config(config), cache_dir)
    rows = []
    for path, _head, sections in store.load_all(_RECORD):
        dec = _decode_decision(sections, None, path)
        size = path.stat().st_size if path.exists() else 0
        if dec is None:
            rows.append({"file": str(path), "bytes": size, "error": "unreadable"})
            continue
        rows.append({"file": str(path), "bytes": size, "fingerprint": dec.fingerprint, "backend": dec.backend,
                     "precision": dec.precision, "policy": dec.policy, "measured_at": dec.measured_at})
    return sorted(rows, key=lambda r: r["file"])


def clear_decisions(config: Any = None, cache_dir: str | os.PathLike[str] | None = None) -> int:
    """Delete every stored decision; return how many were removed."""
    return _decision_store(_load_config(config), cache_dir).clear(_RECORD)
