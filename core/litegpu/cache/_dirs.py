"""Where the cache lives and whether that place can be trusted.

A cache entry is code the GPU will run, so the directory must be one that only the current user can
write: a directory another user (or a group) can write to could be fed a crafted entry.  Such a
directory is refused -- caching turns off with a warning, it is never an error for the application.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["default_cache_dir", "check_dir", "DirState"]

DIR_MODE = 0o700
FILE_MODE = 0o600


def default_cache_dir() -> Path:
    """The ``LITEGPU_CACHE_DIR`` environment variable if set, else
    ``platformdirs.user_cache_dir("litegpu")/delegates`` (``~/.cache/litegpu/delegates`` on Linux)."""
    env = os.environ.get("LITEGPU_CACHE_DIR", "").strip()
    if env:
        return Path(os.path.expanduser(env))
    import platformdirs

    return Path(platformdirs.user_cache_dir("litegpu")) / "delegates"


class DirState:
    """``ok``: usable.  ``exists``: it is there (a missing directory is an empty cache for reads).
    ``reason``: why it is refused, in words.  (A plain class: creating a dataclass at import costs a
    warm start about a millisecond.)"""

    __slots__ = ("path", "ok", "exists", "reason")

    def __init__(self, path: Path, ok: bool, exists: bool, reason: str = "") -> None:
        self.path, self.ok, self.exists, self.reason = path, ok, exists, reason

    def __repr__(self) -> str:
        return f"DirState(path={self.path!r}, ok={self.ok!r}, exists={self.exists!r}, reason={self.reason!r})"


def _make_dirs(path: Path) -> None:
    """Create ``path`` and any missing parents with mode 0700 (``os.makedirs`` applies the mode to the
    last component only and lets the umask weaken it)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:  # another process made it meanwhile: it is checked below like any other
            continue
        os.chmod(d, DIR_MODE)


def check_dir(path: Path, *, create: bool) -> DirState:
    """Inspect (and with ``create`` make) the cache directory."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not create:
            return DirState(path, True, False)
        try:
            _make_dirs(path)
            st = os.stat(path)
        except OSError as e:
            return DirState(path, False, False, f"cannot create it ({e.strerror or e})")
    except OSError as e:
        return DirState(path, False, False, f"cannot inspect it ({e.strerror or e})")
    if not stat.S_ISDIR(st.st_mode):
        return DirState(path, False, True, "it is not a directory")
    if not hasattr(os, "getuid"):  # Windows: ownership and modes are ACLs, which this check does not model
        return DirState(path, True, True)
    uid = os.getuid()
    if st.st_uid != uid:
        return DirState(path, False, True, f"it is owned by uid {st.st_uid}, not by the current user (uid {uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return DirState(path, False, True,
                        f"it is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                        f"chmod 700 it to enable the cache")
    return DirState(path, True, True)
