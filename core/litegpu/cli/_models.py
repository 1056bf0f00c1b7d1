"""``litegpu models``: fetch the real models used for tests and benchmarks, list them with sizes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._errors import LiteGPUError
from ._common import CliError, add_common_args, emit_json, err, fmt_bytes, out, table

_SOURCES = ("mediapipe",)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="fetch or list the real models (MediaPipe)",
                       description="Fetch model collections into the user cache and list them with sizes.")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION")
    f = msub.add_parser("fetch", help="download (if needed) and list a model collection",
                        description="Download a model collection (default: mediapipe, the 14 .tflite files of "
                                    "the MediaPipe 0.10.14 wheel) into the cache, then list the models.")
    f.add_argument("source", nargs="?", default="mediapipe", choices=_SOURCES, help="collection (default mediapipe)")
    f.add_argument("--dir", metavar="DIR", help="cache directory (default: the user cache)")
    f.add_argument("--wheel", metavar="WHEEL", help="a local mediapipe wheel to extract instead of downloading")
    add_common_args(f)
    f.set_defaults(func=fetch)
    ls = msub.add_parser("list", help="list the models of a collection and whether they are fetched",
                         description="List a collection's models without downloading anything.")
    ls.add_argument("source", nargs="?", default="mediapipe", choices=_SOURCES)
    ls.add_argument("--dir", metavar="DIR", help="cache directory (default: the user cache)")
    add_common_args(ls)
    ls.set_defaults(func=list_models)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _rows(paths: dict[str, Path]) -> list[dict]:
    rows = []
    for name, path in sorted(paths.items()):
        size = path.stat().st_size if path.is_file() else None
        rows.append({"name": name, "path": str(path), "bytes": size, "fetched": size is not None})
    return rows


def _show(rows: list[dict], as_json: bool, header: str) -> None:
    if as_json:
        emit_json({"models": rows, "total_bytes": sum(r["bytes"] or 0 for r in rows)})
        return
    out(header)
    out(table(["MODEL", "SIZE", "PATH"], [[r["name"], fmt_bytes(r["bytes"]) if r["fetched"] else "not fetched",
                                          r["path"]] for r in rows], right=(1,)))
    out(f"{sum(r['fetched'] for r in rows)} of {len(rows)} models, "
        f"{fmt_bytes(sum(r['bytes'] or 0 for r in rows))} in all")


def fetch(args: argparse.Namespace) -> int:
    from .. import models

    try:
        # progress on stderr: pip's download bar (a terminal only) and one line per step
        paths = models.fetch_mediapipe(args.dir, wheel=args.wheel,
                                       progress=True if sys.stderr.isatty() else (lambda m: err(f"litegpu: {m}")))
    except LiteGPUError as e:
        raise CliError(str(e)) from e
    _show(_rows(paths), args.json, f"MediaPipe {models.MEDIAPIPE_VERSION} models:")
    if not args.json:
        out("Use a model by name in any command (`litegpu run face_detection_short_range --input photo.jpg`) "
            "or in litegpu.load(\"face_detection_short_range\").")
    return 0


def list_models(args: argparse.Namespace) -> int:
    from .. import models

    root = Path(args.dir) if args.dir else models._default_cache_dir()
    _show(_rows(models._paths(root)), args.json, f"MediaPipe {models.MEDIAPIPE_VERSION} models in {root}:")
    return 0
