"""Finding and loading backends: what users call (:func:`available_backends`, :func:`load_delegate`).

Built on the plugin registry (``_plugins``) and the configuration (``_config``, for the ``cache``
section's schema and defaults); what a backend *is* lives in ``_backend``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ._backend import BackendInfo
from ._backend_options import FIRST_PARTY_BACKENDS
from ._config import SCHEMA, load_config
from ._delegate import Delegate
from ._errors import BackendUnavailableError, ConfigError, DelegateError, UnknownBackendError
from ._gc import without_gc
from ._options import describe_value, suggest
from ._plugins import backend_registry, option_schema, registry_for

__all__ = ["AUTO_ORDER", "available_backends", "gpu_backends_in_auto_order", "load_delegate",
           "resolve_backend_options", "checked_cache_section"]

logger = logging.getLogger("litegpu")


def checked_cache_section(value: Any, source: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"cache: expected a mapping, got {describe_value(value)} ({source})", path="cache")
    schema = SCHEMA["cache"]
    out = {k: opt.default for k, opt in schema.items()}
    for key, v in value.items():
        if key not in schema:
            raise ConfigError(f"cache.{key}: unknown key (valid: {', '.join(sorted(schema))})"
                              f"{suggest(key, schema)} ({source})", path=f"cache.{key}")
        problem = schema[key].check(v)
        if problem:
            raise ConfigError(f"cache.{key}: {problem} ({source})", path=f"cache.{key}")
        out[key] = v
    return out


def resolve_backend_options(
    name: str, options: Mapping[str, Any] | None = None, *, source: str = "options"
) -> dict[str, Any]:
    """Validate ``options`` for backend ``name`` and complete them with defaults.

    Precedence: schema defaults < the backend's ``default_options`` < ``options``.
    Raises :class:`litegpu.ConfigError` naming ``backends.<name>.<key>``.
    """
    return _resolve(name, backend_registry().get(name), options, source)


def _resolve(name: str, entry: Any, options: Mapping[str, Any] | None, source: str) -> dict[str, Any]:
    """:func:`resolve_backend_options` for a registry entry (None: a backend not installed)."""
    schema = option_schema(entry)
    out = {k: opt.default for k, opt in schema.items()}
    if entry is not None:
        out.update(getattr(entry.spec, "default_options", {}) or {})
    for key, value in (options or {}).items():
        path = f"backends.{name}.{key}"
        if key == "cache":  # the configuration's cache section, checked against its schema here
            out[key] = checked_cache_section(value, source)
            continue
        if key not in schema:
            raise ConfigError(
                f"{path}: unknown option for backend {name!r} (valid: {', '.join(sorted(schema))})"
                f"{suggest(key, schema)} ({source})",
                path=path,
            )
        problem = schema[key].check(value)
        if problem:
            raise ConfigError(f"{path}: {problem} ({source})", path=path)
        out[key] = value
    return out


# ----------------------------------------------------------------------------
# Public entry points


def available_backends(refresh: bool = False) -> list[BackendInfo]:
    """Every registered backend, available or not, in registration order.

    Each :class:`BackendInfo` has ``name``, ``version``, ``available``,
    ``reason`` (why it is unavailable, or a note), ``devices`` and ``plugin``
    (the plugin that registered it).  The built-in ``cpu`` backend is always
    listed and always available.  Availability is checked once per process;
    pass ``refresh=True`` to check again (after plugging in a device, say).
    """
    reg = backend_registry()
    with reg.lock:
        entries = list(reg.entries.values())
    return [reg.info(e, refresh=refresh) for e in entries]


#: Preference among GPU backends when ``auto`` picks without measuring (others follow in
#: registration order): OpenCL has the most tuned kernels, WebGPU the most indirection.
AUTO_ORDER = ("opencl", "vulkan", "webgpu")


def gpu_backends_in_auto_order() -> Iterator[BackendInfo]:
    """The registered GPU backends (available or not): :data:`AUTO_ORDER` first, then the others
    in registration order.  Lazy: a backend's availability is checked only when the iteration
    reaches it (probing a driver can take seconds; the first available one is usually enough)."""
    reg = backend_registry()
    with reg.lock:
        entries = [e for e in reg.entries.values() if e.spec.is_gpu]
    entries.sort(key=lambda e: AUTO_ORDER.index(e.spec.name) if e.spec.name in AUTO_ORDER else len(AUTO_ORDER))
    for e in entries:
        yield reg.info(e)


#: A/B switch (``bench/init.py --set litegpu._backend_loading.QUICK_START=False``): False makes every
#: ``load_delegate`` wait for the full availability check (the driver's instance and device list)
QUICK_START = True


def _quick_availability(spec: Any) -> tuple[bool, str] | None:
    """``spec.quick_availability()`` (see :meth:`BackendSpec.quick_availability`); None when the backend
    has none, or it misbehaves (then the full check answers)."""
    quick = getattr(spec, "quick_availability", None)
    try:
        got = quick() if callable(quick) else None
        return None if got is None else (bool(got[0]), str(got[1] or ""))
    except Exception:  # noqa: BLE001 - a misbehaving plugin: the full availability check answers
        return None


def mark_unavailable(name: str, reason: str) -> None:
    """Record that backend ``name`` cannot run in this process (its driver, started in the background
    after ``quick_availability``, failed at the delegate's first use): later ``load_delegate`` calls
    and ``available_backends()`` answer with ``reason`` instead of trying again."""
    entry = backend_registry().get(name)
    if entry is not None:
        entry.availability = (False, reason)
        entry.devices = None


def _installed_list(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


#: A/B switch (``bench/init_ab.py --set litegpu._backend_loading.EARLY_START=False``): True lets a
#: process's first ``load_delegate(name)`` create its delegate (a driver that starts on a thread starts
#: there) once core's plugins and the entry point named ``name`` are loaded, and load the other plugins
#: after it (``_plugins.registry_for``); False loads every plugin first, as before
EARLY_START = True


@without_gc  # the first one imports the GPU core and the driver's binding (litegpu._gc)
def load_delegate(name: str, options: Mapping[str, Any] | None = None) -> Delegate:
    """Create the delegate of backend ``name`` with ``options``.

    ``options`` are validated against the backend's option schema (unknown
    keys and bad values raise :class:`litegpu.ConfigError`) and completed with
    defaults.  An unknown ``name`` raises :class:`litegpu.UnknownBackendError`
    (also a ``ValueError``) listing the installed backends; a backend that
    cannot run here raises :class:`litegpu.BackendUnavailableError` with its
    reason.  Use the result with ``Interpreter(..., experimental_delegates=[...])``.
    """
    if not isinstance(name, str):
        backend_registry()  # plugins loaded, as by every call
        raise TypeError(f"backend name must be a string, got {type(name).__name__}")
    entry = registry_for(name).get(name) if EARLY_START else None
    if entry is not None:
        # created before the other plugins load (its driver's start, on a thread, overlaps their
        # imports); kept unless a plugin earlier in the order registers a backend of the same name
        try:
            delegate = _create(name, entry, options)
        except Exception:
            if backend_registry().get(name) is entry:
                raise
        else:
            if backend_registry().get(name) is entry:
                return delegate
            close = getattr(delegate, "close", None)
            if callable(close):
                close()
    reg = backend_registry()
    entry = reg.get(name)
    if entry is None:
        installed = reg.names()
        hint = ""
        if name in FIRST_PARTY_BACKENDS:
            hint = f"; install it with: pip install {FIRST_PARTY_BACKENDS[name]}"
        raise UnknownBackendError(
            f"unknown backend {name!r} (installed: {_installed_list(installed)})"
            f"{suggest(name, [*installed, *FIRST_PARTY_BACKENDS])}{hint}"
        )
    return _create(name, entry, options)


def _create(name: str, entry: Any, options: Mapping[str, Any] | None) -> Delegate:
    """``load_delegate``'s work once the backend's registry entry is known."""
    resolved = _resolve(name, entry, options, source="load_delegate options")
    if "cache" not in resolved:  # defaults + $LITEGPU_CONFIG
        resolved["cache"] = dict(load_config().data["cache"])
    quick = _quick_availability(entry.spec) if entry.availability is None and QUICK_START else None
    # a backend whose delegate starts its driver in the background (the driver's start then overlaps
    # the model's read and plan; a failed start raises BackendUnavailableError at the delegate's first use)
    if quick is None:
        info = registry_for(name).info(entry)
        quick = (info.available, info.reason)
    ok, reason = quick
    if not ok:
        raise BackendUnavailableError(f"backend {name!r} is not available here: {reason}")
    try:
        delegate = entry.spec.create_delegate(resolved)
    except (BackendUnavailableError, ConfigError):
        raise
    except Exception as exc:
        raise DelegateError(f"backend {name!r} (plugin {entry.plugin!r}) failed to create its delegate: {exc!r}") from exc
    if not (callable(getattr(delegate, "supports", None)) and callable(getattr(delegate, "prepare", None))):
        raise DelegateError(
            f"backend {name!r} (plugin {entry.plugin!r}): create_delegate returned {type(delegate).__name__}, "
            "which has no supports()/prepare() (expected a litegpu.Delegate)"
        )
    if getattr(delegate, "name", "delegate") in ("delegate", "", None):
        try:
            delegate.name = name
        except AttributeError:
            pass
    return delegate
