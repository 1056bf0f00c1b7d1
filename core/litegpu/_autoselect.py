"""Benchmark-driven backend selection: what ``backend: auto`` means.

For one model, every available backend (``cpu`` included) is tried at every
precision the configuration allows (``autoselect.precisions``), fp32 of every
backend before any other precision:

1. *prepare*: the interpreter is created with the backend's delegate (timed: init);
2. *check*: outputs on seeded random inputs are compared with the single-thread
   CPU reference; a candidate whose largest error, relative to the reference
   output's range, is above ``autoselect.tolerance`` is rejected with the reason;
3. *time*: warm inferences run for the candidate's share of ``time_budget_s``
   (at least three), the median is its latency; one inference is run under
   ``tracemalloc`` for its host memory, and the delegate partitions' ``describe()``
   give its device memory.

The whole measurement, the CPU reference included, is bounded by ``time_budget_s``
(a hard limit, see :func:`autoselect`): each candidate runs in a worker thread
under its own deadline and is abandoned (status ``over_budget``) when it passes
it.  A decision with such candidates is stored as provisional (``final: false``)
and measured again by the next :func:`autoselect`.

The policy (``latency``, ``init_time`` or ``memory``) picks the winner among the
accepted candidates.  The decision and all measurements are stored (as JSON, with
its ``final`` flag) keyed by the model's SHA-256 and by everything the
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
import threading
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ._backend_loading import available_backends, gpu_backends_in_auto_order, load_delegate
from ._config import load_config
from ._errors import ConfigError, LiteGPUError
from ._interpreter import Interpreter
from ._plugins import backend_registry
from ._version import __version__

__all__ = [
    "POLICIES",
    "AutoselectSettings",
    "Candidate",
    "Decision",
    "autoselect",
    "cached_decision",
    "resolve_auto",
    "decision_dir",
    "list_decisions",
    "clear_decisions",
]

logger = logging.getLogger("litegpu")

POLICIES = ("latency", "init_time", "memory")
_FORMAT = 1  # version of the decision file layout
_MIN_RUNS = 2  # warm timing runs at least; with the second check run, 3 warm samples
_TARGET_RUNS = 30  # enough for a stable median; fewer when the budget share runs out
_abandoned: list[threading.Thread] = []  # workers past their deadline (see abandoned_workers)


@dataclass(frozen=True)
class AutoselectSettings:
    """The ``autoselect`` section of the configuration."""

    policy: str = "latency"
    time_budget_s: float = 10.0
    tolerance: float = 0.01
    precisions: tuple[str, ...] = ("fp32", "fp16_fp32acc", "fp16")
    # ``load()`` measures only when asked: a multi-second surprise on first use is worse than
    # the first available GPU backend (``litegpu autoselect`` measures ahead of time).
    measure_on_load: bool = False

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
        if "measure_on_load" in data:
            data["measure_on_load"] = bool(data["measure_on_load"])
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "time_budget_s": self.time_budget_s, "tolerance": self.tolerance,
                "precisions": list(self.precisions)}

    def ordered_precisions(self) -> list[str]:
        """``precisions`` with fp32 first: every backend's fp32 is measured before any fp16 variant
        (the budget may run out; fp32 is the one that is always accurate)."""
        return sorted(self.precisions, key=lambda p: p != "fp32")


@dataclass
class Candidate:
    """One (backend, precision) tried by :func:`autoselect`."""

    backend: str
    precision: str | None
    options: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"  # ok | rejected | failed | skipped | unavailable | over_budget
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
    # False: some candidate was cut by the time budget; usable, but the next autoselect() measures again.
    final: bool = True
    cached: bool = False  # this process read it from the cache (not stored)
    path: str | None = None  # the decision file (not stored)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": _FORMAT, "backend": self.backend, "precision": self.precision, "options": self.options,
            "policy": self.policy, "reason": self.reason, "fingerprint": self.fingerprint, "key": self.key,
            "measured_at": self.measured_at, "measure_s": self.measure_s, "settings": self.settings,
            "environment": self.environment, "candidates": [c.as_dict() for c in self.candidates],
            "final": self.final, "cached": self.cached, "path": self.path,
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
            # Files written before budgets were enforced may hide skipped candidates: not final.
            final=bool(d.get("final", False)),
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
    """``config`` as a layered litegpu Config (a Config is returned as it is)."""
    if config is not None and hasattr(config, "backend_options"):
        return config
    return load_config(config) if config is not None else load_config()


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
    rows = []
    for b in available_backends():
        d = b.as_dict() if hasattr(b, "as_dict") else dict(vars(b))
        rows.append(d)
    if not any(r["name"] == "cpu" for r in rows):
        rows.insert(0, {"name": "cpu", "version": __version__, "available": True,
                        "reason": "", "devices": [], "is_gpu": False})
    return rows


def _driver(name: str) -> str | None:
    """A backend's driver description, when its BackendSpec offers one (``driver`` or ``driver_version``)."""
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
    return {**_host_environment(settings, only),
            "backends": [_backend_environment(r) for r in rows if r.get("available")]}


