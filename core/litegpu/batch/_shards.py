"""Output shards of ``litegpu batch``: one file (Parquet) or folder (``.npy``) per batch, written
atomically under a name derived from the batch's source paths.

Why per-batch shards named by their paths: the actor that ran a batch builds its table
(:func:`shard_table`, no copies) and a write task of its own writes it (:func:`write_table`; the
write stage, ``_stages.write_batch``); a retried batch or write task (a task retry, an actor that died
and was replaced) writes the same name again with the same content, so nothing is lost or doubled; a
half-written shard never exists under its final name (temp name, then rename); and a rerun finds
what is done by reading only the ``path`` column of the shards already there.

Parquet shard ``part-<digest>.parquet``: columns ``path`` (string), ``error`` (string, null when the
row ran), then one column per model output, named like ``litegpu run``'s output files, of Arrow's
canonical ``fixed_shape_tensor`` extension type with the output's full shape (batch dimension
included, as ``litegpu run`` saves it); null on error rows.  ``.npy`` shard ``part-<digest>/``:
``rows.json`` (``[{"path", "error"}]``) and ``<output>.npy`` stacking the rows' outputs (zeros on error
rows).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMATS", "shard_stem", "shard_table", "write_shard", "write_table", "has_shards", "done_paths", "read_outputs"]

FORMATS = ("parquet", "npy")
_PREFIX = "part-"


def shard_stem(paths: Sequence[str]) -> str:
    """``part-<20 hex>``: the same batch always gets the same name."""
    h = hashlib.sha256("\0".join(paths).encode("utf-8", "surrogateescape")).hexdigest()
    return f"{_PREFIX}{h[:20]}"


def _tmp_name(out_dir: Path, final: str) -> Path:
    return out_dir / f".{final}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def shard_table(paths: Sequence[str], errors: Sequence[str | None], outputs: Mapping[str, np.ndarray]) -> Any:
    """A batch's rows as the Arrow table its Parquet shard holds (``path``, ``error``, one
    ``fixed_shape_tensor`` column per output, null on error rows), built without copying the output
    arrays.  ``outputs``: column name -> the rows' values stacked, ``(rows, *output shape)``."""
    import pyarrow as pa

    failed = np.array([e is not None for e in errors], bool)
    cols: dict[str, Any] = {"path": pa.array(list(paths), pa.string()),
                            "error": pa.array(list(errors), pa.string())}
    mask = pa.array(failed) if failed.any() else None
    for name, a in outputs.items():
        if a.shape[0] != len(paths):
            raise ValueError(f"output {name!r} has {a.shape[0]} rows for {len(paths)} paths")
        shape = tuple(a.shape[1:])
        flat = np.ascontiguousarray(a).reshape(-1)  # the batch's array itself, no copy per row
        storage = pa.FixedSizeListArray.from_arrays(pa.array(flat), int(np.prod(shape)), mask=mask)
        ttype = pa.fixed_shape_tensor(pa.from_numpy_dtype(a.dtype), list(shape))
        cols[name] = pa.ExtensionArray.from_storage(ttype, storage)
    return pa.table(cols)


