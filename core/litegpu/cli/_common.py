"""Shared pieces of the ``litegpu`` subcommands: errors, output, progress, models, backends, inputs.

Everything here is written so the CLI works with whatever parts of litegpu are
installed: with the plugin system present, backends come from
``litegpu.available_backends()`` / ``litegpu.load_delegate()`` and options from
the YAML configuration; without it, only the ``cpu`` backend (no delegate) exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import LiteGPUError

__all__ = [
    "CliError",
    "EXIT_OK",
    "EXIT_FAIL",
    "EXIT_USAGE",
    "Progress",
    "out",
    "err",
    "emit_json",
    "jsonable",
    "table",
    "fmt_bytes",
    "LoadedModel",
    "load_model",
    "backend_infos",
    "backend_names",
    "make_interpreter",
    "resolve_backend",
    "backend_options",
    "load_config_or_none",
    "random_inputs",
    "parse_input_specs",
    "add_common_args",
    "add_backend_options",
    "parse_option_pairs",
    "model_io_details",
]

EXIT_OK = 0
EXIT_FAIL = 1  # the command ran but the result is a failure (diff above tolerance...)
EXIT_USAGE = 2  # bad arguments, missing model, unknown backend...


class CliError(Exception):
    """A failure the CLI reports as one clear line on stderr, with an exit status."""

    def __init__(self, message: str, status: int = EXIT_USAGE):
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------- output


def out(text: str = "") -> None:
    """Print to the *current* stdout (tests capture by swapping sys.stdout)."""
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    sys.stderr.write(text + "\n")


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars/arrays, paths, tuples and sets made JSON-friendly."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, (Path, os.PathLike)):
        return os.fspath(obj)
    if isinstance(obj, type):
        return obj.__name__
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def emit_json(obj: Any) -> None:
    out(json.dumps(jsonable(obj), indent=2))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()) -> str:
    """A plain-text table; columns in ``right`` are right-aligned (numbers)."""
    rows = [["" if c is None else str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    rset = set(right)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(widths[i]) if i in rset else c.ljust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), sep, *(line(r) for r in rows)])


def fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class Progress:
    """A tiny progress bar on stderr.

    Drawn only when ``enabled`` (stderr is a TTY, or ``--progress``) and only once
    the work has taken more than ``delay`` seconds, so quick commands print nothing.
    ``total=None`` shows a counter instead of a bar.
    """

    def __init__(self, label: str, total: int | None = None, *, enabled: bool = False, delay: float = 1.0,
                 stream: Any = None):
        self.label = label
        self.total = total
        self.enabled = enabled
        self.delay = delay
        self.stream = stream
        self.n = 0
        self.start = time.perf_counter()
        self._last = 0.0
        self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, n: int = 1, *, label: str | None = None) -> None:
        self.n += n
        if label is not None:
            self.label = label
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.start < self.delay or (now - self._last < 0.1 and self.n != self.total):
            return
        self._last = now
        self._draw(now)

    def _draw(self, now: float) -> None:
        stream = self.stream or sys.stderr
        elapsed = now - self.start
        if self.total:
            frac = min(1.0, self.n / self.total)
            width = 24
            filled = int(frac * width)
            bar = "#" * filled + "." * (width - filled)
            text = f"\r{self.label} [{bar}] {self.n}/{self.total} {elapsed:.1f}s"
        else:
            text = f"\r{self.label} {self.n} {elapsed:.1f}s"
        stream.write(text + "\x1b[K" if stream.isatty() else text)
        stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            stream = self.stream or sys.stderr
            self._draw(time.perf_counter())
            stream.write("\n")
            stream.flush()
            self._drawn = False


def progress_enabled(args: argparse.Namespace) -> bool:
    if getattr(args, "progress", False):
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def make_progress(args: argparse.Namespace, label: str, total: int | None = None) -> Progress:
    return Progress(label, total, enabled=progress_enabled(args))


# --------------------------------------------------------------------------- arguments


def add_common_args(p: argparse.ArgumentParser, *, json_flag: bool = True, progress: bool = False) -> None:
    if json_flag:
        p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    if progress:
        p.add_argument("--progress", action="store_true",
                       help="draw progress bars on stderr even when it is not a terminal")


def add_backend_options(p: argparse.ArgumentParser) -> None:
    """``--config``, ``--precision`` and ``--option KEY=VALUE`` (delegate options)."""
    p.add_argument("--config", metavar="YAML",
                   help="litegpu configuration (YAML file or packaged preset name) for backend options")
    p.add_argument("--precision", choices=("fp32", "fp16", "fp16_fp32acc"),
                   help="backend arithmetic precision (a delegate option)")
    p.add_argument("--option", "-O", action="append", default=[], metavar="KEY=VALUE",
                   help="a delegate option (repeatable); VALUE is parsed as YAML (2, true, fast)")


def parse_option_pairs(pairs: Sequence[str]) -> dict[str, Any]:
    import yaml

    opts: dict[str, Any] = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--option expects KEY=VALUE, got {item!r}")
        try:
            opts[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            opts[key.strip()] = value
    return opts


# --------------------------------------------------------------------------- models


@dataclass
class LoadedModel:
    path: str
    data: bytes
    model: Any  # litegpu._ir.Model
    fingerprint: str  # sha256 of the bytes

    @property
    def name(self) -> str:
        return Path(self.path).name


def load_model(path: str) -> LoadedModel:
    """Read a .tflite file (or a fetched model named like ``face_detection_short_range``), turning
    every failure into one clear :class:`CliError`."""
    from .._reader import read_model

    p = Path(path)
    if not p.exists():
        from ..models import resolve_model

        try:
            p = resolve_model(path)  # the name of a fetched model
        except LiteGPUError as e:
            raise CliError(str(e)) from None
        path = str(p)
    if p.is_dir():
        raise CliError(f"model path is a directory, not a .tflite file: {path}")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise CliError(f"cannot read model file {path}: {e.strerror or e}") from e
    try:
        model = read_model(data)
    except LiteGPUError as e:
        raise CliError(f"{path} is not a valid .tflite model: {e}") from e
    except Exception as e:  # the reader should raise ModelError; be safe anyway
        raise CliError(f"{path} is not a valid .tflite model: {type(e).__name__}: {e}") from e
    return LoadedModel(path=str(path), data=data, model=model, fingerprint=hashlib.sha256(data).hexdigest())


# --------------------------------------------------------------------------- backends


@dataclass
class BackendRow:
    name: str
    version: str
    available: bool
    reason: str
    devices: list[str] = field(default_factory=list)
    plugin: str = "litegpu"
    description: str = ""
    is_gpu: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "available": self.available, "reason": self.reason,
                "devices": list(self.devices), "plugin": self.plugin, "description": self.description,
                "is_gpu": self.is_gpu}


def _cpu_row() -> BackendRow:
    import platform

    from .._version import __version__

    cpu = platform.processor() or platform.machine() or "CPU"
    return BackendRow("cpu", __version__, True, "", [f"host {cpu} ({os.cpu_count() or 1} logical cores)"],
                      "litegpu", "numpy reference interpreter (always available)", False)


def backend_infos(refresh: bool = False) -> list[BackendRow]:
    """Every registered backend (``cpu`` first), available or not."""
    import litegpu

    fn = getattr(litegpu, "available_backends", None)
    if fn is None:
        return [_cpu_row()]
    rows = []
    for b in fn(refresh=refresh) if refresh else fn():
        d = b.as_dict() if hasattr(b, "as_dict") else dict(vars(b))
        rows.append(BackendRow(
            name=d["name"], version=str(d.get("version", "")), available=bool(d.get("available")),
            reason=str(d.get("reason") or ""), devices=list(d.get("devices") or ()),
            plugin=str(d.get("plugin") or ""), description=str(d.get("description") or ""),
            is_gpu=bool(d.get("is_gpu", d["name"] != "cpu"))))
    if not any(r.name == "cpu" for r in rows):
        rows.insert(0, _cpu_row())
    return rows


def backend_names(available_only: bool = False) -> list[str]:
    return [r.name for r in backend_infos() if r.available or not available_only]


def load_config_or_none(config: str | None) -> Any:
    """The layered litegpu configuration, or None where the config system is not installed."""
    import litegpu

    fn = getattr(litegpu, "load_config", None)
    if fn is None:
        if config:
            raise CliError("--config needs litegpu's configuration support, which this installation lacks")
        return None
    try:
        return fn(config) if config else fn()
    except LiteGPUError as e:
        raise CliError(f"configuration: {e}") from e


def backend_options(config: Any, backend: str, precision: str | None = None,
                    extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Delegate options for ``backend``: the configuration's, then ``--precision``/``--option``."""
    opts: dict[str, Any] = {}
    if config is not None and hasattr(config, "backend_options"):
        try:
            opts.update(config.backend_options(backend) or {})
        except LiteGPUError as e:
            raise CliError(f"configuration: {e}") from e
    if precision:
        opts["precision"] = precision
    opts.update(extra or {})
    return opts


