"""YAML configuration: schema, validation with line numbers, layering.

Layers, later ones win key by key:

1. the packaged ``default.yaml`` (``litegpu/configs/``);
2. the file named by the ``LITEGPU_CONFIG`` environment variable;
3. the configuration the application passes: a YAML file path, the name of
   a packaged preset (``"low-latency"``, ``"max-precision"``, ``"cpu-only"``),
   a dict, or a :class:`Config`;
4. keyword arguments (``litegpu.load(model, precision="fp16")``).

Each layer is validated on its own, so an error names the file and line it
came from: an unknown key, a wrong type or a bad value raises
:class:`litegpu.ConfigError` with the dotted key path, the problem, the valid
choices, a close match for typos and the source::

    backends.opencl.precision: 'fp8' is not one of fp32, fp16, fp16_fp32acc (app.yaml line 4)

Sections
--------
``backend``: a backend name, a list tried in order, or ``auto``.
``strict``: ``true`` makes a requested backend that cannot run an error
(:class:`litegpu.BackendUnavailableError`) instead of a logged fallback.
``backends.<name>``: options of one backend (common ones below plus the
backend's own ``option_schema``); ``backends.all`` applies to every backend
and is overridden, within the same layer, by a named section.
``partition``, ``cache``, ``autoselect``, ``logging``: see :data:`SCHEMA`.

Keyword arguments are a top-level section (``partition={...}``), a dotted
path with ``__`` (``partition__max_delegated_partitions=2``), a common
backend option applied to every backend (``precision="fp16"`` is
``backends.all.precision``), or a ``partition`` key (``max_delegated_partitions=2``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

from ._backend_options import COMMON_BACKEND_OPTIONS, FIRST_PARTY_BACKENDS, PRECISIONS
from ._errors import ConfigError
from ._options import Option, describe_value, suggest
from ._partition import ON_DEVICE_ERROR, PartitionOptions, default_on_device_error
from ._plugins import backend_option_schema, backend_registry

__all__ = ["Config", "load_config", "SCHEMA", "packaged_configs", "packaged_config_path"]

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: The fixed sections.  ``backend`` and ``backends`` are checked by dedicated code.
SCHEMA: dict[str, dict[str, Option]] = {
    "partition": {
        "max_delegated_partitions": Option.int(
            4, min=0, doc="most partitions per delegate and subgraph (largest kept); 0 = no limit"),
        "min_nodes_per_partition": Option.int(1, min=1, doc="smaller partitions stay on the CPU"),
        "fold_constants": Option.bool(True, doc="evaluate constant-only ops once at prepare"),
        "on_device_error": Option.enum(
            *ON_DEVICE_ERROR, nullable=True, doc="a delegate failing at prepare or invoke: fallback (WARNING, "
            "then its partitions run on the CPU) or raise (DelegateError); null = $LITEGPU_ON_DEVICE_ERROR, "
            "else fallback"),
    },
    "cache": {
        "enabled": Option.bool(True, doc="keep compiled kernels and tuning results between runs"),
        "dir": Option.str(None, nullable=True, doc="cache directory; null = the user cache dir"),
        "model_token": Option.str(None, nullable=True,
                                  doc="key of this model's entries; null = the model's content hash"),
        "max_bytes": Option.int(1 << 30, min=0, nullable=True, doc="size cap, oldest entries evicted; null = none"),
    },
    "autoselect": {
        "policy": Option.enum("latency", "init_time", "memory", doc="what backend: auto optimizes"),
        "time_budget_s": Option.number(10.0, min=0, doc="longest time spent measuring candidates"),
        "tolerance": Option.number(
            0.01, min=0, doc="largest error of a candidate vs the fp32 CPU reference, relative to output range"),
        "precisions": Option.list(Option.enum(*PRECISIONS), ("fp32", "fp16_fp32acc", "fp16"),
                                  doc="precisions autoselect may try"),
        "measure_on_load": Option.bool(
            False, doc="load() measures when no decision is cached (else: first available GPU backend)"),
    },
    "logging": {
        "level": Option.enum(*_LEVELS, nullable=True, normalize=str.upper,
                             doc="level of the 'litegpu' logger; null = leave it to the application"),
        "log_unsupported_ops": Option.bool(True, doc="log one line per op a delegate declines"),
    },
}
_TOP_KEYS = ("backend", "strict", "backends", *SCHEMA)
_ALL = "all"
_AUTO = "auto"


# ----------------------------------------------------------------------------
# Sources and line numbers


@dataclass
class _Source:
    """Where a layer came from, for error messages."""

    label: str  # "app.yaml", "dict passed to litegpu.load", ...
    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)  # key path -> 1-based line
    is_file: bool = False
    kwarg_names: dict[tuple[Any, ...], str] = field(default_factory=dict)

    def where(self, path: tuple[Any, ...]) -> str:
        if self.kwarg_names:
            for n in range(len(path), 0, -1):
                if path[:n] in self.kwarg_names:
                    return f"keyword argument {self.kwarg_names[path[:n]]}"
            return self.label
        if self.is_file:
            for n in range(len(path), -1, -1):
                line = self.lines.get(path[:n])
                if line is not None:
                    return f"{self.label} line {line}"
        return self.label


def _dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def _fail(src: _Source, path: tuple[Any, ...], problem: str) -> ConfigError:
    dotted = _dotted(path)
    where = src.where(path)
    line = None
    if src.is_file:
        for n in range(len(path), -1, -1):
            if path[:n] in src.lines:
                line = src.lines[path[:n]]
                break
    return ConfigError(f"{dotted}: {problem} ({where})", path=dotted, line=line)


# Bounds on what one configuration may hold, so loading any input takes bounded time and memory
# (a 330-byte alias bomb used to take 15 s and 2.2 GB; a deep nest ended in a bare RecursionError).
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_VALUES = 100_000  # values after aliases are expanded


def _safe_loader() -> Any:
    """PyYAML's safe loader, libyaml's C implementation where PyYAML has it: the same nodes, marks and
    errors as the pure-Python one, 20-40x faster (default.yaml, read by every start: 40 ms -> 2 ms)."""
    import yaml

    return yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader


def _check_event_depth(text: str, src: _Source) -> None:
    """Refuse nesting deeper than :data:`MAX_CONFIG_DEPTH` before composing (PyYAML's composer
    recurses once per level), naming the key path where the limit was crossed."""
    import yaml  # imported on first use: not part of ``import litegpu``

    # One frame per open collection: [path, is_mapping, expecting_key, next key or index]
    stack: list[list[Any]] = []

    def child_path() -> tuple[Any, ...]:
        if not stack:
            return ()
        path, is_map, _, cur = stack[-1]
        return path + (cur,)

    def advance(key: Any = None) -> None:
        if not stack:
            return
        frame = stack[-1]
        if frame[1]:
            if frame[2]:
                frame[3] = key if isinstance(key, str) else "<complex key>"
            frame[2] = not frame[2]
        else:
            frame[3] += 1

    try:
        for ev in yaml.parse(text, Loader=_safe_loader()):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                path = child_path()
                if len(stack) >= MAX_CONFIG_DEPTH:
                    line = ev.start_mark.line + 1
                    raise ConfigError(
                        f"{_dotted(path)}: nested deeper than {MAX_CONFIG_DEPTH} levels ({src.label} line {line})",
                        path=_dotted(path), line=line)
                stack.append([path, isinstance(ev, yaml.MappingStartEvent), True, None if isinstance(
                    ev, yaml.MappingStartEvent) else 0])
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                stack.pop()
                advance()
            elif isinstance(ev, yaml.ScalarEvent):
                advance(ev.value)
            elif isinstance(ev, yaml.AliasEvent):
                advance()
    except yaml.YAMLError:
        return  # the composer reports syntax errors with their line


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """Values under ``node`` counting every alias use (memoised: each distinct node once)."""
    import yaml

    known = memo.get(id(node))
    if known is not None:
        return known
    if isinstance(node, (yaml.MappingNode,)):
        n = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        n = 1
    memo[id(node)] = n
    return n


def _check_expansion(node: yaml.Node, src: _Source) -> None:
    import yaml

    memo: dict[int, int] = {}
    if _expanded_size(node, memo) <= MAX_CONFIG_VALUES:
        return
    path: tuple[Any, ...] = ()
    while isinstance(node, yaml.MappingNode):  # name the first key holding too much
        big = next(((k, v) for k, v in node.value if _expanded_size(v, memo) > MAX_CONFIG_VALUES), None)
        if big is None:
            break
        node = big[1]
        path = path + (big[0].value if isinstance(big[0], yaml.ScalarNode) else "<complex key>",)
    line = node.start_mark.line + 1
    raise ConfigError(
        f"{_dotted(path)}: holds more than {MAX_CONFIG_VALUES} values once its aliases are expanded "
        f"({src.label} line {line})", path=_dotted(path), line=line)


def _walk_marks(node: yaml.Node, path: tuple[Any, ...], lines: dict[tuple[Any, ...], int], src: _Source,
                seen_nodes: set[int] | None = None) -> None:
    import yaml

    if seen_nodes is None:
        seen_nodes = set()
    if id(node) in seen_nodes:  # an alias: its lines were recorded at the anchor; walk each node once
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "<complex key>"
            line = key_node.start_mark.line + 1
            if key in seen:
                src.lines.update(lines)
                raise ConfigError(
                    f"{_dotted(path + (key,))}: duplicate key (lines {seen[key]} and {line} of {src.label})",
                    path=_dotted(path + (key,)), line=line,
                )
            seen[key] = line
            lines[path + (key,)] = line
            _walk_marks(value_node, path + (key,), lines, src, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            _walk_marks(item, path + (i,), lines, src, seen_nodes)


def _parse_yaml(text: str, label: str) -> tuple[Any, _Source]:
    import yaml

    src = _Source(label, is_file=True)
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{label} is larger than {MAX_CONFIG_BYTES} bytes: not a litegpu configuration")
    _check_event_depth(text, src)
    try:
        loader = _safe_loader()(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_expansion(node, src)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or str(exc)
        raise ConfigError(f"invalid YAML: {problem} ({label} line {line})", path=None, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML in {label}: {exc}") from None
    except RecursionError:  # bounded above; kept so no input can escape as a bare RecursionError
        raise ConfigError(f"{label}: nested too deeply") from None
    if node is not None:
        src.lines[()] = node.start_mark.line + 1
        _walk_marks(node, (), src.lines, src)
    _check_data_shape(data, src)
    return data, src


def _check_data_shape(data: Any, src: _Source) -> None:
    """The same depth bound for configurations given as Python mappings (iterative walk: a
    5,000-deep dict must not overflow the stack)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    depth_seen: dict[int, int] = {}
    while stack:
        obj, path = stack.pop()
        if not isinstance(obj, (Mapping, list, tuple)):
            continue
        if len(path) >= MAX_CONFIG_DEPTH:
            raise _fail(src, path, f"nested deeper than {MAX_CONFIG_DEPTH} levels")
        if depth_seen.get(id(obj), -1) >= len(path):
            continue
        depth_seen[id(obj)] = len(path)
        items = obj.items() if isinstance(obj, Mapping) else enumerate(obj)
        for k, v in items:
            stack.append((v, path + (k if isinstance(k, (str, int)) else "<complex key>",)))