def _host_environment(settings: AutoselectSettings, only: Sequence[str] | None) -> dict[str, Any]:
    """The part of :func:`_environment` that needs no driver."""
    return {
        "litegpu": __version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "system": platform.system(),
        # What the choice depends on; the time budget only bounds how long measuring may take (a
        # decision cut short by it is stored as provisional, see Decision.final).
        "settings": {k: v for k, v in settings.as_dict().items() if k != "time_budget_s"},
        "only_backends": sorted(only) if only else None,
    }


def _backend_environment(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": row["name"], "version": str(row.get("version", "")),
            "devices": [str(d) for d in row.get("devices") or ()], "driver": _driver(row["name"])}


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
    """cpu first, then every backend at fp32, then the other precisions (precision-major)."""
    names = [r["name"] for r in rows]
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise ConfigError(f"autoselect: unknown backend(s) {', '.join(unknown)} "
                              f"(registered: {', '.join(names)})")
    head: list[Candidate] = [Candidate("cpu", None, {})]  # the reference is always a candidate
    by_precision: dict[str, list[Candidate]] = {p: [] for p in settings.ordered_precisions()}
    for r in rows:
        name = r["name"]
        if name == "cpu" or (only and name not in only):
            continue
        base = _backend_options(config, name)
        if not r.get("available"):
            head.append(Candidate(name, None, base, status="unavailable", reason=str(r.get("reason") or "")))
            continue
        for p, group in by_precision.items():
            group.append(Candidate(name, p, base))
    return head + [c for group in by_precision.values() for c in group]


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
    delegates = []
    if cand.backend != "cpu":
        opts = dict(cand.options)
        if cand.precision is not None:
            opts["precision"] = cand.precision
        delegates.append(load_delegate(cand.backend, opts))
    interp = Interpreter(model_content=model, experimental_delegates=delegates)
    setter = getattr(interp, "set_partition_options", None)
    if config is not None and callable(setter) and hasattr(config, "partition_options"):
        setter(config.partition_options())
    interp.allocate_tensors()
    return interp


@dataclass
class _Measuring:
    """One fp32 candidate being prepared, checked and timed on its worker (see :func:`autoselect`)."""

    cand: Candidate
    work: Candidate
    worker: _Worker
    gate: _Gate
    began: float


class _Cancelled(Exception):
    """The main thread gave up on this candidate (its deadline passed)."""


@dataclass
class _Checks:
    """What a candidate is checked against: seeded random inputs, the CPU reference's outputs on them,
    the output names.  Filled by :func:`autoselect` once the reference has run, which may be after
    the candidates' prepares started (they read it only past their gate)."""

    inputs: list[list[np.ndarray]] = field(default_factory=list)
    reference: list[list[np.ndarray]] = field(default_factory=list)
    out_names: list[str] = field(default_factory=list)