def resolve_backend(model: LoadedModel, backend: str, config: Any, options: dict[str, Any]) -> tuple[str, dict]:
    """``auto`` -> what ``litegpu.load`` would take: the cached auto-selection decision (measured now
    only with ``autoselect.measure_on_load``), else the first available GPU backend; any other name
    unchanged."""
    if backend != "auto":
        return backend, options
    from .._autoselect import resolve_auto
    from .._load import resolve_backend_order

    try:
        dec = resolve_auto(model.data, config)
    except LiteGPUError as e:
        raise CliError(f"backend auto: {e}") from e
    if dec is None:
        name = resolve_backend_order(["auto"])[0]
        err(f"litegpu: backend auto -> {name} (first available GPU backend: no measured decision is cached "
            f"for this model; `litegpu autoselect {model.name}` measures)")
        opts = backend_options(config, name) if name != "cpu" else {}
        opts.update(options)
        return name, opts
    label = dec.backend + (f"/{dec.precision}" if dec.precision else "")
    src = "cached decision" if dec.cached else "measured now"
    if not dec.final:
        src += ", provisional"
    err(f"litegpu: backend auto -> {label} ({src}: {dec.reason})")
    opts = backend_options(config, dec.backend) if dec.backend != "cpu" else {}
    opts.update(dec.delegate_options())
    return dec.backend, opts