def packaged_config_dir() -> Path:
    """Directory holding the packaged YAML files (the ``litegpu.configs`` package)."""
    here = Path(__file__).parent / "configs"  # a regular install: no importlib.resources (it imports
    if here.is_dir():                          # tempfile, shutil...: 5-10 ms of every load())
        return here
    import importlib.resources

    return Path(str(importlib.resources.files("litegpu.configs")))


def packaged_configs() -> list[str]:
    """Names of the packaged presets (``default``, ``low-latency``...)."""
    return sorted(p.stem for p in packaged_config_dir().glob("*.yaml"))


def packaged_config_path(name: str) -> Path:
    path = packaged_config_dir() / f"{name}.yaml"
    if not path.is_file():
        names = packaged_configs()
        raise ConfigError(f"no packaged config named {name!r} (packaged: {', '.join(names)}){suggest(name, names)}")
    return path


def _read_file(path: str | os.PathLike[str], label: str | None = None) -> tuple[Any, _Source]:
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {os.fspath(path)} is larger than {MAX_CONFIG_BYTES} bytes: "
                              "not a litegpu configuration")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {os.fspath(path)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {os.fspath(path)}: {exc}") from None
    return _parse_yaml(text, label or os.fspath(path))


# ----------------------------------------------------------------------------
# Validation of one layer


def _installed_backends() -> list[str]:
    return backend_registry().names()


def _check_backend_name(name: Any, src: _Source, path: tuple[Any, ...], allow_auto: bool) -> str:
    if not isinstance(name, str):
        raise _fail(src, path, f"expected a backend name, got {describe_value(name)}")
    if name == _AUTO and allow_auto:
        return name
    # the plugins loaded only for a name to check: the packaged default (``auto``, ``backends: all``)
    # needs none, so that load_delegate's early start (_plugins.registry_for) is not undone by it
    installed = _installed_backends()
    known = [*installed, *(n for n in FIRST_PARTY_BACKENDS if n not in installed)]
    if name in known:
        return name
    extra = [_AUTO] if allow_auto else []
    raise _fail(
        src, path,
        f"unknown backend {name!r} (installed: {', '.join(installed)}; first-party: "
        f"{', '.join(FIRST_PARTY_BACKENDS)}{'; or auto' if allow_auto else ''}){suggest(name, known + extra)}",
    )


def _check_options(
    values: Any, schema: Mapping[str, Option], src: _Source, path: tuple[Any, ...], *, open_keys: bool = False
) -> dict[str, Any]:
    if not isinstance(values, Mapping):
        raise _fail(src, path, f"expected a mapping, got {describe_value(values)}")
    out = {}
    for key, value in values.items():
        kpath = path + (key,)
        if not isinstance(key, str):
            raise _fail(src, kpath, f"key {key!r} is not a string")
        opt = schema.get(key)
        if opt is None:
            close = suggest(key, schema)
            if open_keys and not close:
                out[key] = value  # a not-installed backend's own option: checked once it is installed
                continue
            raise _fail(src, kpath, f"unknown key (valid: {', '.join(schema)}){close}")
        value = opt.prepare(value)
        problem = opt.check(value)
        if problem:
            raise _fail(src, kpath, problem)
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def _validate_layer(data: Any, src: _Source) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise _fail(src, (), f"the configuration must be a mapping, got {describe_value(data)}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = (key,)
        if key not in _TOP_KEYS:
            raise _fail(src, path, f"unknown key (valid: {', '.join(_TOP_KEYS)}){suggest(str(key), _TOP_KEYS)}")
        if key == "backend":
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)):
                raise _fail(src, path, f"expected a backend name, a list of names or auto, got {describe_value(value)}")
            if not items:
                raise _fail(src, path, "the backend list is empty")
            sub = [path + (i,) for i in range(len(items))] if not isinstance(value, str) else [path]
            out[key] = [_check_backend_name(n, src, p, True) for n, p in zip(items, sub, strict=True)]
        elif key == "strict":
            if not isinstance(value, bool):
                raise _fail(src, path, f"expected true or false, got {describe_value(value)}")
            out[key] = value
        elif key == "backends":
            if not isinstance(value, Mapping):
                raise _fail(src, path, f"expected a mapping of backend names to options, got {describe_value(value)}")
            sections: dict[str, dict[str, Any]] = {}
            for name, opts in value.items():
                bpath = path + (name,)
                if opts is None:
                    opts = {}
                if name == _ALL:
                    sections[name] = _check_options(opts, COMMON_BACKEND_OPTIONS, src, bpath)
                    continue
                _check_backend_name(name, src, bpath, False)
                sections[name] = _check_options(
                    opts, backend_option_schema(name), src, bpath, open_keys=name not in _installed_backends())
            out[key] = sections
        else:
            section = value if value is not None else {}
            out[key] = _check_options(section, SCHEMA[key], src, path)
    return out


