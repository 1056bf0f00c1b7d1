"""Backends: what a plugin registers, and how the core finds and loads them.

A *backend* is a named way to run nodes somewhere other than the reference
CPU interpreter ("opencl", "webgpu", "vulkan", or a third-party one).  A
plugin describes it with a :class:`BackendSpec` subclass and registers it from
its ``register_backends`` hook::

    class FooBackend(litegpu.BackendSpec):
        name = "foo"
        version = "1.0"
        option_schema = {"queue_depth": litegpu.Option.int(2, min=1)}

        def availability(self):
            return (True, "") if _driver_found() else (False, "libfoo.so not found")

        def devices(self):
            return ["Foo GPU 0"]

        def create_delegate(self, options):
            return FooDelegate(options)

    @litegpu.hookimpl
    def register_backends(register):
        register(FooBackend)

The core never imports a backend's heavy dependencies itself: it asks
``availability()`` (which should be cheap and must not raise) before
``create_delegate()``.  Users reach backends through
:func:`~litegpu._backend_loading.available_backends` and
:func:`~litegpu._backend_loading.load_delegate`.

This module holds what a backend *is* (the spec, the registry's data
structure and its checks); it imports neither the plugin manager nor the
configuration, which both build on it.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._backend_options import COMMON_BACKEND_OPTIONS, FIRST_PARTY_BACKENDS, PRECISIONS, RESERVED_NAMES
from ._delegate import Delegate
from ._errors import DelegateError
from ._options import Option, suggest

__all__ = [
    "BackendSpec",
    "BackendInfo",
    "BackendRegistry",
    "BackendRegistrationError",
    "COMMON_BACKEND_OPTIONS",
    "FIRST_PARTY_BACKENDS",
    "PRECISIONS",
]

logger = logging.getLogger("litegpu")

_NAME_RE = re.compile(r"^[a-z][a-z0-9_\-]*$")


class BackendRegistrationError(DelegateError):
    """A plugin registered something that is not a usable backend."""

    #: the plugin the error is about (a clash's loser, which may not be the one registering now)
    plugin: str | None = None


class BackendSpec:
    """Describes one backend: its identity, availability, devices and delegate factory.

    Subclass it and override what applies; register the class (or an
    instance) from a ``register_backends`` hook.  The core instantiates a
    registered class once, without arguments.

    Attributes:
        name: the backend's name as users type it (``"opencl"``): lowercase
            letters, digits, ``_`` or ``-``; ``auto`` and ``all`` are reserved.
        version: the backend's version string (shown by ``available_backends``).
        description: one line for listings.
        is_gpu: ``False`` for host-only backends (``auto`` prefers GPU ones).
        default_options: option values this backend prefers over the common
            defaults (e.g. ``{"precision": "fp16"}``).
        option_schema: the backend's own options (name -> :class:`Option`), in
            addition to :data:`COMMON_BACKEND_OPTIONS`; a key here with a common
            option's name replaces that option's description for this backend.
            Configuration files are validated against it
            (``backends.<name>.<option>``).

    Methods to override:
        availability(): ``(True, "")`` or ``(False, reason)``; cheap, never raises.
        quick_availability(): optional; see its docstring.
        devices(): human-readable device names, index = ``device`` option.
        create_delegate(options): the :class:`litegpu.Delegate` for the given
            options (already validated and completed with defaults; the key
            ``cache`` holds the ``cache`` section of the configuration).
    """

    name: str = ""
    version: str = "0"
    description: str = ""
    is_gpu: bool = True
    default_options: Mapping[str, Any] = {}
    option_schema: Mapping[str, Option] = {}

    def availability(self) -> tuple[bool, str]:
        """Can this backend run here?  ``(True, "")`` or ``(False, "why not")``."""
        return True, ""

    def quick_availability(self) -> tuple[bool, str] | None:
        """What :func:`litegpu.load_delegate` may ask instead of :meth:`availability` when the latter
        has not run yet in this process: the checks that need no driver call (the binding imports,
        the tools are there), for a backend whose delegate starts its driver in the background and
        raises :class:`litegpu.BackendUnavailableError` at its first use when that start fails.
        ``None`` (the default): ``load_delegate`` calls :meth:`availability`.  Never raises."""
        return None

    def devices(self) -> list[str]:
        """Names of the devices the backend can use (index = ``device`` option)."""
        return []

    def create_delegate(self, options: Mapping[str, Any]) -> Delegate:
        """Return a new :class:`litegpu.Delegate` configured by ``options``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<BackendSpec {self.name!r} {self.version}>"


@dataclass(frozen=True)
class BackendInfo:
    """One row of :func:`available_backends`."""

    name: str
    version: str
    available: bool
    reason: str
    devices: tuple[str, ...]
    plugin: str
    description: str = ""
    is_gpu: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "version": self.version, "available": self.available, "reason": self.reason,
            "devices": list(self.devices), "plugin": self.plugin, "description": self.description,
            "is_gpu": self.is_gpu,
        }


@dataclass
class _Entry:
    spec: BackendSpec
    plugin: str
    availability: tuple[bool, str] | None = None
    devices: tuple[str, ...] | None = None
    #: the registering plugin's place in the plugins' order (``_plugins``): of two backends of one name,
    #: the lower rank is kept, whichever registered first (``load_delegate`` loads the plugin named like
    #: its backend before the others: see ``_plugins``)
    rank: float = math.inf


