"""The plugin manager: finds plugins, runs their registration hooks, reports failures.

Plugins come from two places, registered the same way:

* :data:`DEFAULT_PLUGINS`, core's own plugin modules (the ``cpu`` backend...);
* setuptools entry points of group ``litegpu`` in installed distributions.

Environment controls (read when plugins are first loaded, or after
:func:`reset_plugins`):

* ``LITEGPU_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (core plugins only);
* ``LITEGPU_PLUGINS=a,b``: load only the entry points named ``a`` and ``b``.

Loading is lazy: nothing happens at ``import litegpu``; the first call that
needs plugins (:func:`litegpu.available_backends`, :func:`litegpu.load_delegate`,
:func:`litegpu.load`, an interpreter preparing CPU kernels) loads them once.
A first ``load_delegate("foo")`` lists the entry points up to the one named
``foo`` and loads it first (if there is one), creates its delegate (whose
driver may start on a thread), and then lists and loads every other plugin
before it returns (:func:`registry_for`): what
is registered, and which backend of a clashing name is kept, is the same as a
load in order (each plugin's place in the order is its ``rank``).
A plugin that fails to import, fails pluggy's validation or raises from a
hook is reported with a :class:`LiteGPUPluginWarning` and listed by
:func:`get_plugins` with ``status="broken"`` and the exception; litegpu keeps
working without it.
"""

from __future__ import annotations

import importlib
import math
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from . import hookspecs
from ._backend import BackendRegistrationError, BackendRegistry
from ._backend_options import COMMON_BACKEND_OPTIONS
from ._options import Option, suggest
from ._version import __version__

__all__ = [
    "ENTRY_POINT_GROUP",
    "DEFAULT_PLUGINS",
    "LiteGPUPluginWarning",
    "get_plugins",
    "backend_option_schema",
    "plugin_manager",
    "ensure_plugins_loaded",
    "backend_registry",
    "register_plugin",
    "unregister_plugin",
    "reset_plugins",
    "call_register_commands",
]

ENTRY_POINT_GROUP = "litegpu"

#: Core's own plugin modules, registered before any entry point and exactly
#: like one (they implement the same hooks).
DEFAULT_PLUGINS: tuple[str, ...] = ("litegpu._cpu_backend",)

#: Hooks run once at load time, in this order, plugin by plugin.
_REGISTRATION_HOOKS = ("register_backends", "register_cpu_kernels")


class LiteGPUPluginWarning(UserWarning):
    """A plugin could not be loaded or registered something invalid."""


@dataclass
class _PluginRecord:
    name: str
    version: str
    module: str
    builtin: bool
    distribution: str | None = None
    status: str = "ok"  # "ok" | "broken"
    error: BaseException | None = None
    problems: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    rank: float = math.inf  # its place in the plugins' order (run-time registrations: after every loaded one)

    @property
    def label(self) -> str:
        """How messages name the plugin: its distribution, else its registered name."""
        return self.distribution or self.name


class _State:
    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, _PluginRecord] = {}
        self.backends = BackendRegistry()
        self.loaded = False
        self.loading = False  # a load is running (a plugin calling back into litegpu sees a partial list)
        #: (rank, entry point) listed but still to load after one loaded out of order (registry_for)
        self.pending: list[tuple[int, Any]] = []
        #: the entry points not listed yet (None: all listed), the next one's rank, the names listed so
        #: far and LITEGPU_PLUGINS's names (None: every plugin), until the load is finished
        self.listing: Iterator[Any] | None = None
        self.next_rank = 0
        self.listed: set[str] = set()
        self.only: set[str] | None = None
        self.out_of_order = False  # records and backends to sort by rank once pending is empty
        self.rank_now = 0.0  # the rank of the plugin loading now (a plugin registered from its hooks shares it)


_lock = threading.RLock()
_state: _State | None = None


def _spec_names() -> set[str]:
    return {n for n in dir(hookspecs) if hasattr(getattr(hookspecs, n), f"{hookspecs.PROJECT_NAME}_spec")}


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _warn(message: str) -> None:
    warnings.warn(message, LiteGPUPluginWarning, stacklevel=3)


