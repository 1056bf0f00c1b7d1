"""pyopencl imported without ``importlib.metadata``.

``pyopencl.version`` and ``pytools.version`` (pyopencl imports pytools) each ask
``importlib.metadata.version(...)`` for their own version, and that import (the ``email`` package, ``csv``,
``zipfile``...) was about a third of pyopencl's import: 200 ms of 600 on the loaded CI-class machine, paid by
every start on opencl, warm ones included.  :func:`prepare` puts the two ``version`` modules in
``sys.modules`` first, made by running each file's own code with a ``metadata`` whose ``version()``
answers from the ``Version:`` line of the ``*.dist-info/METADATA`` beside the package (the distribution
the import will load), so they hold what the files would compute.

Only a ``version.py`` whose text is exactly the one known here (checked, cheaply, by reading it), next to
exactly one ``<name>-*.dist-info`` of its package, is taken over; anything else (another pyopencl or
pytools release, an unusual install) is left to the normal import.  Switch: :data:`ENABLED`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import Any

__all__ = ["ENABLED", "prepare"]

#: A/B switch (``bench/init.py --set litegpu_opencl._lean_import.ENABLED=False``): False imports pyopencl as is
ENABLED = True

# the text of pyopencl 2026.1's and pytools 2026.1's version.py, but for the distribution's name
_KNOWN = '''from __future__ import annotations

import re
from importlib import metadata


VERSION_TEXT = metadata.version("{name}")
_match = re.match(r"^([0-9.]+)([a-z0-9]*?)$", VERSION_TEXT)
assert _match is not None
VERSION_STATUS = _match.group(2)
VERSION = tuple(int(nr) for nr in _match.group(1).split("."))
'''


class _Metadata:
    """What the known ``version.py`` asks of ``importlib.metadata``: one distribution's version."""

    def __init__(self, name: str, version: str) -> None:
        self._name, self._version = name, version

    def version(self, name: str) -> str:
        if name != self._name:  # not the known file after all: the real answer
            import importlib.metadata

            return importlib.metadata.version(name)
        return self._version


def _dist_version(parent: str, name: str) -> str | None:
    """The ``Version:`` of the one ``<name>-*.dist-info`` in ``parent``; None where there is not exactly one."""
    try:
        infos = [e for e in os.listdir(parent) if e.startswith(f"{name}-") and e.endswith(".dist-info")]
    except OSError:
        return None
    if len(infos) != 1:
        return None
    try:
        with open(os.path.join(parent, infos[0], "METADATA"), encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break  # the header ends at the first blank line
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() == "version":
                    return value.strip()
    except OSError:
        return None
    return None


def _version_module(name: str) -> types.ModuleType | None:
    """``<name>.version`` made as described in the module docstring, or None to leave it to the import."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = list(spec.submodule_search_locations)[0]
    path = os.path.join(folder, "version.py")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    if text != _KNOWN.format(name=name):
        return None
    version = _dist_version(os.path.dirname(folder), name)
    if version is None:
        return None
    module = types.ModuleType(f"{name}.version")
    module.__file__ = path
    module.__dict__["metadata"] = _Metadata(name, version)
    try:
        exec(compile(text.replace("from importlib import metadata\n", ""), path, "exec"), module.__dict__)
    except Exception:  # noqa: BLE001 - e.g. a version string the file's own pattern refuses: the real import
        return None
    del module.__dict__["metadata"]
    return module


def prepare() -> None:
    """Put ``pytools.version`` and ``pyopencl.version`` in ``sys.modules`` before pyopencl's import (see the
    module docstring).  Call :func:`finish` after that import."""
    if not ENABLED or "pyopencl" in sys.modules:
        return
    for name in ("pytools", "pyopencl"):
        if f"{name}.version" in sys.modules or name in sys.modules:
            continue
        module = _version_module(name)
        if module is not None:
            sys.modules[f"{name}.version"] = module


def finish() -> None:
    """After pyopencl's import: each package has its ``version`` attribute, as after a normal import (a
    module found in ``sys.modules`` is not set on its parent)."""
    for name in ("pytools", "pyopencl"):
        parent: Any = sys.modules.get(name)
        child = sys.modules.get(f"{name}.version")
        if parent is not None and child is not None and not hasattr(parent, "version"):
            parent.version = child