@dataclass
class BackendRegistry:
    """Registered backends by name, in registration order (core first, then plugins)."""

    entries: dict[str, _Entry] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (plugin, message)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def add(self, obj: Any, plugin: str, rank: float = math.inf) -> BackendSpec:
        """Check and register ``obj`` (a BackendSpec subclass or instance) from ``plugin``, whose place in
        the plugins' order is ``rank`` (plugins registered at run time: after every loaded one).

        Raises :class:`BackendRegistrationError` naming exactly what is wrong; on a clash of names its
        ``plugin`` is the one whose backend is not kept (the later in the plugins' order).
        """
        spec = _check_backend(obj, plugin)
        with self.lock:
            prior = self.entries.get(spec.name)
            if prior is None:
                self.entries[spec.name] = _Entry(spec, plugin, rank=rank)
                return spec
            kept, dropped = prior.plugin, plugin
            if rank < prior.rank:  # a plugin loaded out of its order (see _Entry.rank) gives way
                self.entries[spec.name] = _Entry(spec, plugin, rank=rank)
                kept, dropped = plugin, prior.plugin
            err = BackendRegistrationError(
                f"backend {spec.name!r} from plugin {dropped!r} clashes with the backend of the same name "
                f"from plugin {kept!r}; the one of the plugin first in the plugins' order is kept"
            )
            err.plugin = dropped
            raise err

    def sort(self) -> None:
        """Entries in the plugins' order (by rank; a plugin's own in its registration order)."""
        with self.lock:
            ordered = sorted(self.entries.items(), key=lambda kv: kv[1].rank)
            self.entries.clear()
            self.entries.update(ordered)

    def remove_plugin(self, plugin: str) -> None:
        with self.lock:
            for name in [n for n, e in self.entries.items() if e.plugin == plugin]:
                del self.entries[name]

    def names(self) -> list[str]:
        return list(self.entries)

    def get(self, name: str) -> _Entry | None:
        return self.entries.get(name)

    def info(self, entry: _Entry, refresh: bool = False) -> BackendInfo:
        spec = entry.spec
        if entry.availability is None or refresh:
            entry.availability = _safe_availability(spec)
            entry.devices = None
        ok, reason = entry.availability
        if ok and (entry.devices is None or refresh):
            entry.devices = _safe_devices(spec)
        return BackendInfo(
            name=spec.name, version=str(spec.version), available=ok, reason=reason,
            devices=entry.devices or (), plugin=entry.plugin, description=spec.description,
            is_gpu=bool(spec.is_gpu),
        )


def _missing(obj: Any, attr: str) -> bool:
    value = getattr(obj, attr, None)
    if value is None:
        return True
    # An override is required for create_delegate: the base raises NotImplementedError.
    if attr == "create_delegate":
        func = getattr(type(obj), attr, None)
        return func is BackendSpec.create_delegate or not callable(value)
    return not callable(value)


def _check_backend(obj: Any, plugin: str) -> BackendSpec:
    label = getattr(obj, "name", None) or getattr(obj, "__name__", None) or type(obj).__name__
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise BackendRegistrationError(
                f"backend {label!r} from plugin {plugin!r} could not be instantiated without arguments: {exc!r}"
            ) from exc
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        raise BackendRegistrationError(
            f"backend class {type(obj).__name__} from plugin {plugin!r} does not define a name"
        )
    if not _NAME_RE.match(name) or name in RESERVED_NAMES:
        raise BackendRegistrationError(
            f"backend {name!r} from plugin {plugin!r} has an invalid name: use lowercase letters, digits, "
            f"'_' or '-' (and not {', '.join(sorted(RESERVED_NAMES))})"
        )
    missing = [a for a in ("create_delegate", "availability", "devices") if _missing(obj, a)]
    if missing:
        raise BackendRegistrationError(
            f"backend {name!r} from plugin {plugin!r} does not define {' or '.join(missing)}"
        )
    schema = getattr(obj, "option_schema", {}) or {}
    if not isinstance(schema, Mapping) or not all(isinstance(v, Option) for v in schema.values()):
        raise BackendRegistrationError(
            f"backend {name!r} from plugin {plugin!r}: option_schema must map option names to litegpu.Option"
        )
    defaults = getattr(obj, "default_options", {}) or {}
    if not isinstance(defaults, Mapping):
        raise BackendRegistrationError(f"backend {name!r} from plugin {plugin!r}: default_options must be a mapping")
    full = {**COMMON_BACKEND_OPTIONS, **schema}
    for key, value in defaults.items():
        if key not in full:
            raise BackendRegistrationError(
                f"backend {name!r} from plugin {plugin!r}: default_options has unknown option {key!r}"
                f"{suggest(key, full)}"
            )
        problem = full[key].check(value)
        if problem:
            raise BackendRegistrationError(
                f"backend {name!r} from plugin {plugin!r}: default_options[{key!r}]: {problem}"
            )
    if not isinstance(obj, BackendSpec):
        # Duck-typed specs get the optional attributes filled in.
        for attr, default in (("version", "0"), ("description", ""), ("is_gpu", True)):
            if not hasattr(obj, attr):
                try:
                    setattr(obj, attr, default)
                except AttributeError as exc:
                    raise BackendRegistrationError(
                        f"backend {name!r} from plugin {plugin!r} does not define {attr}"
                    ) from exc
    return obj


def _safe_availability(spec: BackendSpec) -> tuple[bool, str]:
    try:
        result = spec.availability()
    except Exception as exc:  # a backend must never take litegpu down with it
        return False, f"availability check raised {exc!r}"
    if isinstance(result, bool):
        return result, "" if result else "backend reported unavailable (no reason given)"
    try:
        ok, reason = result
    except (TypeError, ValueError):
        return False, f"availability() returned {result!r}, expected (bool, reason)"
    return bool(ok), str(reason or "")


def _safe_devices(spec: BackendSpec) -> tuple[str, ...]:
    try:
        return tuple(str(d) for d in spec.devices() or ())
    except Exception as exc:
        logger.warning("backend %r: devices() raised %r", spec.name, exc)
        return ()