def _mark_broken(rec: _PluginRecord, exc: BaseException, what: str) -> None:
    rec.status = "broken"
    rec.error = exc
    rec.problems.append(f"{what}: {exc!r}")
    _warn(f"litegpu plugin {rec.label!r} {what}: {exc!r}; it is skipped")


def _add_plugin(st: _State, obj: Any, rec: _PluginRecord) -> bool:
    """Register ``obj`` with pluggy under ``rec.name``; record and warn on failure."""
    st.records[rec.name] = rec
    try:
        st.pm.register(obj, name=rec.name)
    except Exception as exc:
        _mark_broken(rec, exc, "failed pluggy registration")
        return False
    specs = _spec_names()
    for impl_caller in st.pm.get_hookcallers(obj) or ():
        hook = impl_caller.name
        if hook in specs:
            rec.hooks.append(hook)
        else:
            msg = f"implements unknown hook {hook!r}{suggest(hook, specs)}"
            rec.problems.append(msg)
            _warn(f"litegpu plugin {rec.label!r} {msg}")
    rec.hooks.sort()
    return True


def _run_registration_hooks(st: _State, rec: _PluginRecord) -> None:
    """Call this plugin's registration hooks with callbacks that attribute to it."""
    from .cpu._registry import CPU_KERNELS

    def register_backend(backend: Any) -> None:
        try:
            st.backends.add(backend, rec.label, rec.rank)
        except BackendRegistrationError as exc:
            # a clash is the dropped plugin's problem, which may have registered first (out of order)
            dropped = next((r for r in st.records.values() if exc.plugin is not None and r.label == exc.plugin), rec)
            dropped.problems.append(str(exc))
            _warn(str(exc))

    def register_cpu_kernel(op: str, prepare: Callable[..., Any], *, dtypes: Iterable[str] | None = None,
                            versions: Iterable[int] | range | None = None) -> None:
        if not isinstance(op, str) or not callable(prepare):
            raise TypeError("register(op: str, prepare: callable, *, dtypes=None, versions=None)")
        CPU_KERNELS.register(op, prepare, dtypes=dtypes, versions=versions)

    callbacks = {
        "register_backends": register_backend,
        "register_cpu_kernels": register_cpu_kernel,
    }
    for hook in _REGISTRATION_HOOKS:
        if rec.status != "ok":
            return
        _call_plugin_hook(st, rec, hook, {"register": callbacks[hook]})


def _call_plugin_hook(st: _State, rec: _PluginRecord, hook: str, kwargs: Mapping[str, Any]) -> None:
    caller = getattr(st.pm.hook, hook)
    for impl in caller.get_hookimpls():
        if impl.plugin_name != rec.name:
            continue
        try:
            impl.function(*[kwargs[a] for a in impl.argnames])
        except Exception as exc:
            _mark_broken(rec, exc, f"raised from its {hook} hook")


def _iter_entry_points() -> Iterator[Any]:
    """The ``litegpu`` entry points in order, the first of each name, listed as the iteration goes
    (:func:`registry_for` stops at the one it looks for; the rest are read later)."""
    # not importlib.metadata: its import (the email package) cost every warm start about 75 ms CPU
    from ._entry_points import iter_entry_points

    seen: set[str] = set()
    for ep in iter_entry_points(ENTRY_POINT_GROUP):
        if ep.name in seen:  # the same distribution visible twice on sys.path
            continue
        seen.add(ep.name)
        yield ep