def chosen_backend(model: LoadedModel, args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]]:
    """For a command that runs one backend: the configuration (``--config``), the backend (``--backend``,
    ``auto`` resolved) and its delegate options (the configuration's, then ``--precision`` and ``--option``)."""
    config = load_config_or_none(args.config)
    opts = backend_options(config, args.backend, args.precision, parse_option_pairs(args.option))
    name, opts = resolve_backend(model, args.backend, config, opts)
    return config, name, opts


def _delegates_for(backend: str, options: Mapping[str, Any]) -> list[Any]:
    import litegpu

    fn = getattr(litegpu, "load_delegate", None)
    if fn is None:
        if backend == "cpu":
            return []
        raise CliError(f"unknown backend {backend!r} (installed: cpu)")
    try:
        d = fn(backend, dict(options))
    except LiteGPUError as e:
        raise CliError(str(e)) from e
    return [d]


def make_interpreter(model: LoadedModel, backend: str = "cpu", options: Mapping[str, Any] | None = None, *,
                     config: Any = None, num_threads: int | None = None, preserve_all_tensors: bool = False) -> Any:
    """An allocated :class:`litegpu.Interpreter` running ``model`` with ``backend``'s delegate.

    Unknown or unavailable backends and failures to prepare become :class:`CliError`.
    """
    from .._interpreter import Interpreter

    if backend == "auto":
        raise CliError("backend 'auto' is resolved by `litegpu autoselect`; name a backend here")
    delegates = _delegates_for(backend, options or {})
    try:
        interp = Interpreter(model_content=model.model, experimental_delegates=delegates, num_threads=num_threads,
                             experimental_preserve_all_tensors=preserve_all_tensors)
        apply_partition_options(interp, config)
        interp.allocate_tensors()
    except LiteGPUError as e:
        raise CliError(f"{model.name} on backend {backend}: {e}") from e
    return interp


def apply_partition_options(interp: Any, config: Any) -> None:
    """The configuration's ``partition`` section, set before ``allocate_tensors`` plans."""
    setter = getattr(interp, "set_partition_options", None)
    if config is not None and callable(setter) and hasattr(config, "partition_options"):
        setter(config.partition_options())


# --------------------------------------------------------------------------- inputs


def model_io_details(model: LoadedModel, outputs: bool = False) -> list[dict[str, Any]]:
    """Name, index, shape and numpy dtype of the main subgraph's inputs (or outputs), from the
    file, without preparing an interpreter."""
    from .._plan import numpy_dtype

    sg = model.model.subgraphs[0]
    rows = []
    for i in (sg.outputs if outputs else sg.inputs):
        t = sg.tensors[i]
        dt = numpy_dtype(t.dtype)
        rows.append({"name": t.name, "index": t.index, "shape": tuple(int(d) for d in t.shape),
                     "dtype": dt.type if dt is not None else np.object_})
    return rows


