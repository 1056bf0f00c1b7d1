"""A valid ``XDG_RUNTIME_DIR`` before a GPU driver probes its window-system platforms.

Mesa's Wayland/EGL platform code (reached when wgpu enumerates its OpenGL and Vulkan
adapters) prints ``error: XDG_RUNTIME_DIR is invalid or not set in the environment.`` once
per probe on stderr when the variable is missing, which is the normal state in containers,
CI jobs and ``sudo`` shells.  Compute never uses that directory, so rather than letting
the driver print noise the user cannot act on, a backend calls
:func:`ensure_xdg_runtime_dir` before it loads the driver.
"""

from __future__ import annotations

import os
import stat
import tempfile

__all__ = ["ensure_xdg_runtime_dir"]


def _valid(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    # What the XDG base directory spec (and Mesa's check) asks: a directory we own, mode 0700.
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


def ensure_xdg_runtime_dir() -> str | None:
    """Point ``XDG_RUNTIME_DIR`` at a private directory when it is unset or invalid.

    A valid setting is left alone.  Otherwise ``<tmp>/litegpu-xdg-<uid>`` (mode 0700) is
    created and used.  Returns the directory in effect, or None when none could be made
    (the driver then prints its line; nothing else changes).
    """
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and _valid(current):
        return current
    if not hasattr(os, "getuid"):  # Windows: no such variable, no such message
        return current
    path = os.path.join(tempfile.gettempdir(), f"litegpu-xdg-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
    except OSError:
        return None
    if not _valid(path):  # someone else owns it: do not use it
        return None
    os.environ["XDG_RUNTIME_DIR"] = path
    return path