def _load(st: _State, first: str | None = None) -> None:
    """Core's plugins, then the entry points in their order; with ``first``, the entry point of that
    name alone (the rest go to ``st.pending``, for :func:`_finish`)."""
    rank = 0
    for modname in DEFAULT_PLUGINS:
        rec = _PluginRecord(modname, __version__, modname, builtin=True, distribution="litegpu", rank=rank)
        st.rank_now = rank
        rank += 1
        try:
            module = importlib.import_module(modname)
        except Exception as exc:
            st.records[modname] = rec
            _mark_broken(rec, exc, "failed to import")
            continue
        if _add_plugin(st, module, rec):
            _run_registration_hooks(st, rec)

    if _env_true("LITEGPU_DISABLE_PLUGIN_AUTOLOAD"):
        return
    only_env = os.environ.get("LITEGPU_PLUGINS", "").strip()
    st.only = {n.strip() for n in only_env.split(",") if n.strip()} if only_env else None
    st.listing, st.next_rank = iter(_iter_entry_points()), rank
    if first is not None and (st.only is None or first in st.only):
        while (item := _next_listed(st)) is not None:
            if item[1].name == first:
                st.out_of_order = bool(st.pending)
                _load_entry_point(st, item[1], item[0])
                return
            st.pending.append(item)
    _finish(st)


def _next_listed(st: _State) -> tuple[int, Any] | None:
    """The next entry point of the listing (``LITEGPU_PLUGINS`` applied) with its rank; None at its end."""
    for ep in st.listing or ():
        st.listed.add(ep.name)
        rank = st.next_rank
        st.next_rank += 1
        if st.only is None or ep.name in st.only:
            return rank, ep
    st.listing = None
    return None


def _load_entry_point(st: _State, ep: Any, rank: int) -> None:
    st.rank_now = rank
    dist = getattr(ep, "dist", None)
    rec = _PluginRecord(
        ep.name, getattr(dist, "version", "") or "", ep.value, builtin=False,
        distribution=getattr(dist, "name", None) if dist is not None else None, rank=rank,
    )
    if ep.name in st.records:
        st.records.setdefault(f"{ep.name} (duplicate)", rec)
        _mark_broken(rec, ValueError(f"plugin name {ep.name!r} is already taken"), "failed to register")
        return
    try:
        obj = ep.load()
    except Exception as exc:
        st.records[ep.name] = rec
        _mark_broken(rec, exc, "failed to import")
        return
    if _add_plugin(st, obj, rec):
        _run_registration_hooks(st, rec)


def _finish(st: _State) -> None:
    """The entry points :func:`_load` left pending or unlisted, in their order; then the plugins and
    backends listed in that order, as a load in order lists them."""
    while True:
        if st.pending:
            rank, ep = st.pending.pop(0)
        else:
            item = _next_listed(st)
            if item is None:
                break
            rank, ep = item
        _load_entry_point(st, ep, rank)
    if st.only is not None:
        for name in sorted(st.only - st.listed):
            _warn(f"LITEGPU_PLUGINS names {name!r}, which is not an installed litegpu plugin "
                  f"(installed: {', '.join(sorted(st.listed)) or 'none'}){suggest(name, st.listed)}")
        st.only = None
    if st.out_of_order:
        st.out_of_order = False
        ordered = sorted(st.records.items(), key=lambda kv: kv[1].rank)
        st.records.clear()
        st.records.update(ordered)
        st.backends.sort()


def _get_state(first: str | None = None) -> _State:
    """The plugins, loaded (``first``: perhaps only up to the entry point of that name, see
    :func:`registry_for`).  Inside a load (a plugin calling back into litegpu): as loaded so far."""
    global _state
    with _lock:
        if _state is None:
            _state = _State()
        st = _state
        if st.loading:
            return st
        unloaded = st.pending or st.listing is not None
        if not st.loaded or (unloaded and first is None):
            st.loading = True
            try:
                if st.loaded:
                    _finish(st)
                else:
                    st.loaded = True  # set first: a plugin calling back sees a partial list
                    _load(st, first)
            finally:
                st.loading = False
        return st


# ----------------------------------------------------------------------------
# Public API


def ensure_plugins_loaded() -> None:
    """Load plugins now if not done yet (the interpreter calls this before preparing CPU kernels)."""
    _get_state()


def plugin_manager() -> pluggy.PluginManager:
    """The pluggy ``PluginManager`` (plugins loaded)."""
    return _get_state().pm


def backend_registry() -> BackendRegistry:
    """The registry of backends (plugins loaded)."""
    return _get_state().backends


