"""DelegateCache: compiled delegate payloads on disk, keyed by :class:`EntryKey`.

Rules kept here:

* never an exception for the application: an unusable directory turns caching off with a warning, an
  unreadable or invalid entry is a miss with a warning (and is replaced by the next store), a failed
  write is a warning and ``store`` returns ``None``;
* nothing stale or foreign is ever returned: the file must parse, its checksum match, and the key
  recorded inside must equal the key asked for;
* writes are atomic (private temp file in the same directory, fsync, ``os.replace``), so concurrent
  processes preparing the same model each succeed and readers see either the old or the new entry;
* the directory is capped at ``max_bytes``; least recently used entries go first.  "Used" is the file's
  mtime, set explicitly (in ns) on store and on every hit: atime is not trusted, since ``noatime`` /
  ``relatime`` mounts freeze it and any reader (a backup, ``cache list`` under ``strictatime``) moves it.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

from .._errors import CacheError
from .._records import dataclass  # no compiled methods: a warm start imports this module
from ._dirs import FILE_MODE, check_dir, default_cache_dir
from ._format import CHECKSUM_SIZE, FORMAT_VERSION, decode, encode, read_header
from ._keys import FINGERPRINT, EntryKey, describe_fields

__all__ = ["DelegateCache", "EntryInfo", "CacheStats", "DEFAULT_MAX_BYTES", "ENTRY_SUFFIX"]

log = logging.getLogger("litegpu.cache")

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB
ENTRY_SUFFIX = ".lgc"
_ENTRY_RE = re.compile(r"^[a-z0-9_.-]{1,32}-[0-9a-f]{64}\.lgc$")
_TEMP_RE = re.compile(r"^\..+\.tmp$")
_STALE_TEMP_S = 3600  # a temp file this old belongs to a writer that died
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _file_prefix(backend: str) -> str:
    safe = re.sub(r"[^a-z0-9_.-]", "_", backend.lower())[:32]
    return safe or "backend"


@dataclass
class CacheStats:
    """Counters of one :class:`DelegateCache` object (this process only)."""

    hits: int = 0
    misses: int = 0
    invalid: int = 0  # entries found but refused (corrupt, foreign, other key, unreadable)
    stores: int = 0
    store_failures: int = 0
    evictions: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


@dataclass(frozen=True)
class EntryInfo:
    """One entry file as :meth:`DelegateCache.entries` sees it."""

    path: Path
    size: int
    last_used: float  # unix seconds
    created: float | None = None
    key_digest: str = ""
    backend: str = ""
    model_name: str = ""  # the model's file name when it was stored from a file; "" if unknown
    model_token: str = ""
    precision: str = ""
    ops: int | None = None  # nodes in the partition
    description: str = ""
    litegpu_version: str = ""
    sections: dict[str, int] = field(default_factory=dict)  # name -> bytes
    valid: bool = True
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def _key_summary(key: Any) -> dict[str, Any]:
    """Model token, precision and op count from a stored key (whatever a foreign header holds)."""
    if not isinstance(key, Mapping):
        return {}
    opts, part = key.get("options"), key.get("partition")
    nodes = part.get("nodes") if isinstance(part, Mapping) else None
    return {"model_token": str(key.get("model_token") or ""),
            "precision": str(opts.get("precision") or "") if isinstance(opts, Mapping) else "",
            "ops": len(nodes) if isinstance(nodes, list) else None}


class DelegateCache:
    """A directory of compiled delegate payloads.

    ``dir``: the cache directory (the ``cache.dir`` configuration key); ``None`` means
    :func:`default_cache_dir`.  It is created (mode 0700) on the first store.  ``max_bytes``: size cap
    of all entries together (``None``: no cap).  ``enabled=False`` makes every call a no-op miss.
    """

    def __init__(self, dir: str | os.PathLike[str] | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES,
                 enabled: bool = True):
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes < 0):
            raise ValueError(f"max_bytes must be a non-negative integer or None, got {max_bytes!r}")
        self.dir = Path(os.path.expanduser(os.fspath(dir))) if dir is not None else default_cache_dir()
        self.max_bytes = max_bytes
        self.enabled = bool(enabled)
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._last_touch = 0
        self._warned: set[str] = set()

    # -- directory --------------------------------------------------------------------------------
    def _usable(self, *, create: bool) -> bool:
        """True when the directory may be used now (re-checked on every call: a fixed mode re-enables
        the cache, a broken one disables it)."""
        if not self.enabled:
            return False
        st = check_dir(self.dir, create=create)
        if st.ok:
            return True
        self._warn_once(f"litegpu cache: not using {self.dir}: {st.reason}; caching is off")
        return False

    def _warn_once(self, msg: str) -> None:
        if msg not in self._warned:
            self._warned.add(msg)
            log.warning(msg)

    def path_for(self, key: EntryKey) -> Path:
        """Where ``key``'s entry lives (whether or not it exists)."""
        return self.dir / f"{_file_prefix(key.backend)}-{key.digest}{ENTRY_SUFFIX}"

    def _count(self, **delta: int) -> None:
        with self._lock:
            for k, v in delta.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _touch(self, path: Path) -> None:
        """Mark ``path`` used now.  Times are set explicitly in ns and strictly increase within this
        object, because file times taken by the kernel tick in jiffies and would tie."""
        with self._lock:
            now = max(time.time_ns(), self._last_touch + 1)
            self._last_touch = now
        try:
            os.utime(path, ns=(now, now), follow_symlinks=False)
        except OSError:  # gone (evicted by another process) or read-only medium: LRU order only
            pass

    # -- read -------------------------------------------------------------------------------------
    def _invalid(self, path: Path, why: str) -> None:
        self._count(invalid=1, misses=1)
        log.warning("litegpu cache: ignoring %s: %s (it will be rewritten on the next store)", path, why)

    def load(self, key: EntryKey, *, views: bool = False) -> dict[str, bytes] | dict[str, memoryview] | None:
        """The sections stored under ``key``, or ``None`` (missing, invalid, caching off).
        ``views``: read-only memoryviews into the one buffer read from the file (no copy per section;
        they keep that buffer alive) instead of ``bytes``."""
        if not isinstance(key, EntryKey):
            raise TypeError(f"load() needs an EntryKey, got {type(key).__name__}")
        if not self._usable(create=False):
            if self.enabled:
                self._count(misses=1)
            return None
        path = self.path_for(key)
        entry, size = self._read_checked(path, views)
        if entry is None:
            return None
        head = entry.header
        if head.get("key_digest") != key.digest or head.get("key") != key.canonical():
            self._invalid(path, "it was written for another key")
            return None
        self._touch(path)
        self._count(hits=1, bytes_read=size)
        return entry.sections

    def _read_checked(self, path: Path, views: bool = False) -> tuple[Any, int]:
        """The decoded entry at ``path`` and its size, or ``(None, 0)`` (a miss, or refused with a
        warning): no symbolic link, a regular file owned by this user that neither its group nor
        others can write (a 0666 entry in the private folder was loaded before), within the cap,
        intact."""
        try:
            fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError:
            self._count(misses=1)
            return None, 0
        except OSError as e:
            self._invalid(path, "it is a symbolic link" if os.path.islink(path) else f"cannot open it ({e})")
            return None, 0
        try:
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    self._invalid(path, "it is not a regular file")
                    return None, 0
                if hasattr(os, "getuid") and st.st_uid != os.getuid():
                    self._invalid(path, f"it is owned by uid {st.st_uid}, not by the current user")
                    return None, 0
                if hasattr(os, "getuid") and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    self._invalid(path, f"it is writable by its group or by others (mode "
                                        f"{stat.S_IMODE(st.st_mode):04o}; entries are written 0600)")
                    return None, 0
                if self.max_bytes is not None and st.st_size > self.max_bytes:
                    self._invalid(path, f"it is larger ({st.st_size} bytes) than the cache cap")
                    return None, 0
                # all but the checksum in one read, the checksum in another: the checksum is then
                # computed over the first read as it is (no copy of the entry's megabytes)
                buf = f.read(max(st.st_size - CHECKSUM_SIZE, 0))
                trailer = f.read()
        except OSError as e:
            self._invalid(path, f"cannot read it ({e})")
            return None, 0
        try:
            return decode(buf, views=views, trailer=trailer), len(buf) + len(trailer)
        except CacheError as e:
            self._invalid(path, str(e))
        except Exception as e:  # noqa: BLE001 - a reader bug must still not take the application down
            self._invalid(path, f"unreadable ({type(e).__name__}: {e})")
        return None, 0

    def load_all(self, backend: str) -> list[tuple[Path, dict[str, Any], dict[str, bytes]]]:
        """``(path, header, sections)`` of every valid entry of ``backend`` (whatever its key), with the
        same checks as :meth:`load`; for records such as the auto-selection decisions, which are
        listed rather than looked up."""
        if not self._usable(create=False):
            return []
        want = _file_prefix(backend)
        out = []
        for p, _ in self._scan():
            if p.name[: -len(ENTRY_SUFFIX)].rsplit("-", 1)[0] != want:
                continue
            entry, _size = self._read_checked(p)
            if entry is not None and entry.header.get("backend") == backend:
                out.append((p, entry.header, entry.sections))
        return out

    # -- write ------------------------------------------------------------------------------------
    def store(self, key: EntryKey, sections: Mapping[str, bytes | bytearray | memoryview]) -> Path | None:
        """Write ``sections`` under ``key`` (replacing any entry there); evict least recently used
        entries down to ``max_bytes``.  Return the entry's path, or ``None`` when nothing was stored."""
        if not isinstance(key, EntryKey):
            raise TypeError(f"store() needs an EntryKey, got {type(key).__name__}")
        if not isinstance(sections, Mapping):
            raise TypeError(f"sections must be a mapping of name -> bytes, got {type(sections).__name__}")
        for name, data in sections.items():  # checked even when caching is off: a backend bug shows early
            if not isinstance(name, str) or not name or not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"sections must map non-empty str names to bytes; bad item {name!r}")
        if not self._usable(create=True):
            return None
        from .._version import __version__

        data = encode({"key": key.canonical(), "key_digest": key.digest, "backend": key.backend,
                       "created": time.time(), "litegpu_version": __version__,
                       "model_name": key.model_name}, sections)
        path = self.path_for(key)
        if self.max_bytes is not None and len(data) > self.max_bytes:
            self._count(store_failures=1)
            log.warning("litegpu cache: not storing %s: the entry (%d bytes) is larger than the cache cap "
                        "(%d bytes)", key.describe(), len(data), self.max_bytes)
            return None
        if not self._write_atomic(path, data):
            return None
        self._touch(path)
        self._count(stores=1, bytes_written=len(data))
        self._evict(keep=path)
        return path

    def _write_atomic(self, path: Path, data: bytes) -> bool:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, FILE_MODE)
            try:
                os.fchmod(fd, FILE_MODE)  # the umask can only narrow the mode; this pins it exactly
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            self._count(store_failures=1)
            log.warning("litegpu cache: could not write %s: %s", path, e)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        try:  # make the rename itself durable; not all filesystems allow fsync on a directory
            dfd = os.open(path.parent, os.O_RDONLY | _O_CLOEXEC)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
        return True

    # -- housekeeping -----------------------------------------------------------------------------
    def _scan(self, *, reap_temps: bool = False) -> list[tuple[Path, os.stat_result]]:
        """Entry files (by name) with their lstat; optionally delete temp files of dead writers."""
        out = []
        try:
            names = os.listdir(self.dir)
        except OSError:
            return out
        now = time.time()
        for name in names:
            p = self.dir / name
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if _ENTRY_RE.match(name) and stat.S_ISREG(st.st_mode):
                out.append((p, st))
            elif reap_temps and _TEMP_RE.match(name) and now - st.st_mtime > _STALE_TEMP_S:
                try:
                    os.unlink(p)
                except OSError:
                    pass
        return out

    def _evict(self, keep: Path) -> None:
        if self.max_bytes is None:
            return
        files = self._scan(reap_temps=True)
        total = sum(st.st_size for _, st in files)
        for p, st in sorted(files, key=lambda f: (f[1].st_mtime_ns, f[0].name)):
            if total <= self.max_bytes:
                break
            if p == keep:
                continue
            try:
                os.unlink(p)
            except FileNotFoundError:  # another process evicted it first: it is gone all the same
                pass
            except OSError as e:
                log.warning("litegpu cache: could not evict %s: %s", p, e)
                continue
            total -= st.st_size
            self._count(evictions=1)
            log.debug("litegpu cache: evicted %s (%d bytes)", p, st.st_size)

    def entries(self, *, verify: bool = False) -> list[EntryInfo]:
        """Every entry file, most recently used first.  Only headers are read unless ``verify``, which
        also checks each file's checksum and section table."""
        if not self._usable(create=False):
            return []
        infos = []
        for p, st in self._scan():
            base = {"path": p, "size": st.st_size, "last_used": st.st_mtime_ns / 1e9}
            try:
                fd = os.open(p, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
                with os.fdopen(fd, "rb") as f:
                    head = decode(f.read()).header if verify else read_header(f, st.st_size)
                created = head.get("created")
                info = EntryInfo(
                    **base,
                    created=float(created) if isinstance(created, (int, float)) else None,
                    key_digest=str(head.get("key_digest", "")),
                    backend=str(head.get("backend", "")),
                    model_name=str(head.get("model_name") or ""),
                    **_key_summary(head["key"]),
                    description=describe_fields(head["key"]),
                    litegpu_version=str(head.get("litegpu_version", "")),
                    sections={str(s.get("name")): int(s.get("size", 0)) for s in head.get("sections", [])},
                )
            except (OSError, CacheError) as e:
                info = EntryInfo(**base, valid=False, problem=str(e))
            except Exception as e:  # noqa: BLE001 - a crafted header must not break a listing
                info = EntryInfo(**base, valid=False, problem=f"{type(e).__name__}: {e}")
            infos.append(info)
        infos.sort(key=lambda i: (-i.last_used, i.path.name))
        return infos

    def info(self) -> dict[str, Any]:
        """The directory, its state, totals per backend and this object's counters."""
        state = check_dir(self.dir, create=False)
        entries = self.entries() if self.enabled and state.ok else []
        backends: dict[str, int] = {}
        for e in entries:
            backends[e.backend or "?"] = backends.get(e.backend or "?", 0) + 1
        reason = "" if self.enabled and state.ok else ("disabled by configuration" if not self.enabled
                                                      else state.reason)
        return {
            "dir": str(self.dir),
            "enabled": self.enabled and state.ok,
            "reason": reason,
            "exists": state.exists,
            "max_bytes": self.max_bytes,
            "entries": len(entries),
            "bytes": sum(e.size for e in entries),
            "invalid": sum(not e.valid for e in entries),
            "backends": backends,
            "format_version": FORMAT_VERSION,
            "fingerprint": FINGERPRINT,
            "stats": asdict(self.stats),
        }

    def remove(self, key: EntryKey) -> bool:
        """Delete ``key``'s entry; True when there was one."""
        if not self._usable(create=False):
            return False
        try:
            os.unlink(self.path_for(key))
            return True
        except FileNotFoundError:
            return False
        except OSError as e:
            log.warning("litegpu cache: could not remove %s: %s", self.path_for(key), e)
            return False

    def clear(self, backend: str | None = None, *, keep: str | None = None) -> int:
        """Delete every entry (or only ``backend``'s; never ``keep``'s) and stale temp files; return how
        many entries went.  Files that are not cache entries are left alone."""
        if not self._usable(create=False):
            return 0
        want = None if backend is None else _file_prefix(backend)
        spare = None if keep is None else _file_prefix(keep)
        n = 0
        for p, _ in self._scan(reap_temps=True):
            prefix = p.name[: -len(ENTRY_SUFFIX)].rsplit("-", 1)[0]
            if (want is not None and prefix != want) or prefix == spare:
                continue
            try:
                os.unlink(p)
                n += 1
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("litegpu cache: could not remove %s: %s", p, e)
        return n

    # -- moving entries between machines ----------------------------------------------------------
    def export_entries(self, model_token: str, backend: str | None = None) -> dict[str, bytes]:
        """The entry files of one model (``model_token``, optionally one backend), by file name, for
        :meth:`import_entries` in another process or on another machine (``litegpu.batch`` sends a
        model prepared once to every actor this way).  Invalid files are left out."""
        out: dict[str, bytes] = {}
        if not self._usable(create=False):
            return out
        for p, st in self._scan():
            if self.max_bytes is not None and st.st_size > self.max_bytes:
                continue
            try:
                fd = os.open(p, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
                with os.fdopen(fd, "rb") as f:
                    buf = f.read()
                head = decode(buf).header
            except (OSError, CacheError):
                continue
            key = head.get("key") or {}
            if key.get("model_token") == model_token and (backend is None or key.get("backend") == backend):
                out[p.name] = buf
        return out

    def import_entries(self, files: Mapping[str, bytes]) -> int:
        """Write entry files from :meth:`export_entries` into this directory; return how many were
        written.  Each is checked like a load (name, format, checksum, key digest matching the name)
        and written atomically; one already present is kept.  A later ``load`` still compares the full
        key, so an entry for another device or driver is simply never used."""
        if not files or not self._usable(create=True):
            return 0
        n = 0
        for name, buf in files.items():
            if not _ENTRY_RE.match(name):
                log.warning("litegpu cache: not importing %r: not an entry file name", name)
                continue
            try:
                head = decode(buf).header
            except CacheError as e:
                log.warning("litegpu cache: not importing %s: %s", name, e)
                continue
            digest = name[: -len(ENTRY_SUFFIX)].rsplit("-", 1)[1]
            if head.get("key_digest") != digest:
                log.warning("litegpu cache: not importing %s: it holds another key", name)
                continue
            path = self.dir / name
            if os.path.lexists(path) or not self._write_atomic(path, bytes(buf)):
                continue
            self._touch(path)
            self._count(stores=1, bytes_written=len(buf))
            n += 1
        if n:
            self._evict(keep=path)
        return n

    def __repr__(self) -> str:
        return f"DelegateCache({str(self.dir)!r}, max_bytes={self.max_bytes}, enabled={self.enabled})"
