"""The installed distributions' entry points of one group, found without ``importlib.metadata``.

``importlib.metadata`` costs about 75 ms CPU to import (it imports the ``email`` package to parse
every distribution's metadata) and the plugin scan runs in every process's first ``load_delegate``,
so a warm start paid it.  This module finds the same entry points the way its path finder does:
every ``sys.path`` directory in order, the ``*.dist-info`` / ``*.egg-info`` directories in it, the
first distribution of each normalized name only (a second copy further down the path is not
seen), each one's ``entry_points.txt``; a distribution's name and version are read from the header
of its ``METADATA`` (``PKG-INFO``) file.  Where the path holds something this scan does not read
(zip files, ``.egg`` directories) or an import hook can list distributions of its own,
``importlib.metadata`` is used instead.  ``tests/test_startup_tables.py`` compares the two.
The directories are listed first and the files read as :func:`iter_entry_points` goes, so that
``load_delegate``'s early start (``_plugins.registry_for``) reads only up to the entry point it needs.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

__all__ = ["EntryPoint", "Distribution", "entry_points", "iter_entry_points"]

_INFO_SUFFIXES = (".dist-info", ".egg-info")
# importlib.metadata.EntryPoint's pattern for "module:attr.attr [extras]"
_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"

# plain classes, not dataclasses: this module loads in every process's first load_delegate, and a
# dataclass costs a few ms to create


class Distribution:
    """An installed distribution: its metadata directory, name and version."""

    __slots__ = ("path", "name", "version")

    def __init__(self, path: Path, name: str, version: str) -> None:
        self.path = path  # the *.dist-info / *.egg-info directory
        self.name = name
        self.version = version

    def __repr__(self) -> str:
        return f"Distribution({self.name!r}, {self.version!r}, {str(self.path)!r})"

    def locate_file(self, path: str | os.PathLike[str]) -> Path:
        """A path relative to the directory holding the distribution (``importlib.metadata``'s meaning)."""
        return self.path.parent / path


class EntryPoint:
    """One entry point: ``name = value`` of ``group`` in ``dist`` (a :class:`Distribution`)."""

    __slots__ = ("name", "value", "group", "dist")

    def __init__(self, name: str, value: str, group: str, dist: Distribution | None = None) -> None:
        self.name, self.value, self.group, self.dist = name, value, group, dist

    def __repr__(self) -> str:
        return f"EntryPoint({self.name!r}, {self.value!r}, {self.group!r})"

    def load(self) -> Any:
        """The object the entry point names (its module imported)."""
        import re

        m = re.match(_VALUE, self.value)
        if m is None:
            raise ValueError(f"entry point {self.name!r}: {self.value!r} is not 'module' or 'module:attr'")
        obj: Any = importlib.import_module(m.group("module"))
        for attr in filter(None, (m.group("attr") or "").split(".")):
            obj = getattr(obj, attr)
        return obj


def _normalized(stem: str) -> str:
    """The distribution name of a metadata directory's stem, normalized as ``importlib.metadata``
    does to tell two copies of one distribution apart (``Foo.Bar-1.0`` -> ``foo_bar``: runs of
    ``-_.`` become one ``_``; string methods, not its regular expression, compiled at every start)."""
    name = stem.partition("-")[0].lower().replace(".", "_").replace("-", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name


def _header(info: Path) -> tuple[str, str]:
    """(Name, Version) from the header of the distribution's metadata file ("" where absent)."""
    name = version = ""
    for fname in ("METADATA", "PKG-INFO"):
        try:
            with open(info / fname, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break  # the body (the description) starts after the first blank line
                    key, sep, value = line.partition(":")
                    if not sep:
                        continue
                    key = key.strip().lower()
                    if key == "name" and not name:
                        name = value.strip()
                    elif key == "version" and not version:
                        version = value.strip()
            return name, version
        except OSError:
            continue
    return name, version


def _parse(text: str, group: str, dist: Distribution) -> list[EntryPoint]:
    """The entries of section ``[group]`` of an ``entry_points.txt`` (an ini file: ``name = value``
    lines, ``#`` comments), in file order, read as ``importlib.metadata.Sectioned`` reads them."""
    out: list[EntryPoint] = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section == group:
            name, sep, value = line.partition("=")
            if sep:
                out.append(EntryPoint(name.strip(), value.strip(), group, dist))
    return out


def _scannable() -> bool:
    """Whether every source of distributions is a plain directory this module reads like the path
    finder does (no import hook that lists distributions, no zip file or .egg on ``sys.path``)."""
    return all(finder is PathFinder or getattr(finder, "find_distributions", None) is None
               for finder in sys.meta_path)


def _infos() -> list[Path] | None:
    """Every distribution's metadata directory on ``sys.path``, the first copy of each, in the path
    finder's order; None where the scan cannot stand in for ``importlib.metadata``.  Directory listings
    only: the files are read by :func:`iter_entry_points`, as it goes."""
    if not _scannable():
        return None
    seen: set[str] = set()
    out: list[Path] = []
    for entry in sys.path:
        if not isinstance(entry, str):
            return None
        root = entry or "."
        if root.lower().endswith(".egg"):
            return None
        try:
            children = os.listdir(root)
        except NotADirectoryError:
            return None  # a zip file (or an egg) on sys.path
        except OSError:
            continue  # a directory that is not there: the path finder skips it too
        for child in children:
            low = child.lower()
            if low.endswith(".egg"):
                return None
            if not low.endswith(_INFO_SUFFIXES):
                continue
            key = _normalized(low.rpartition(".")[0])
            if key in seen:
                continue
            seen.add(key)
            out.append(Path(root, child))
    return out


def iter_entry_points(group: str) -> Iterator[Any]:
    """:func:`entry_points`, one at a time: each distribution's ``entry_points.txt`` is read when the
    iteration reaches it, so a caller that stops at the entry point it looks for reads no further
    (reading every distribution's file took 5-10 ms of a start on an H100 host with ~100 installed)."""
    infos = _infos()
    if infos is None:
        import importlib.metadata as metadata

        yield from metadata.entry_points(group=group)
        return
    for info in infos:
        try:
            text = (info / "entry_points.txt").read_text(encoding="utf-8")
        except OSError:
            continue
        if f"[{group}]" not in text.replace(" ", ""):
            continue
        yield from _parse(text, group, Distribution(info, *_header(info)))


def entry_points(group: str) -> list[Any]:
    """The entry points of ``group`` that ``importlib.metadata.entry_points(group=group)`` finds, in
    its order (objects with ``name``, ``value``, ``dist.name``, ``dist.version``, ``load()``)."""
    return list(iter_entry_points(group))