def registry_for(name: str) -> BackendRegistry:
    """For ``load_delegate(name)``'s start: the registry with the entry point named ``name`` loaded
    first when plugins are not loaded yet (core's plugins and the entry points' listing before it, the
    other entry points not yet: any later call that needs plugins, :func:`backend_registry` included,
    loads them).  So a backend's delegate (and its driver's start, on a thread) can begin before the
    other plugins import: 8-10 ms of a warm start on an H100.  Of two backends of one name the plugin
    first in the order keeps it all the same (``_Entry.rank``): the caller checks its entry against
    :func:`backend_registry`'s."""
    return _get_state(first=name).backends


def option_schema(entry: Any) -> dict[str, Option]:
    """The full option schema of a registry entry's backend (common options + its own; ``None``: the
    common ones)."""
    schema = dict(COMMON_BACKEND_OPTIONS)
    if entry is not None:
        schema.update(getattr(entry.spec, "option_schema", {}) or {})
    return schema


def backend_option_schema(name: str) -> dict[str, Option]:
    """The full option schema of backend ``name`` (common options + its own).

    For a first-party backend that is not installed, only the common options
    are known.
    """
    return option_schema(backend_registry().get(name))


def get_plugins() -> list[dict[str, Any]]:
    """Every plugin litegpu knows: loaded, broken, core ones first.

    Each row: ``name`` (entry-point name or module), ``version``, ``module``,
    ``distribution``, ``hooks`` (implemented hook names), ``builtin``,
    ``status`` (``"ok"`` or ``"broken"``), ``error`` (the exception's repr or
    ``None``), ``problems`` (messages about things it registered), and
    ``backends`` (names of the backends it registered).
    """
    st = _get_state()
    rows = []
    with _lock:
        for rec in st.records.values():
            backends = [n for n, e in st.backends.entries.items() if e.plugin == rec.label]
            rows.append({
                "name": rec.name, "version": rec.version, "module": rec.module, "distribution": rec.distribution,
                "hooks": list(rec.hooks), "builtin": rec.builtin, "status": rec.status,
                "error": None if rec.error is None else repr(rec.error), "problems": list(rec.problems),
                "backends": backends,
            })
    return rows


def register_plugin(obj: Any, name: str | None = None, *, version: str = "") -> str:
    """Register a plugin object (a module or an instance with hookimpls) at run time.

    Its registration hooks run at once.  For applications that ship a backend
    inside their own code, and for tests.  Returns the name it was registered
    under.  Raises ``ValueError`` when the name is taken; problems in the
    plugin itself are reported like those of any plugin (warning, ``broken``).
    """
    st = _get_state()
    name = name or getattr(obj, "__name__", None) or f"{type(obj).__name__}-{id(obj):x}"
    with _lock:
        if name in st.records:
            raise ValueError(f"a litegpu plugin named {name!r} is already registered")
        rec = _PluginRecord(name, version, getattr(obj, "__name__", type(obj).__name__), builtin=False,
                            rank=st.rank_now if st.loading else math.inf)
        if _add_plugin(st, obj, rec):
            _run_registration_hooks(st, rec)
    return name


def unregister_plugin(name: str) -> None:
    """Remove a plugin and the backends and GPU kernels it registered.

    CPU kernels it registered stay (the kernel registry is append-only).
    """
    st = _get_state()
    with _lock:
        rec = st.records.pop(name, None)
        if rec is None:
            raise ValueError(f"no litegpu plugin named {name!r}")
        if st.pm.has_plugin(name):
            st.pm.unregister(name=name)
        st.backends.remove_plugin(rec.label)


def reset_plugins() -> None:
    """Forget all plugins; the next use loads them again (re-reading the environment).  For tests."""
    global _state
    with _lock:
        _state = None


def call_register_commands(cli: Any) -> list[str]:
    """Run every plugin's ``register_commands`` hook with ``cli``; return labels of plugins that failed."""
    st = _get_state()
    failed = []
    for rec in list(st.records.values()):
        if rec.status != "ok" or "register_commands" not in rec.hooks:
            continue
        _call_plugin_hook(st, rec, "register_commands", {"cli": cli})
        if rec.status != "ok":
            failed.append(rec.label)
    return failed