def _measure(model: Any, cand: Candidate, config: Any, checks: _Checks, tolerance: float, time_s: float,
             target_runs: int = _TARGET_RUNS, done: Sequence[Candidate] = (),
             cancel: threading.Event | None = None, host_memory: bool = True, gate: _Gate | None = None) -> None:
    """Prepare, check and time ``cand`` (filling its fields).  Runs in a worker thread; ``cancel``
    set means the caller stopped waiting: return at the next step, touching nothing shared.
    ``host_memory``: one more run under ``tracemalloc`` (slow: only the memory policy needs it).
    ``gate``: passed between the prepare and the checks: the fp32 candidates prepare side by side
    and wait there until the caller lets one at a time check and time (see :func:`autoselect`);
    the caller may hand a timing share to :meth:`_Gate.release` then, which replaces ``time_s``."""
    from ._profile import delegate_descriptions, device_memory_bytes

    def check_cancel() -> None:
        if cancel is not None and cancel.is_set():
            raise _Cancelled

    perf = time.perf_counter
    t = perf()
    try:
        interp = _make(model, cand, config)
    except (LiteGPUError, ValueError, RuntimeError) as e:
        cand.status, cand.reason = "failed", f"prepare failed: {e}"
        return
    cand.init_us = (perf() - t) * 1e6
    check_cancel()
    if gate is not None:
        gate.pass_through(cancel)
        if gate.time_s is not None:
            time_s = gate.time_s
    inputs, reference, out_names = checks.inputs, checks.reference, checks.out_names
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
    runs: list[float] = []  # warm runs: the check runs after the first count too
    try:
        for k, (xs, want) in enumerate(zip(inputs, reference, strict=True)):
            check_cancel()
            for i, a in zip(in_idx, xs, strict=True):
                interp.set_tensor(i, a)
            t = perf()
            interp.invoke()
            if k == 0:
                cand.first_us = (perf() - t) * 1e6
            else:
                runs.append((perf() - t) * 1e6)
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
    start = perf()
    tracing = tracemalloc.is_tracing()
    warm0 = len(runs)
    try:
        while len(runs) - warm0 < _MIN_RUNS or (len(runs) < target_runs and perf() - start < time_s):
            check_cancel()
            t = perf()
            interp.invoke()
            runs.append((perf() - t) * 1e6)
        if host_memory:
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


def abandoned_workers() -> list[threading.Thread]:
    """Measuring threads given up on by :func:`autoselect` that are still running (inside a driver
    call, usually).  Python waits for them at exit; a command-line tool may end sooner with
    ``os._exit`` once its output is flushed."""
    return [t for t in _abandoned if t.is_alive()]