# ----------------------------------------------------------------------------
# Keyword arguments


_KW_SHORTCUTS: dict[str, tuple[str, ...]] = {
    **{name: ("backends", _ALL, name) for name in COMMON_BACKEND_OPTIONS},
    **{name: ("partition", name) for name in SCHEMA["partition"]},
    "log_unsupported_ops": ("logging", "log_unsupported_ops"),
}


def _kwargs_layer(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], _Source]:
    data: dict[str, Any] = {}
    src = _Source("keyword arguments")
    for name, value in kwargs.items():
        if name in _TOP_KEYS:
            path: tuple[str, ...] = (name,)
        elif "__" in name:
            path = tuple(name.split("__"))
        elif name in _KW_SHORTCUTS:
            path = _KW_SHORTCUTS[name]
        else:
            choices = [*_TOP_KEYS, *_KW_SHORTCUTS]
            raise ConfigError(
                f"{name}: unknown keyword argument (valid: {', '.join(choices)}, or a dotted path written with "
                f"'__' such as partition__max_delegated_partitions){suggest(name, choices)} (keyword argument {name})",
                path=name,
            )
        node = data
        for p in path[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: conflicts with another keyword argument", path=name)
        node[path[-1]] = value
        src.kwarg_names[path] = name
    return data, src


# ----------------------------------------------------------------------------
# Merging and the Config object


def _merge(acc: dict[str, Any], layer: Mapping[str, Any]) -> None:
    for key, value in layer.items():
        if key == "backends":
            backends = acc.setdefault("backends", {})
            if _ALL in value:  # a layer's "all" beats every named section of the layers below
                for section in backends.values():
                    section.update(value[_ALL])
                backends.setdefault(_ALL, {}).update(value[_ALL])
            for name, section in value.items():
                if name != _ALL:
                    backends.setdefault(name, {}).update(section)
        elif isinstance(value, Mapping):
            acc.setdefault(key, {}).update(value)
        else:
            acc[key] = copy.deepcopy(value)


class Config:
    """A validated, merged configuration.

    ``data`` is the merged mapping; ``sources`` the labels of its layers,
    lowest first.  Build one with :func:`load_config`.
    """

    def __init__(self, layers: list[tuple[dict[str, Any], _Source]]):
        self._layers = layers
        merged: dict[str, Any] = {}
        for layer, _ in layers:
            _merge(merged, layer)
        for section, schema in SCHEMA.items():
            block = merged.setdefault(section, {})
            for key, opt in schema.items():
                block.setdefault(key, list(opt.default) if isinstance(opt.default, tuple) else opt.default)
        merged.setdefault("backend", [_AUTO])
        merged.setdefault("strict", False)
        merged.setdefault("backends", {})
        self.data = merged

    @property
    def sources(self) -> list[str]:
        return [src.label for _, src in self._layers]

    def get(self, dotted: str, default: Any = None) -> Any:
        """Value at a dotted path (``"partition.max_delegated_partitions"``)."""
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def strict(self) -> bool:
        """``strict: true``: a requested backend that cannot run is an error, not a fallback."""
        return bool(self.data.get("strict", False))

    @property
    def backends(self) -> list[str]:
        """The ``backend`` preference list (may contain ``auto``)."""
        return list(self.data["backend"])

    def backend_options(self, name: str) -> dict[str, Any]:
        """Options for backend ``name`` as configured: ``backends.all`` < ``backends.<name>``.

        Defaults and the backend's own ``default_options`` are added by
        :func:`litegpu.load_delegate`; the ``cache`` section is included.
        """
        sections = self.data.get("backends", {})
        out = dict(sections.get(_ALL, {}))
        out.update(sections.get(name, {}))
        out["cache"] = dict(self.data["cache"])
        return out

    def partition_options(self) -> PartitionOptions:
        p = self.data["partition"]
        return PartitionOptions(
            max_delegated_partitions=p["max_delegated_partitions"],
            min_nodes_per_partition=p["min_nodes_per_partition"],
            fold_constants=p["fold_constants"],
            on_device_error=p["on_device_error"] or default_on_device_error(),
            log_unsupported_ops=self.data["logging"]["log_unsupported_ops"],
        )

    def with_overrides(self, **kwargs: Any) -> Config:
        """A new Config with one more keyword-argument layer on top."""
        if not kwargs:
            return self
        data, src = _kwargs_layer(kwargs)
        return Config([*self._layers, (_validate_layer(data, src), src)])

    def as_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.data)

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.as_dict(), sort_keys=False)

    def __repr__(self) -> str:
        return f"<litegpu.Config from {' < '.join(self.sources)}>"


