"""Developer tools (support matrix, generated tables)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def generated_file_main(path: Path, render: Callable[[], str], module: str, argv: list[str] | None = None) -> int:
    """``python -m <module> [--write | --check]`` for a source file that ``render`` generates: print
    it, write it, or exit 1 (naming the command) when the file on disk is out of date."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if args == ["--write"]:
        path.write_text(text)
        print(f"wrote {path}")
        return 0
    if args == ["--check"]:
        if not path.exists() or path.read_text() != text:
            print(f"{path} is out of date: run python -m {module} --write")
            return 1
        return 0
    if args:
        print(f"usage: python -m {module} [--write | --check]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0