class _Gate:
    """Where a measuring worker waits between its prepare and its checks while the main thread
    holds it (:meth:`hold`): its prepare outlived its share and the next candidate runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()
        self._passed = False
        #: set when the worker reaches the gate (its prepare is done)
        self.arrived = threading.Event()
        #: the warm-timing share handed over at release (None: the worker's own)
        self.time_s: float | None = None

    def pass_through(self, cancel: threading.Event | None) -> None:
        """The worker: return once the gate is open (at once unless held); _Cancelled when cancelled."""
        self.arrived.set()
        while True:
            with self._lock:
                if self._open.is_set():
                    self._passed = True
                    return
            if cancel is not None and cancel.is_set():
                raise _Cancelled
            self._open.wait(0.05)

    def hold(self) -> bool:
        """Close the gate; False when the worker has passed it already (it is checking or timing)."""
        with self._lock:
            if self._passed:
                return False
            self._open.clear()
            return True

    def release(self, time_s: float | None = None) -> None:
        with self._lock:
            if time_s is not None:
                self.time_s = time_s
            self._open.set()


class _Worker:
    """``fn(cancel)`` on a thread of its own, waited for with a timeout (see :func:`_bounded`)."""

    def __init__(self, fn: Callable[[threading.Event], Any], name: str):
        self.cancel = threading.Event()
        self._box: dict[str, Any] = {}

        def work() -> None:
            try:
                self._box["result"] = fn(self.cancel)
            except _Cancelled:
                pass
            except BaseException as e:  # handed to the waiting thread
                self._box["error"] = e

        # Not a daemon: at exit Python waits for an abandoned worker (which stops at its next step)
        # instead of finalizing under a thread that is inside a driver (drivers abort on that).
        self._thread = threading.Thread(target=work, name=f"litegpu-autoselect-{name}", daemon=False)
        self._thread.start()

    def wait(self, timeout_s: float) -> tuple[bool, Any]:
        """``(True, result)`` once finished (its exception re-raised here), ``(False, None)`` if
        still running after ``timeout_s``."""
        self._thread.join(max(0.0, timeout_s))
        if self._thread.is_alive():
            return False, None
        if "error" in self._box:
            raise self._box["error"]
        return True, self._box.get("result")

    def done(self) -> bool:
        return not self._thread.is_alive()

    def abandon(self) -> None:
        """Stop waiting: ``cancel`` is set and the thread left to end at its next step."""
        self.cancel.set()
        if self._thread.is_alive():
            _abandoned.append(self._thread)


def _bounded(fn: Callable[[threading.Event], Any], timeout_s: float, name: str) -> tuple[bool, Any]:
    """Run ``fn(cancel)`` in a worker thread and wait at most ``timeout_s``.

    Returns ``(True, result)`` (an exception of ``fn`` is re-raised here), or ``(False, None)`` when
    the time ran out: ``cancel`` is then set and the thread abandoned.  Python cannot stop a thread
    inside a driver call, so a prepare in progress finishes in the background; its result is
    dropped, and ``fn`` checks ``cancel`` between steps to stop as soon as it can.
    """
    worker = _Worker(fn, name)
    finished, result = worker.wait(timeout_s)
    if not finished:
        worker.abandon()
    return finished, result


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
    started: float | None = None,
) -> Decision:
    """Choose the backend and precision for ``model`` (path or bytes) on this machine by measuring.

    The stored decision is returned without measuring when a final one exists for the same model,
    environment and settings (``force=True`` measures anyway; ``use_cache=False`` neither
    reads nor writes the cache; a provisional one is measured again).  Arguments left None come
    from the configuration's ``autoselect`` section.  ``backends`` limits the candidates (``cpu``
    is always one).  ``progress(label)`` is called before each candidate.

    ``time_budget_s`` is hard: the call returns within it (plus a few milliseconds of
    bookkeeping), the CPU reference included.  After the reference, cpu is measured alone (the
    baseline); then every backend's fp32 prepare starts at once, side by side (a first call
    compiles every backend cold: one after another they did not fit), and they are checked and
    timed one at a time, in list order among the prepared ones, waiting for the other prepares to
    end (so that nothing runs beside the timing) until half the budget is gone.  Each gets a fair
    share of the time left; one whose checks outlive it goes on beside the next.  The other
    precisions follow one by one, sharing what is left; warm timing takes
    at most half of a fair share.  A candidate past its deadline is abandoned (status
    ``over_budget``), as are those never started, and the decision is then provisional
    (``final`` False): chosen among the measured ones, stored, and measured again by the next
    call.  So is a decision with a candidate checked beside another's prepare or checks (its
    latency is an upper bound), and, under the ``init_time`` policy, one whose init times were
    measured side by side.

    ``started`` (a ``time.perf_counter()`` value) is when the budget began, if earlier than the call:
    ``litegpu autoselect`` passes its process's start, so Python's start-up and the imports count
    against ``--budget`` too and the whole command ends within it.
    """
    from ._profile import random_inputs
    from ._reader import read_model

    start = time.perf_counter() if started is None else min(started, time.perf_counter())
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
        if dec is not None and dec.final:
            logger.info("autoselect: using the cached decision for %s: %s (measured %s; %s)",
                        label, dec.backend if dec.precision is None else f"{dec.backend}/{dec.precision}",
                        dec.measured_at, dec.path)
            return dec
        if dec is not None:
            logger.info("autoselect: the cached decision for %s is provisional (%s); measuring again",
                        label, _cut_summary(dec.candidates))

    cands = _candidates(rows, settings, config, backends)
    todo = [c for c in cands if c.status == "pending"]

    def decision(best: Candidate, reason: str, final: bool) -> Decision:
        return Decision(
            backend=best.backend, precision=best.precision, options=dict(best.options), policy=settings.policy,
            reason=reason, fingerprint=fingerprint, key=key,
            measured_at=datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            measure_s=time.perf_counter() - start, settings=settings.as_dict(), environment=env,
            candidates=cands, final=final)

    if len(todo) == 1:
        # Nothing to compare: no measurement, nothing stored (there is no choice to remember).
        only = todo[0]
        only.status, only.reason = "ok", "the only candidate"
        others = "; ".join(f"{c.label}: {c.status} ({c.reason})" for c in cands if c is not only)
        reason = f"{only.label} is the only available candidate" + (f" ({others})" if others else "")
        logger.info("autoselect: %s for %s; nothing measured", reason, label)
        return decision(only, reason, True)

    budget = settings.time_budget_s
    deadline = start + budget
    logger.warning("autoselect: measuring %d candidates (%s) for %s within a time budget of %g s "
                   "(autoselect.time_budget_s); the decision is cached for this model and machine",
                   len(todo), ", ".join(c.label for c in todo), label, budget)

    ir = read_model(data)
    checks = _Checks()

    def reference_outputs(cancel: threading.Event) -> None:
        # The reference: single-thread CPU on seeded random inputs.
        ref = Interpreter(model_content=ir, num_threads=1)
        ref.allocate_tensors()
        details = ref.get_input_details()
        out_details = ref.get_output_details()
        rng = np.random.default_rng(seed)
        inputs = [random_inputs(details, rng) for _ in range(max(1, num_inputs))]
        reference = []
        for xs in inputs:
            if cancel.is_set():
                raise _Cancelled
            for d, a in zip(details, xs, strict=True):
                ref.set_tensor(d["index"], a)
            ref.invoke()
            reference.append([ref.get_tensor(d["index"]) for d in out_details])
        checks.inputs, checks.reference = inputs, reference
        checks.out_names = [d["name"] for d in out_details]

    n_fp32 = sum(1 for c in todo if c.precision in (None, "fp32"))
    finished, _ = _bounded(reference_outputs, deadline - time.perf_counter(), "reference")
    if not finished:
        for c in todo:
            c.status = "over_budget"
            c.reason = f"not measured: the CPU reference did not finish within the {budget:g} s budget"
        best = _unmeasured_default(cands)
        dec = decision(best, f"{best.label}: the first available GPU backend (nothing measured: the CPU "
                             f"reference took longer than the {budget:g} s budget)", False)
        logger.warning("autoselect: %s", dec.reason)
        return dec

    # candidates whose checks or timing ran while another candidate prepared, checked or timed: their
    # numbers are upper bounds and the decision is provisional (measured again by the next call)
    contended: set[str] = set()
    # prepares that overlapped (all of them, unless some failed at once): their init times are
    # upper bounds, which matters to the init_time policy only
    overlapped = sum(1 for c in todo[:n_fp32] if c.backend != "cpu") > 1

    def take(cand: Candidate, work: Candidate) -> None:
        for f in dataclasses.fields(Candidate):
            setattr(cand, f.name, getattr(work, f.name))
        if cand.status == "ok" and cand.effective_precision:
            cand.reason = f"runs as {cand.effective_precision} on this device"

    def cut(cand: Candidate, worker: _Worker, began: float) -> None:
        worker.abandon()
        cand.status = "over_budget"
        cand.reason = (f"stopped after {time.perf_counter() - began:.2f} s, its share of the {budget:g} s "
                       f"budget (prepare and checks had not finished)")

    def settle(m: _Measuring) -> None:
        take(m.cand, m.work)
        if m.cand.status == "ok":
            notes = []
            if overlapped and m.cand.backend != "cpu":
                notes.append("prepared beside the other candidates (its init time is an upper bound)")
            if m.cand.label in contended:
                notes.append("checked and timed beside another candidate (its latency is an upper bound; "
                             "measured again next time)")
            m.cand.reason = "; ".join(x for x in (m.cand.reason, *notes) if x)
        logger.debug("autoselect: %s: %s %s", m.cand.label, m.cand.status, m.cand.reason)

    def alone(n: int, cand: Candidate) -> None:
        """Measure ``cand`` (``todo[n]``) on its own worker within its share of what is left."""
        now = time.perf_counter()
        left = deadline - now
        if left <= 0:
            cand.status, cand.reason = "over_budget", f"not measured: the {budget:g} s budget was used up"
            return
        first = next((c for c in todo[:n_fp32] if c.backend == cand.backend), None)
        if first is not None and first is not cand and first.status == "over_budget":
            # its fp32 prepare did not finish: this one would be another cold compile with less time
            cand.status = "over_budget"
            cand.reason = f"not measured: {first.label} did not finish within the {budget:g} s budget"
            return
        if progress is not None:
            progress(cand.label)
        # an fp32 candidate (cpu) may use what is left divided among the fp32 ones; the others share it all
        cap = left / ((n_fp32 - n) if n < n_fp32 else (len(todo) - n))
        timing = 0.5 * left / (len(todo) - n)  # warm timing: half of a fair share
        work = dataclasses.replace(cand)
        done = [c for c in todo[:n] if c.status == "ok"]
        finished, _ = _bounded(
            lambda cancel, w=work, d=done, t=timing: _measure(
                ir, w, config, checks, settings.tolerance, t, done=d, cancel=cancel,
                host_memory=settings.policy == "memory"),
            min(cap, deadline - time.perf_counter()), cand.label)
        if finished:
            take(cand, work)
        else:
            cand.status = "over_budget"
            cand.reason = (f"stopped after {time.perf_counter() - now:.2f} s, its share of the {budget:g} s "
                           f"budget (prepare and checks had not finished)")
        logger.debug("autoselect: %s: %s %s", cand.label, cand.status, cand.reason)

    # cpu first, alone: the baseline every backend is compared with (and the fallback) is never timed
    # beside a compile
    alone(0, todo[0])

    # Then every backend's fp32 prepare at once, side by side, each waiting at its gate once
    # prepared: a first call compiles every backend cold (PoCL 6 s, lavapipe's Vulkan 2-7 s, WebGPU
    # 1-2 s on the 2-core CI machine), and one after another, with the checks in between, those
    # prepares did not fit a 10 s budget; side by side the drivers' compilers (threads, glslc
    # processes) share the cores.
    measures = []
    for cand in todo[1:n_fp32]:
        work = dataclasses.replace(cand)  # the worker fills a copy: an abandoned one changes nothing here
        gate = _Gate()
        gate.hold()
        worker = _Worker(
            lambda cancel, w=work, g=gate: _measure(
                ir, w, config, checks, settings.tolerance, 0.0, cancel=cancel,
                host_memory=settings.policy == "memory", gate=g),
            cand.label)
        measures.append(_Measuring(cand, work, worker, gate, time.perf_counter()))

    # One at a time, in list order among those prepared: while some prepares still run, wait for them
    # (a check beside a compile times the compile too) until half the budget is gone, then go on
    # beside them.  Each gets a fair share of what is left; one whose checks outlive it goes on
    # beside the next (contended) and is waited for at the end.
    clean_wait = start + 0.5 * budget
    waiting = list(measures)
    running: list[_Measuring] = []  # released, not finished within their share
    measured = 1
    while waiting:
        now = time.perf_counter()
        if now >= deadline:
            break
        ready = [m for m in waiting if m.gate.arrived.is_set() or m.worker.done()]
        preparing = [m for m in waiting if m not in ready]
        if not ready or (preparing and now < clean_wait and not running):
            until = deadline if not ready else min(deadline, clean_wait)
            (preparing[0].gate.arrived if preparing else ready[0].gate.arrived).wait(
                min(0.02, max(0.0, until - now)))
            continue
        m = ready[0]
        waiting.remove(m)
        if progress is not None:
            progress(m.cand.label)
        beside = [r for r in running if not r.worker.done()]
        if preparing or beside:  # this one's numbers, and those of the checks it runs beside, are upper bounds
            contended.add(m.cand.label)
            contended.update(r.cand.label for r in beside)
        left = deadline - now
        m.gate.release(0.5 * left / (len(todo) - measured))  # warm timing: half of a fair share
        measured += 1
        done_in_time, _ = m.worker.wait(min(left / (len(waiting) + 1), left))
        if done_in_time:
            settle(m)
        else:
            running.append(m)
            logger.debug("autoselect: %s: not finished after its share; going on beside the next", m.cand.label)
        for r in [r for r in running if r.worker.done()]:
            running.remove(r)
            settle(r)
    for m in running:
        done_in_time, _ = m.worker.wait(deadline - time.perf_counter())
        if done_in_time:
            settle(m)
        else:
            cut(m.cand, m.worker, m.began)
    for m in waiting:  # never released: still preparing (or prepared too late) at the deadline
        cut(m.cand, m.worker, m.began)
        if m.gate.arrived.is_set():
            m.cand.reason = (f"prepared after {time.perf_counter() - m.began:.2f} s, but the {budget:g} s budget "
                             "left no time for its checks")

    for n in range(n_fp32, len(todo)):  # the other precisions, one by one
        alone(n, todo[n])

    if overlapped and settings.policy == "init_time":
        contended.update(c.label for c in todo[:n_fp32] if c.status == "ok" and c.backend != "cpu")

    final = not any(c.status == "over_budget" for c in cands) and not contended
    if any(c.status == "ok" for c in cands):
        best, reason = _choose(cands, settings.policy)
    else:
        best = _unmeasured_default(cands)
        reason = f"{best.label}: the first available GPU backend (no candidate finished within the budget)"
    why_provisional = _cut_summary(cands) + (
        f"; measured beside another candidate: {', '.join(sorted(contended))}" if contended else "")
    if not final:
        reason += f"; provisional: {why_provisional}"
    dec = decision(best, reason, final)
    if caching:
        _write_decision(store, dec)
    if final:
        logger.info("autoselect: measured %d candidates of %s in %.2f s: %s", len(todo), label, dec.measure_s,
                    reason)
    else:
        logger.warning("autoselect: measured %s in %.2f s and chose %s, provisionally: %s; run `litegpu "
                       "autoselect MODEL --time-budget S` with a larger budget for a final decision",
                       label, dec.measure_s, best.label, why_provisional)
    return dec


def _cut_summary(cands: Sequence[Candidate]) -> str:
    cut = [c.label for c in cands if c.status == "over_budget"]
    return f"{len(cut)} candidate(s) cut by the time budget: {', '.join(cut)}" if cut else "nothing cut"


def _unmeasured_default(cands: Sequence[Candidate]) -> Candidate:
    """The choice without measurements: the first available GPU backend in :data:`AUTO_ORDER`
    (at its default precision), else cpu."""
    tried = {c.backend: c for c in cands if c.status != "unavailable" and c.backend != "cpu"}
    for info in gpu_backends_in_auto_order():  # all probed already by _backend_rows
        if info.available and info.name in tried:
            return Candidate(info.name, None, dict(tried[info.name].options))
    return next(c for c in cands if c.backend == "cpu")


def resolve_auto(model: Any, config: Any = None) -> Decision | None:
    """What ``backend: auto`` means for :func:`litegpu.load` and the CLI: a measurement when
    ``autoselect.measure_on_load`` is set, else the cached decision (provisional ones too), else
    None (the caller takes the first available GPU backend, see ``litegpu._backend_loading.AUTO_ORDER``).

    Without measuring, only the chosen backend's driver is probed (probing every backend can take
    seconds, WebGPU's adapter enumeration alone 3 s on lavapipe): a stored decision counts when
    the host part of its key matches and its backend still has the same version, devices and
    driver.  (A backend installed since is then not considered: ``litegpu autoselect``, which
    checks the whole key, measures again.)"""
    config = _load_config(config)
    settings = AutoselectSettings.from_config(config)
    if settings.measure_on_load:
        return autoselect(model, config=config)
    if not _cache_enabled(config):
        return None
    data, label = _model_bytes(model)
    fingerprint = hashlib.sha256(data).hexdigest()
    host = _host_environment(settings, None)
    found: list[Decision] = []
    # The entry's name hashes the whole key (backends included), which is not known without probing
    # them all: read this model's decision entries instead (small, and only ``autoselect-*`` files).
    for dec in _model_decisions(_decision_store(config), fingerprint):
        if any(dec.environment.get(k) != v for k, v in host.items()):
            continue
        if dec.backend != "cpu":
            stored = next((b for b in dec.environment.get("backends", ()) if b.get("name") == dec.backend), None)
            row = _backend_row(dec.backend)
            if stored is None or row is None or not row.get("available") or _backend_environment(row) != stored:
                continue
        found.append(dec)
    if not found:
        return None
    best = max(found, key=lambda d: (d.final, d.measured_at))
    logger.debug("autoselect: using the cached decision for %s: %s (%s)", label, best.backend, best.path)
    return best


def _model_decisions(store: Any, fingerprint: str) -> list[Decision]:
    """Every stored decision for the model ``fingerprint`` (any environment key), with the store's
    checks; an entry whose recorded key is not the one its decision implies is skipped."""
    token = _decision_key(fingerprint, "").model_token
    out = []
    for path, head, sections in store.load_all(_RECORD):
        key = head.get("key")
        if not isinstance(key, Mapping) or key.get("model_token") != token:
            continue
        dec = _decode_decision(sections, fingerprint, path)
        if dec is not None and head.get("key_digest") == _decision_key(fingerprint, dec.key).digest:
            out.append(dec)
    return out


def _backend_row(name: str) -> dict[str, Any] | None:
    """One backend's row of :func:`_backend_rows`, probing only its driver."""
    from ._plugins import backend_registry

    reg = backend_registry()
    entry = reg.entries.get(name)
    return None if entry is None else reg.info(entry).as_dict()


def list_decisions(config: Any = None, cache_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every stored decision (file, model fingerprint, backend, policy, when, final or provisional)."""
    store = _decision_store(_load_config(config), cache_dir)
    rows = []
    for path, _head, sections in store.load_all(_RECORD):
        dec = _decode_decision(sections, None, path)
        size = path.stat().st_size if path.exists() else 0
        if dec is None:
            rows.append({"file": str(path), "bytes": size, "error": "unreadable"})
            continue
        rows.append({"file": str(path), "bytes": size, "fingerprint": dec.fingerprint, "backend": dec.backend,
                     "precision": dec.precision, "policy": dec.policy, "measured_at": dec.measured_at,
                     "final": dec.final})
    return sorted(rows, key=lambda r: r["file"])


def clear_decisions(config: Any = None, cache_dir: str | os.PathLike[str] | None = None) -> int:
    """Delete every stored decision; return how many were removed."""
    return _decision_store(_load_config(config), cache_dir).clear(_RECORD)