def load_config(config: Any = None, **kwargs: Any) -> Config:
    """Build a :class:`Config` from the layers described in the module docstring.

    ``config``: ``None``, a YAML path (``str``/``PathLike``), a packaged preset
    name, a dict, or a :class:`Config` (whose layers are kept; only ``kwargs``
    are added).  ``kwargs``: keyword overrides.  Raises
    :class:`litegpu.ConfigError` on any invalid key or value.
    """
    if isinstance(config, Config):
        return config.with_overrides(**kwargs)
    layers: list[tuple[dict[str, Any], _Source]] = []
    default_path = packaged_config_dir() / "default.yaml"
    if default_path.is_file():
        data, src = _read_file(default_path, "litegpu default.yaml")
        layers.append((_validate_layer(data, src), src))
    env = os.environ.get("LITEGPU_CONFIG", "").strip()
    if env:
        if not Path(env).is_file():
            raise ConfigError(f"LITEGPU_CONFIG names a file that does not exist: {env}")
        data, src = _read_file(env)
        layers.append((_validate_layer(data, src), src))
    if config is not None:
        if isinstance(config, Mapping):
            src = _Source("config dict passed by the application")
            _check_data_shape(config, src)
            layers.append((_validate_layer(dict(config), src), src))
        elif isinstance(config, (str, os.PathLike)):
            text = os.fspath(config)
            is_name = isinstance(config, str) and not Path(text).exists() and "/" not in text \
                and not text.endswith((".yaml", ".yml"))
            path = packaged_config_path(text) if is_name else Path(text)
            data, src = _read_file(path, f"packaged {text}.yaml" if is_name else text)
            layers.append((_validate_layer(data, src), src))
        else:
            raise ConfigError(
                f"config must be a YAML file path, a preset name, a dict or a litegpu.Config, "
                f"got {type(config).__name__}"
            )
    cfg = Config(layers)
    return cfg.with_overrides(**kwargs)
