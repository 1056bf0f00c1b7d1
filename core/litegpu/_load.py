"""``litegpu.load``: a ready-to-run interpreter from a model and a configuration."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from ._backend_loading import AUTO_ORDER, gpu_backends_in_auto_order, load_delegate, mark_unavailable
from ._backend_options import FIRST_PARTY_BACKENDS
from ._config import Config, load_config
from ._delegate import Delegate
from ._errors import BackendUnavailableError, DelegateError, LiteGPUError, UnknownBackendError
from ._interpreter import Interpreter

__all__ = ["AUTO_ORDER", "load", "resolve_backend_order", "select_delegate"]

logger = logging.getLogger("litegpu")


def resolve_backend_order(names: Sequence[str]) -> list[str]:
    """Expand ``auto`` in a backend list: the first available GPU backend, else ``cpu``.

    This is the meaning of ``auto`` when no auto-selection decision is cached for
    the model (and after the first entry of a list); :func:`load` first looks for
    one (:func:`litegpu._autoselect.resolve_auto`).  Here ``auto`` takes the first
    available GPU backend in :data:`AUTO_ORDER`, then other registered GPU
    backends in registration order, and says so in a log line.
    """
    out: list[str] = []
    for name in names:
        if name != "auto":
            out.append(name)
            continue
        chosen = None
        passed = []
        for b in gpu_backends_in_auto_order():  # probes drivers one by one, up to the first that works
            if b.available:
                chosen = b.name
                break
            passed.append(f"{b.name}: {b.reason}")
        if chosen is None:
            why = "; ".join(passed) or "no GPU backend installed"
            logger.warning("backend 'auto': no GPU backend can run (%s); running on the CPU reference "
                           "interpreter", why)
            chosen = "cpu"
        else:
            logger.info("backend 'auto' resolved to %r (first available GPU backend%s)", chosen,
                        f"; unavailable: {'; '.join(passed)}" if passed else "")
        out.append(chosen)
    return out


def select_delegate(config: Config) -> tuple[str, Delegate | None]:
    """Walk the configured backend list; return ``(name, delegate)`` of the first that loads.

    ``cpu`` (or the end of the list) gives ``("cpu", None)``.  A requested
    backend that cannot run is never skipped silently: a WARNING names the
    reason and what runs instead, or, with ``strict: true``, a
    :class:`litegpu.BackendUnavailableError` is raised.  A
    :class:`litegpu.ConfigError` in a backend's options is raised, not skipped.
    """
    skipped: list[str] = []
    for name in resolve_backend_order(config.backends):
        if name == "cpu":
            break
        try:
            delegate = load_delegate(name, config.backend_options(name))
        except UnknownBackendError:
            hint = f" (pip install 'litegpu[{name}]')" if name in FIRST_PARTY_BACKENDS else ""
            reason = f"backend {name!r} is not installed{hint}"
        except (BackendUnavailableError, DelegateError) as exc:
            reason = str(exc)  # names the backend and the cause (no driver, failed to start...)
        else:
            if skipped:
                logger.warning("%s; running on %s instead", "; ".join(skipped), name)
            return name, delegate
        if config.strict:
            raise BackendUnavailableError(
                f"{reason} (strict: true forbids falling back; set strict: false to run on the next "
                "listed backend or the CPU)")
        skipped.append(reason)
    if skipped:
        logger.warning("%s; running on the CPU reference interpreter instead", "; ".join(skipped))
    return "cpu", None


def _autoselect(model: Any, cfg: Config) -> tuple[str, Delegate | None] | None:
    """``backend: auto``: the cached decision for this model (or a measurement when
    ``autoselect.measure_on_load`` is set, see :mod:`litegpu._autoselect`); None: take the first
    available GPU backend (:func:`resolve_backend_order`)."""
    from ._autoselect import resolve_auto

    if not isinstance(model, (str, os.PathLike, bytes, bytearray, memoryview)):
        return None
    try:
        decision = resolve_auto(model, cfg)
    except (LiteGPUError, OSError, ValueError, RuntimeError) as exc:
        # e.g. the CPU reference lacks a kernel the model needs: measuring is impossible, the
        # model may still run on a GPU backend.
        logger.warning("autoselect failed (%s); taking the first available GPU backend", exc)
        return None
    if decision is None:
        logger.info("backend auto: no measured decision cached for this model; taking the first available GPU "
                    "backend in the order %s (`litegpu autoselect MODEL` measures them all and caches the "
                    "best; autoselect.measure_on_load: true measures in load())", ", ".join(AUTO_ORDER))
        return None
    label = decision.backend + (f"/{decision.precision}" if decision.precision else "")
    logger.info("backend auto -> %s (%s decision: %s)", label, "cached" if decision.cached else "measured",
                decision.reason)
    if decision.backend == "cpu":
        return "cpu", None
    try:
        opts = {**cfg.backend_options(decision.backend), **decision.delegate_options()}
        return decision.backend, load_delegate(decision.backend, opts)
    except LiteGPUError as exc:
        logger.warning("autoselect chose %s, which failed to load (%s); taking the first available GPU backend",
                       decision.backend, exc)
        return None


_HANDLER_MARK = "_litegpu_config_handler"


def _apply_logging(config: Config) -> None:
    """``logging.level``: set the ``litegpu`` logger's level and, when the application has
    configured no handler anywhere on its path (so the messages would be lost or, below
    WARNING, dropped by :data:`logging.lastResort`), attach one writing to stderr."""
    level = config.get("logging.level")
    if not level:
        return
    logger.setLevel(level)
    if any(getattr(h, _HANDLER_MARK, False) for h in logger.handlers) or logger.hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("litegpu: %(levelname)s: %(message)s"))
    setattr(handler, _HANDLER_MARK, True)
    logger.addHandler(handler)


def load(model: Any, config: Any = None, backend: Any = None, **options: Any) -> Any:
    """Build a ready (allocated) :class:`litegpu.Interpreter` from ``model`` and a configuration.

    ``model``: a ``.tflite`` path, the name of a fetched model
    (``"face_detection_short_range"``, see :mod:`litegpu.models`) or the model's bytes.  ``config``: a YAML
    path, a packaged preset name (``"low-latency"``), a dict or a
    :class:`litegpu.Config`; layered over the packaged defaults and
    ``$LITEGPU_CONFIG``.  ``backend``: shortcut for the ``backend`` key (a
    name, a list, or ``"auto"``).  ``options``: further overrides
    (``precision="fp16"``, ``max_delegated_partitions=1``,
    ``partition__min_nodes_per_partition=2``...).

    The backends are tried in order; the first that is installed, available
    and creates its delegate is used, otherwise the model runs on the CPU.
    Each fallback is logged at WARNING with its reason (``strict=True``, or
    ``strict: true`` in the configuration, raises
    :class:`litegpu.BackendUnavailableError` instead), and so is the partition
    summary when any op runs on the CPU.  The resolved configuration is kept on the
    interpreter as ``litegpu_config`` and the chosen backend as
    ``litegpu_backend``.
    """
    if isinstance(model, (str, os.PathLike)) and not os.path.exists(model) \
            and os.path.basename(os.fspath(model)) == os.fspath(model):
        from .models import resolve_model

        # a bare name: a fetched model's (else a ModelError naming the fix); a missing path with
        # directories is left to the interpreter, whose error matches LiteRT's
        model = resolve_model(model)
    overrides = dict(options)
    if backend is not None:
        overrides["backend"] = backend
    cfg = load_config(config, **overrides)
    _apply_logging(cfg)
    chosen = _autoselect(model, cfg) if cfg.backends and cfg.backends[0] == "auto" else None
    kwargs: dict[str, Any] = {}
    if isinstance(model, (str, os.PathLike)):
        kwargs["model_path"] = os.fspath(model)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        kwargs["model_content"] = bytes(model)
    else:
        raise TypeError(f"model must be a .tflite path or bytes, got {type(model).__name__}")
    while True:
        name, delegate = chosen if chosen is not None else select_delegate(cfg)
        interpreter = Interpreter(**kwargs, experimental_delegates=[delegate] if delegate is not None else None)
        # The constructor keeps LiteRT's exact signature; litegpu's partition settings go through
        # a litegpu-only method, called before allocate_tensors plans the partitions.
        setter = getattr(interpreter, "set_partition_options", None)
        if callable(setter):
            setter(cfg.partition_options())
        else:
            logger.debug("this Interpreter has no set_partition_options: partition settings use its defaults")
        try:
            interpreter.allocate_tensors()
            break
        except BackendUnavailableError as exc:
            # a backend whose driver starts in the background (BackendSpec.quick_availability) failed to
            # start: it is unavailable from now on, and the next listed backend is tried (with the
            # WARNING, or under strict the error, that select_delegate gives any unavailable backend)
            if delegate is None:
                raise
            mark_unavailable(name, str(exc))
            delegate.close()
            chosen = None
    label = os.path.basename(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else "model"
    logger.info("%s: backend %s (configuration: %s)", label, name, " < ".join(cfg.sources) or "defaults")
    for attr, value in (("litegpu_config", cfg), ("litegpu_backend", name)):
        try:
            setattr(interpreter, attr, value)
        except AttributeError:
            pass
    return interpreter