def random_inputs(details: Sequence[Mapping[str, Any]], rng: np.random.Generator, *,
                  gaussian: bool = True) -> list[np.ndarray]:
    """Seeded random inputs (see :func:`litegpu._profile.random_inputs`); unsupported dtypes
    become a :class:`CliError` that says to give the input as a file."""
    from .._profile import random_inputs as _random

    try:
        return _random(details, rng, gaussian=gaussian)
    except ValueError as e:
        raise CliError(f"{e}; give it with --input NAME=FILE.npy") from None


_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff")


def parse_input_specs(specs: Sequence[str], details: Sequence[Mapping[str, Any]],
                      image_loader: Any = None) -> dict[int, np.ndarray]:
    """``NAME=FILE`` (or ``INDEX=FILE``, or a bare ``FILE`` for a single-input model) ->
    {position in the input list: array}.

    ``FILE`` is a ``.npy`` array or an image (``.jpg``, ``.png``...): images go through
    ``image_loader(position, detail, path)``, which returns the input tensor (resized and
    normalised; see :mod:`litegpu.cli._preprocess`).  Arrays are checked against the input's
    shape and dtype: float arrays for float inputs are converted, and so are integer arrays
    (a uint8 picture for a float input); other mismatches are errors naming the input.
    """
    by_name = {d["name"]: k for k, d in enumerate(details)}
    given: dict[int, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep and Path(spec).suffix.lower() in (".npy", *_IMAGE_SUFFIXES):
            if len(details) != 1:
                names = ", ".join(repr(d["name"]) for d in details)
                raise CliError(f"--input {spec!r}: the model has {len(details)} inputs ({names}); "
                               "name one: --input NAME=FILE")
            name, file = "0", spec
        elif not sep or not name or not file:
            raise CliError(f"--input expects NAME=FILE (.npy or an image) or, for a single-input model, FILE; "
                           f"got {spec!r}")
        if name in by_name:
            k = by_name[name]
        elif name.isdigit() and int(name) < len(details):
            k = int(name)
        else:
            names = ", ".join(repr(d["name"]) for d in details)
            raise CliError(f"--input {spec!r}: the model has no input named {name!r} (inputs: {names})")
        d = details[k]
        if Path(file).suffix.lower() in _IMAGE_SUFFIXES:
            if not Path(file).is_file():
                raise CliError(f"--input {spec!r}: file not found: {file}")
            if image_loader is None:
                raise CliError(f"--input {spec!r}: this command takes .npy arrays only")
            given[k] = image_loader(k, d, Path(file))
            continue
        try:
            a = np.load(file, allow_pickle=False)
        except FileNotFoundError:
            raise CliError(f"--input {spec!r}: file not found: {file}") from None
        except (OSError, ValueError, EOFError) as e:
            # numpy's own text advises allow_pickle=True, which would be wrong advice here
            why = "" if "pickle" in str(e) else f" ({e})"
            raise CliError(f"--input {spec!r}: {file} is not a readable .npy array, nor an image "
                           f"(.jpg, .png...){why}") from None
        if not isinstance(a, np.ndarray):  # np.load of an .npz gives an archive
            raise CliError(f"--input {spec!r}: {file} is an .npz archive; give one .npy array per input")
        want_shape = tuple(int(s) for s in d["shape"])
        want = np.dtype(d["dtype"])
        if a.dtype != want:
            if want.kind == "f" and a.dtype.kind in "fiub":
                a = a.astype(want)  # float64 arrays, uint8 pictures...: the values are kept
            else:
                raise CliError(f"--input {spec!r}: array has dtype {a.dtype}, input {d['name']!r} needs {want}")
        if tuple(a.shape) != want_shape:
            if a.size == int(np.prod(want_shape)) and a.ndim + 1 == len(want_shape) and want_shape[0] == 1:
                a = a.reshape(want_shape)  # a missing batch dimension of 1
            else:
                raise CliError(f"--input {spec!r}: array has shape {tuple(a.shape)}, input {d['name']!r} "
                               f"needs {want_shape}")
        given[k] = a
    return given


def set_inputs(interp: Any, arrays: Sequence[np.ndarray]) -> None:
    for d, a in zip(interp.get_input_details(), arrays, strict=True):
        interp.set_tensor(d["index"], a)


def get_outputs(interp: Any) -> list[np.ndarray]:
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


def timed_invoke(interp: Any) -> float:
    t = time.perf_counter()
    interp.invoke()
    return time.perf_counter() - t


def fail_invoke(model: LoadedModel, backend: str, e: Exception) -> CliError:
    return CliError(f"{model.name} failed to run on backend {backend}: {e}")