def write_shard(out_dir: Path, fmt: str, paths: Sequence[str], errors: Sequence[str | None],
                outputs: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> str:
    """Write one shard; return its file or folder name.  ``outputs``: column name -> the rows' values
    stacked, ``(rows, *output shape)`` (what error rows hold there is not written)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r} (choose from {', '.join(FORMATS)})")
    return write_table(out_dir, fmt, shard_table(paths, errors, outputs), metadata)


def write_table(out_dir: Path, fmt: str, table: Any, metadata: Mapping[str, str] | None = None) -> str:
    """Write one shard from its :func:`shard_table` table (the columns ``path``, ``error`` and the
    outputs, nothing else); return its file or folder name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = table.column("path").to_pylist()
    stem = shard_stem(paths)
    if fmt == "parquet":
        return _write_parquet(out_dir, stem, table, metadata or {})
    if fmt == "npy":
        return _write_npy(out_dir, stem, paths, table)
    raise ValueError(f"unknown output format {fmt!r} (choose from {', '.join(FORMATS)})")


def _write_parquet(out_dir: Path, stem: str, table: Any, metadata: Mapping[str, str]) -> str:
    import pyarrow.parquet as pq

    table = table.replace_schema_metadata({f"litegpu.{k}": str(v) for k, v in metadata.items()})
    final = f"{stem}.parquet"
    tmp = _tmp_name(out_dir, final)
    try:
        # dictionary encoding only for the strings: tried on float tensors it costs ~6x the write
        pq.write_table(table, tmp, use_dictionary=["path", "error"])
        os.replace(tmp, out_dir / final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def _tensor_rows(col: Any) -> np.ndarray:
    """A ``fixed_shape_tensor`` column as ``(rows, *shape)``, every row's slot included (null rows
    too, whatever they hold), without a copy where the column is one chunk."""
    col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    storage = col.storage
    values = storage.values[storage.offset * storage.type.list_size:(storage.offset + len(storage))
                            * storage.type.list_size]
    return values.to_numpy(zero_copy_only=False).reshape(len(col), *col.type.shape)


def _write_npy(out_dir: Path, stem: str, paths: Sequence[str], table: Any) -> str:
    errors = table.column("error").to_pylist()
    failed = np.array([e is not None for e in errors], bool)
    tmp = _tmp_name(out_dir, stem)
    tmp.mkdir()
    try:
        rows = [{"path": p, "error": e} for p, e in zip(paths, errors, strict=True)]
        (tmp / "rows.json").write_text(json.dumps(rows, indent=1))
        for name in table.column_names[2:]:
            a = _tensor_rows(table.column(name))
            if failed.any():  # zeros on error rows, whatever the array held there
                a = a.copy()
                a[failed] = 0
            np.save(tmp / f"{name}.npy", a)
        try:
            os.rename(tmp, out_dir / stem)
        except OSError:
            # a retried batch already wrote this very shard (same paths, same model): keep that one
            if not (out_dir / stem / "rows.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return stem


def _shards(out_dir: Path) -> list[Path]:
    if not out_dir.is_dir():
        return []
    return sorted(p for p in out_dir.iterdir() if p.name.startswith(_PREFIX))


def has_shards(out_dir: str | os.PathLike[str]) -> bool:
    """Whether ``out_dir`` holds any shard (without reading one)."""
    return bool(_shards(Path(out_dir)))


def done_paths(out_dir: str | os.PathLike[str]) -> set[str]:
    """The source paths that already have a row in ``out_dir`` (either format)."""
    import pyarrow.parquet as pq

    done: set[str] = set()
    for p in _shards(Path(out_dir)):
        if p.suffix == ".parquet":
            done.update(pq.read_table(p, columns=["path"]).column("path").to_pylist())
        elif (p / "rows.json").is_file():
            done.update(r["path"] for r in json.loads((p / "rows.json").read_text()))
    return done


def read_outputs(out_dir: str | os.PathLike[str], paths: Collection[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every row of ``out_dir`` as ``{path: {"error": str | None, <output>: array | None}}``; arrays
    have the output's full shape, as ``litegpu run`` saves them.  Meant for checks and small jobs:
    it loads everything, or with ``paths`` the shards holding any of those rows (their ``path``
    column read first)."""
    import pyarrow.parquet as pq

    want = None if paths is None else set(paths)
    rows: dict[str, dict[str, Any]] = {}
    for p in _shards(Path(out_dir)):
        if p.suffix == ".parquet":
            if want is not None and want.isdisjoint(pq.read_table(p, columns=["path"]).column("path").to_pylist()):
                continue
            t = pq.read_table(p)
            names = [n for n in t.column_names if n not in ("path", "error")]
            paths, errs = t.column("path").to_pylist(), t.column("error").to_pylist()
            cols = {}
            for n in names:
                col = t.column(n).combine_chunks()
                valid = col.is_valid().to_numpy(zero_copy_only=False)
                dense = col.storage.flatten().to_numpy(zero_copy_only=False)
                shape = tuple(col.type.shape)
                per = int(np.prod(shape))
                # flatten() drops the null rows' slots: the k-th valid row is the k-th slice
                starts = np.cumsum(valid) - 1
                cols[n] = [dense[starts[i] * per:(starts[i] + 1) * per].reshape(shape) if valid[i] else None
                           for i in range(len(col))]
            for i, path in enumerate(paths):
                rows[path] = {"error": errs[i], **{n: cols[n][i] for n in names}}
        elif (p / "rows.json").is_file():
            meta = json.loads((p / "rows.json").read_text())
            arrays = {f.stem: np.load(f) for f in sorted(p.glob("*.npy"))}
            for i, r in enumerate(meta):
                rows[r["path"]] = {"error": r["error"],
                                   **{n: (None if r["error"] else a[i]) for n, a in arrays.items()}}
    return rows
