"""``litegpu.load``: a ready-to-run interpreter from a model and a configuration."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from ._backend_loading import available_backends, load_delegate
from ._backend_options import FIRST_PARTY_BACKENDS
from ._config import Config, load_config
from ._delegate import Delegate
from ._errors import BackendUnavailableError, DelegateError, LiteGPUError, UnknownBackendError
from ._interpreter import Interpreter

__all__ = ["load", "resolve_backend_order", "select_delegate"]

logger = logging.getLogger("litegpu")

#: Preference among GPU backends when resolving ``auto`` (others follow in registration order).
AUTO_ORDER = ("opencl", "vulkan", "webgpu")


def resolve_backend_order(names: Sequence[str]) -> list[str]:
    """Expand ``auto`` in a backend list: the first available GPU backend, else ``cpu``.

    This is the fallback meaning of ``auto`` (and its meaning after the first
    entry of a list); :func:`load` resolves a leading ``auto`` by measuring
    (:mod:`litegpu._autoselect`).  Here ``auto`` takes the first available GPU
    backend in :data:`AUTO_ORDER`, then other registered GPU backends in
    registration order, and says so in a log line.
    """
    out: list[str] = []
    for name in names:
        if name != "auto":
            out.append(name)
            continue
        infos = [b for b in available_backends() if b.is_gpu]
        ranked = sorted(infos, key=lambda b: (AUTO_ORDER.index(b.name) if b.name in AUTO_ORDER else len(AUTO_ORDER)))
        chosen = next((b.name for b in ranked if b.available), None)
        if chosen is None:
            why = "; ".join(f"{b.name}: {b.reason}" for b in ranked) or "no GPU backend installed"
            logger.info("backend 'auto' resolved to 'cpu' (no available GPU backend: %s)", why)
            chosen = "cpu"
        else:
            logger.info("backend 'auto' resolved to %r (first available GPU backend)", chosen)
        out.append(chosen)
    return out


def select_delegate(config: Config) -> tuple[str, Delegate | None]:
    """Walk the configured backend list; return ``(name, delegate)`` of the first that loads.

    ``cpu`` (or the end of the list) gives ``("cpu", None)``.  Each skipped
    backend is logged with its reason.  A :class:`litegpu.ConfigError` in a
    backend's options is raised, not skipped.
    """
    skipped: list[str] = []
    for name in resolve_backend_order(config.backends):
        if name == "cpu":
            break
        try:
            delegate = load_delegate(name, config.backend_options(name))
        except UnknownBackendError:
            hint = f" (pip install {FIRST_PARTY_BACKENDS[name]})" if name in FIRST_PARTY_BACKENDS else ""
            reason = f"{name}: not installed{hint}"
        except BackendUnavailableError as exc:
            reason = f"{name}: {exc}"
        except DelegateError as exc:
            logger.warning("backend %s failed to load: %s", name, exc)
            reason = f"{name}: {exc}"
        else:
            if skipped:
                logger.info("using backend %s (skipped %s)", name, "; ".join(skipped))
            return name, delegate
        logger.info("skipping backend %s", reason)
        skipped.append(reason)
    if skipped:
        logger.info("falling back to the CPU reference interpreter (%s)", "; ".join(skipped))
    return "cpu", None


def _autoselect(model: Any, cfg: Config) -> tuple[str, Delegate | None] | None:
    """``backend: auto``: the measured choice for this model (cached per model and machine, see
    :mod:`litegpu._autoselect`); None falls back to the first available GPU backend."""
    from ._autoselect import autoselect

    if not isinstance(model, (str, os.PathLike, bytes, bytearray, memoryview)):
        return None
    try:
        decision = autoselect(model, config=cfg)
    except (LiteGPUError, OSError, ValueError, RuntimeError) as exc:
        # e.g. the CPU reference lacks a kernel the model needs: measuring is impossible, the
        # model may still run on a GPU backend.
        logger.warning("autoselect failed (%s); taking the first available GPU backend", exc)
        return None
    if decision.backend == "cpu":
        return "cpu", None
    try:
        opts = {**cfg.backend_options(decision.backend), **decision.delegate_options()}
        return decision.backend, load_delegate(decision.backend, opts)
    except LiteGPUError as exc:
        logger.warning("autoselect chose %s, which failed to load (%s); taking the first available GPU backend",
                       decision.backend, exc)
        return None


def _apply_logging(config: Config) -> None:
    level = config.get("logging.level")
    if level:
        logger.setLevel(level)


def load(model: Any, config: Any = None, backend: Any = None, **options: Any) -> Any:
    """Build a ready (allocated) :class:`litegpu.Interpreter` from ``model`` and a configuration.

    ``model``: a ``.tflite`` path or the model's bytes.  ``config``: a YAML
    path, a packaged preset name (``"low-latency"``), a dict or a
    :class:`litegpu.Config`; layered over the packaged defaults and
    ``$LITEGPU_CONFIG``.  ``backend``: shortcut for the ``backend`` key (a
    name, a list, or ``"auto"``).  ``options``: further overrides
    (``precision="fp16"``, ``max_delegated_partitions=1``,
    ``partition__min_nodes_per_partition=2``...).

    The backends are tried in order; the first that is installed, available
    and creates its delegate is used, otherwise the model runs on the CPU
    with the reasons logged.  The resolved configuration is kept on the
    interpreter as ``litegpu_config`` and the chosen backend as
    ``litegpu_backend``.
    """
    overrides = dict(options)
    if backend is not None:
        overrides["backend"] = backend
    cfg = load_config(config, **overrides)
    _apply_logging(cfg)
    chosen = _autoselect(model, cfg) if cfg.backends and cfg.backends[0] == "auto" else None
    name, delegate = chosen if chosen is not None else select_delegate(cfg)
    kwargs: dict[str, Any] = {"experimental_delegates": [delegate] if delegate is not None else None}
    if isinstance(model, (str, os.PathLike)):
        kwargs["model_path"] = os.fspath(model)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        kwargs["model_content"] = bytes(model)
    else:
        raise TypeError(f"model must be a .tflite path or bytes, got {type(model).__name__}")
    interpreter = Interpreter(**kwargs)
    # The constructor keeps LiteRT's exact signature; litegpu's partition settings go through
    # a litegpu-only method, called before allocate_tensors plans the partitions.
    setter = getattr(interpreter, "set_partition_options", None)
    if callable(setter):
        setter(cfg.partition_options())
    else:
        logger.debug("this Interpreter has no set_partition_options: partition settings use its defaults")
    interpreter.allocate_tensors()
    for attr, value in (("litegpu_config", cfg), ("litegpu_backend", name)):
        try:
            setattr(interpreter, attr, value)
        except AttributeError:
            pass
    return interpreter
