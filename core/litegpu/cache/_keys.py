"""Cache keys: the model token and the entry key.

An entry is only ever found again under exactly the inputs that produced it.
The key is a SHA-256 over a canonical JSON rendering of *everything* that
could change the bytes a backend writes: the model, the backend and its
version, the device and its driver, litegpu's version, the options that
change generated code, and the partition (its nodes and resolved tensor
shapes and dtypes).  Any difference gives another file name, so a stale entry
is never loaded; it just ages out of the cache by LRU eviction.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from .._delegate import PartitionSpec
from .._ir import Model
from .._records import dataclass  # no compiled methods: a warm start imports this module

__all__ = ["EntryKey", "model_token", "partition_signature", "canonical_json", "source_fingerprint", "FINGERPRINT"]

log = logging.getLogger("litegpu.cache")

# The keys' SHA-256 from CPython's own implementation, as ``random`` takes its SHA-512 (3.12 and later:
# ``_sha2``, before: ``_sha256``): the same digests as ``hashlib.sha256`` without ``import hashlib``, which
# loads and initializes OpenSSL (2.5 ms of the caller's CPU in every warm start on the 2-core CI machine,
# docs/performance.md, eleventh session).  It is slower on large data (350 MB/s against OpenSSL's 1.9 GB/s
# here): what may be large (a source tree's text, an array or bytes in a key) goes to hashlib.
try:
    from _sha2 import sha256 as _sha256  # type: ignore[import-not-found]
except ImportError:
    try:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found, no-redef]
    except ImportError:  # pragma: no cover - another Python implementation
        from hashlib import sha256 as _sha256  # type: ignore[assignment]

try:  # farmhash::Fingerprint64 through a small C extension (wheels for CPython 3.8-3.13)
    import farmhash as _farmhash
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    _farmhash = None

#: Which fingerprint :func:`model_token` computes here: ``"farmhash64"`` (LiteRT's choice,
#: farmhash ``Fingerprint64``) or ``"blake2b64"`` when the ``pyfarmhash`` package is missing.
FINGERPRINT = "farmhash64" if _farmhash is not None else "blake2b64"


def _fingerprint(data: bytes | bytearray | memoryview) -> str:
    if _farmhash is not None:
        # The extension takes only immutable ``bytes``; a bytearray, memoryview or mmap is copied once
        # (about 3 ms for 10 MB, small next to compiling a model).
        raw = data if isinstance(data, bytes) else bytes(data)
        return f"fh64:{_farmhash.fingerprint64(raw):016x}"
    # Fallback: the first 8 bytes of BLAKE2b (hashlib, always present).  A different prefix keeps the two
    # kinds of token from ever meeting: entries written under one are simply misses under the other.
    import hashlib

    return "b2b64:" + hashlib.blake2b(data, digest_size=8).hexdigest()


def model_token(model: bytes | bytearray | memoryview | Model | str | os.PathLike[str], *,
                token: str | None = None) -> str:
    """The token naming a model in cache keys.

    By default the farmhash ``Fingerprint64`` of the model file's bytes (as LiteRT's GPU delegate does),
    written ``"fh64:<16 hex digits>"``; without the ``pyfarmhash`` package a 64-bit BLAKE2b fingerprint
    ``"b2b64:<16 hex digits>"``.  ``model`` is the bytes (or anything exposing the buffer protocol, an
    mmap included), a :class:`~litegpu._ir.Model` (its ``raw`` bytes, else its source file), or a path.

    ``token`` is the ``model_token`` configuration key: when given it is used instead of hashing (an
    application that already names its model versions saves the hash; it must then change the token
    whenever the model changes).  It is returned as ``"user:<token>"`` so it can never collide with a
    computed fingerprint.
    """
    if token is not None:
        if not isinstance(token, str) or not token:
            raise TypeError(f"model_token must be a non-empty string, got {token!r}")
        return "user:" + token
    if isinstance(model, Model):
        if model.raw is not None:
            return _fingerprint(model.raw)
        if model.source is None:
            raise ValueError("model_token: the Model has neither raw bytes nor a source file")
        model = model.source
    if isinstance(model, (str, PurePath)) or hasattr(model, "__fspath__"):
        return _fingerprint(Path(model).read_bytes())
    return _fingerprint(model)


def _place(where: Any) -> str:
    """The readable place of a value in a key: ``where`` is a name or (parent place, key or index),
    built into text only for an error (a warm start canonicalises thousands of values)."""
    parts: list[str] = []
    while isinstance(where, tuple):
        where, step = where
        parts.append(f"[{step}]" if isinstance(step, int) else f".{step}")
    return str(where) + "".join(reversed(parts))


def _canon(value: Any, where: Any) -> Any:
    """``value`` as plain JSON data, one spelling per value (tuples become lists, numpy scalars
    Python numbers, ...).  Unknown types are refused: guessing a rendering could merge two keys.
    ``where`` names the value for errors (see :func:`_place`)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # most of a key: as they are
        return value
    if kind is dict or kind is list or kind is tuple:  # the rest of it, before the isinstance chain
        return _canon_mapping(value, where) if kind is dict else [_canon(v, (where, i)) for i, v in enumerate(value)]
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return _canon(value.value, where)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        # Non-finite floats get a tagged spelling (plain JSON has none); -0.0 and 0.0 stay distinct.
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, np.generic):
        return _canon(value.item(), where)
    if isinstance(value, np.ndarray):
        import hashlib  # (large data: OpenSSL's SHA-256, see _sha256)

        arr = np.ascontiguousarray(value)
        return {"ndarray": {"dtype": arr.dtype.str, "shape": list(arr.shape),
                            "sha256": hashlib.sha256(arr.tobytes()).hexdigest()}}
    if isinstance(value, (bytes, bytearray, memoryview)):
        import hashlib

        return {"bytes_sha256": hashlib.sha256(value).hexdigest()}
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return _canon_mapping(value, where)
    if isinstance(value, (list, tuple)):
        return [_canon(v, (where, i)) for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [_canon(v, where) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    raise TypeError(f"cache key: {_place(where)} has a value of type {type(value).__name__} ({value!r}) "
                    "that has no canonical form; pass plain numbers, strings, lists or dicts")


def _canon_mapping(value: Mapping[Any, Any], where: Any) -> dict[str, Any]:
    out = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise TypeError(f"cache key: {_place(where)} has a non-string key {k!r}")
        out[k] = _canon(v, (where, k))
    return out


def canonical_json(value: Any) -> str:
    """The one JSON spelling of ``value``: sorted keys, no spaces, ASCII only."""
    return json.dumps(_canon(value, "value"), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def partition_signature(spec: PartitionSpec) -> dict[str, Any]:
    """What identifies a partition within its model: its subgraph, nodes (with their op names and
    versions, for readable descriptions), boundary tensors, which outputs go to the host, and the
    resolved shape and dtype of every tensor it touches (these change with ``resize_tensor_input``
    while the model bytes do not)."""
    ops = spec.subgraph.operators
    tensors = {}
    for idx, t in sorted(spec.tensors.items()):
        tensors[str(idx)] = [t.dtype, [int(d) for d in t.shape]]
    return {
        "subgraph": int(spec.subgraph.index),
        "nodes": [int(i) for i in spec.node_indices],
        "ops": [f"{ops[i].name}/{ops[i].version}" for i in spec.node_indices],
        "inputs": [int(i) for i in spec.inputs],
        "outputs": [int(i) for i in spec.outputs],
        "host_outputs": sorted(int(i) for i in spec.host_outputs),
        "tensors": tensors,
    }


def _litegpu_version() -> str:
    from .._version import __version__

    return __version__


#: the source files whose text decides what a backend compiles: Python, kernel templates, configs
_SOURCE_SUFFIXES = (".py", ".lgk", ".yaml", ".glsl", ".wgsl", ".cl")
_source_hashes: dict[str, str] = {}


#: memo of :func:`_tree_hash` across processes, in the default cache directory (beside the entries,
#: checked like them: only a directory the user alone can write is trusted)
_MEMO_NAME = "source-hashes.json"
#: files changed less than this long ago make a tree "racy" (not memoised; see :func:`_tree_hash`)
_RACY_NS = 2_000_000_000


def _source_files(bases: list[Path]) -> list[tuple[str, str]]:
    """(file, its path relative to its base, ``/``-separated) of every source file under ``bases``,
    sorted per base (plain strings: this runs in every warm start)."""
    out: list[tuple[str, str]] = []
    for base in bases:
        found: list[tuple[str, str]] = []
        todo = [(os.fspath(base), "")]
        while todo:
            path, rel = todo.pop()
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            for e in entries:
                if e.is_dir():
                    if e.name != "__pycache__":
                        todo.append((e.path, f"{rel}{e.name}/"))
                elif e.name.endswith(_SOURCE_SUFFIXES):
                    found.append((e.path, rel + e.name))
        out += sorted(found, key=lambda f: f[1].split("/"))
    return out


def _memo_path(memo_dir: Path | None) -> Path | None:
    from ._dirs import check_dir, default_cache_dir

    d = default_cache_dir() if memo_dir is None else Path(memo_dir)
    return d / _MEMO_NAME if check_dir(d, create=False).ok else None


def _read_memo(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        memo = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _write_memo(path: Path | None, memo: dict[str, Any]) -> None:
    if path is None or not path.parent.is_dir():
        return
    tmp = path.with_name(f".{_MEMO_NAME}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(memo, f)
        os.replace(tmp, path)
    except OSError:  # a read-only or full disk: the memo is only a shortcut
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _tree_hash(bases: list[Path], memo_dir: Path | None = None) -> str:
    """SHA-256 over the source files under ``bases`` (a source checkout, about 20 ms for litegpu and
    a backend).  Memoised across processes by the files' names, sizes, inodes and modification and
    change times (a few ms of ``stat`` calls): an edit changes a file's times, so it is read again.
    As git does with its index, a tree with a file changed in the last seconds is not memoised: file
    times come from a coarse clock, and a second edit within the same tick would keep them."""
    import time

    files = _source_files(bases)
    stamp = _sha256()
    newest = 0
    for path, _rel in files:
        st = os.stat(path)
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
        stamp.update(f"{path}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0".encode())
    stamp_digest = stamp.hexdigest()
    # one record per source tree (its bases), holding the stamp it was hashed at: an edit replaces it
    tree = os.pathsep.join(str(b) for b in bases)
    memo_path = _memo_path(memo_dir)
    memo = _read_memo(memo_path)
    got = memo.get(tree)
    if isinstance(got, list) and len(got) == 2 and got[0] == stamp_digest and isinstance(got[1], str):
        return got[1]
    import hashlib  # the tree's text (megabytes, read when the memo is stale): OpenSSL's SHA-256, see _sha256

    h = hashlib.sha256()
    for path, rel in files:
        h.update(rel.encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    digest = h.hexdigest()
    if time.time_ns() - newest > _RACY_NS:
        memo[tree] = [stamp_digest, digest]
        _write_memo(memo_path, memo)
    return digest


def _installed_hash(root: str, base: Path) -> str | None:
    """For a package installed from a wheel: SHA-256 over the ``path,sha256`` lines of its source
    files in the ``RECORD`` beside it (the wheel's own hashes, the same on every machine that
    installed it; one small file read instead of every source).  None for a source tree or an
    editable install (its RECORD does not list the package's files)."""
    lines = []
    try:  # <root>-*.dist-info/RECORD, by a listing (Path.glob compiles a pattern: milliseconds at every start)
        infos = sorted(e for e in os.listdir(base.parent) if e.startswith(f"{root}-") and e.endswith(".dist-info"))
    except OSError:
        infos = []
    for record in (base.parent / e / "RECORD" for e in infos):
        try:
            text = record.read_text(encoding="utf-8")
        except OSError:
            continue
        prefix = f"{root}/"
        for line in text.splitlines():
            path, _, rest = line.partition(",")
            # (string tests, not a Path per line: a RECORD lists hundreds of files, read at every start)
            if path.startswith(prefix) and path.endswith(_SOURCE_SUFFIXES) and rest.startswith("sha256="):
                lines.append(f"{path},{rest.partition(',')[0]}")
    if not any(ln.startswith(f"{root}/__init__.py,") for ln in lines):
        return None
    return _sha256("\n".join(sorted(lines)).encode()).hexdigest()


def source_fingerprint(*modules: str, memo_dir: Path | None = None) -> str:
    """16 hex digits of SHA-256 over the source files of ``litegpu`` and of the packages holding
    ``modules`` (e.g. a backend's delegate module), computed once per process.

    The version number alone does not change between two checkouts of the same release, or between
    an editable install and the edit that follows; an entry compiled by other code must not be
    loaded (it would run other kernels, or numbers rounded another way).  The content, not the files'
    times, so that entries exported to another machine with the same code (Ray actors) still hit.
    An installed wheel is fingerprinted by the file hashes its ``RECORD`` lists (under 1 ms), a
    source tree by reading its files, memoised across processes in ``memo_dir`` (a cache directory;
    default :func:`~litegpu.cache.default_cache_dir`) by the files' stat data."""
    import importlib.util

    roots = ["litegpu", *(m.split(".")[0] for m in modules)]
    digest = _sha256()
    for root in dict.fromkeys(roots):
        if root not in _source_hashes:
            spec = importlib.util.find_spec(root)
            bases = [Path(b) for b in (spec.submodule_search_locations or [])] if spec else []
            _source_hashes[root] = next(filter(None, (_installed_hash(root, b) for b in bases)), None) or \
                _tree_hash(bases, memo_dir)
        digest.update(f"{root}:{_source_hashes[root]};".encode())
    return digest.hexdigest()[:16]


def _ranges(nodes: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``."""
    if not nodes:
        return "-"
    parts, start, prev = [], nodes[0], nodes[0]
    for n in nodes[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


@dataclass(frozen=True, eq=False)
class EntryKey:
    """Everything that decides what a backend's compiled payload for one partition is.

    ``model_token``: from :func:`model_token`.  ``backend``/``backend_version``: the backend's name
    and version; bump the version (or add ``+payloadN``) whenever the payload layout or the code
    generator changes.  ``device``/``driver_version``: the device's name and its driver's version as
    the API reports them.  ``options``: every option that changes generated code (precision, tuning,
    quantization simulation, workgroup overrides...), as plain JSON-like data.  ``partition``: a
    :class:`~litegpu.PartitionSpec` (turned into :func:`partition_signature`) or an equivalent dict.
    ``litegpu_version`` defaults to the running litegpu.

    Two keys are equal when their canonical JSON is; :attr:`digest` (SHA-256 of it) names the file.
    """

    model_token: str
    backend: str
    backend_version: str
    device: str
    driver_version: str
    options: Mapping[str, Any] = field(default_factory=dict)
    partition: Mapping[str, Any] | PartitionSpec = field(default_factory=dict)
    litegpu_version: str = field(default_factory=_litegpu_version)
    #: :func:`source_fingerprint` of the code that compiled the payload (litegpu's, by default; a
    #: backend adds its own package)
    code: str = field(default_factory=source_fingerprint)
    #: The model's file name, for people reading ``litegpu cache list``; not part of the key (the same
    #: model under another name is the same entry).  Empty: taken from the partition's model, if read
    #: from a file.
    model_name: str = ""

    def __post_init__(self) -> None:
        if not self.model_name and isinstance(self.partition, PartitionSpec):
            source = getattr(getattr(self.partition, "model", None), "source", None)
            if isinstance(source, str) and source:
                object.__setattr__(self, "model_name", os.path.basename(source))
        for name in ("model_token", "backend", "backend_version", "device", "driver_version",
                     "litegpu_version", "code"):
            v = getattr(self, name)
            if not isinstance(v, str):
                raise TypeError(f"EntryKey.{name} must be a string, got {type(v).__name__}")
        if not self.backend or not self.model_token:
            raise ValueError("EntryKey needs a backend name and a model token")
        part = self.partition
        if isinstance(part, PartitionSpec):
            part = partition_signature(part)
        if not isinstance(part, Mapping) or not isinstance(self.options, Mapping):
            raise TypeError("EntryKey.options and EntryKey.partition must be mappings")
        fields = {
            "model_token": self.model_token,
            "backend": self.backend,
            "backend_version": self.backend_version,
            "device": self.device,
            "driver_version": self.driver_version,
            "litegpu_version": self.litegpu_version,
            "code": self.code,
            "options": self.options,
            "partition": part,
        }
        canon = _canon(fields, "key")
        text = json.dumps(canon, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        object.__setattr__(self, "_fields", canon)
        object.__setattr__(self, "_json", text)
        object.__setattr__(self, "_digest", _sha256(text.encode("ascii")).hexdigest())

    # -- identity -------------------------------------------------------------------------------
    @property
    def digest(self) -> str:
        """SHA-256 (hex) of :meth:`canonical_json`."""
        return self._digest  # type: ignore[attr-defined]

    def canonical(self) -> dict[str, Any]:
        """The key's fields as plain JSON data (a fresh copy)."""
        return json.loads(self._json)  # type: ignore[attr-defined]

    def canonical_json(self) -> str:
        return self._json  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EntryKey) and other._json == self._json  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._digest)  # type: ignore[attr-defined]

    # -- words ----------------------------------------------------------------------------------
    def describe(self) -> str:
        """One line for people: ``opencl 0.1.0 on NVIDIA H100 (driver 550.54), model fh64:...,
        subgraph 0 nodes 0-12 (13 ops), options precision=fp16, litegpu 0.1.0``."""
        return describe_fields(self._fields)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"EntryKey({self.describe()}; {self.digest[:16]})"


def describe_fields(f: Mapping[str, Any]) -> str:
    """:meth:`EntryKey.describe` from the canonical fields (also used on headers read from disk)."""
    part = f.get("partition") or {}
    nodes = part.get("nodes") if isinstance(part, Mapping) else None
    if isinstance(nodes, list) and all(isinstance(n, int) for n in nodes):
        where = f"subgraph {part.get('subgraph', '?')} nodes {_ranges(nodes)} ({len(nodes)} ops)"
    else:
        where = f"partition {canonical_json(part)[:60]}"
    opts = f.get("options") or {}
    opt_text = " ".join(f"{k}={v if isinstance(v, str) else canonical_json(v)}" for k, v in sorted(opts.items())) if opts else "defaults"
    driver = f" (driver {f.get('driver_version')})" if f.get("driver_version") else ""
    return (f"{f.get('backend')} {f.get('backend_version')} on {f.get('device') or '?'}{driver}, "
            f"model {f.get('model_token')}, {where}, options {opt_text}, litegpu {f.get('litegpu_version')}")
