"""What runs on the Ray workers of ``litegpu batch``: reading table files, CPU preprocessing, the
inference actor and the one-off preparation task.  Ray itself is imported only inside functions, so
this module loads (and pickles by reference) without it."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._shards import write_shard

log = logging.getLogger("litegpu.batch")

#: Set on GPU actors so that Ray does not narrow CUDA_VISIBLE_DEVICES: a backend's device index is
#: then Ray's GPU id (backends list GPUs first), for OpenCL and Vulkan alike.
NOSET_CUDA = {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}


@dataclass
class ModelSpec:
    """Everything a worker needs to build the interpreter, picklable (no open handles)."""

    name: str
    data: bytes
    backend: str
    options: dict[str, Any]
    config: Any  # litegpu.Config (or None without the config system)
    device_from_ray: bool = False  # set the backend's ``device`` option from Ray's GPU id
    cache_files: dict[str, bytes] = field(default_factory=dict)  # serialization-cache entries to import


def _loaded(spec: ModelSpec) -> Any:
    import hashlib

    from .._reader import read_model
    from ..cli._common import LoadedModel

    return LoadedModel(spec.name, spec.data, read_model(spec.data), hashlib.sha256(spec.data).hexdigest())


def _cache(options: Mapping[str, Any]) -> Any:
    """The serialization cache the backend will use (same keys as ``gpu/_runtime.py`` reads)."""
    from ..cache import DelegateCache

    conf = options.get("cache") or {}
    if not isinstance(conf, Mapping) or not conf.get("enabled", True):
        return None
    kw = {"max_bytes": conf["max_bytes"]} if "max_bytes" in conf else {}
    return DelegateCache(conf.get("dir"), **kw)


def build_interpreter(spec: ModelSpec, *, device: int | None = None) -> tuple[Any, dict[str, Any]]:
    """An allocated interpreter for ``spec`` (importing ``spec.cache_files`` first); and facts about
    its start: device, init seconds, cache entries imported, whether every GPU partition was a cache
    hit (a warm start)."""
    from ..cli._common import make_interpreter

    opts = dict(spec.options)
    if device is not None:
        opts["device"] = device
    imported = 0
    if spec.backend != "cpu" and spec.cache_files:
        cache = _cache(opts)
        if cache is not None:
            imported = cache.import_entries(spec.cache_files)
    t0 = time.perf_counter()
    interp = make_interpreter(_loaded(spec), spec.backend, opts, config=spec.config)
    init_s = time.perf_counter() - t0
    hits = [bool(getattr(k, "cache_hit", False)) for k in _delegate_kernels(interp)]
    info = {"host": socket.gethostname(), "pid": os.getpid(), "backend": spec.backend,
            "device": _device_name(interp, spec.backend, opts), "init_s": init_s,
            "cache_imported": imported, "warm": (all(hits) if hits else None)}
    return interp, info


def _delegate_kernels(interp: Any) -> list[Any]:
    """The prepared delegate kernels of the main subgraph (their ``cache_hit`` says warm or cold)."""
    plan = getattr(getattr(interp, "_main", None), "plan", None)
    return [s.kernel for s in getattr(plan, "steps", None) or [] if getattr(s, "kernel", None) is not None]


def _device_name(interp: Any, backend: str, opts: Mapping[str, Any]) -> str:
    if backend == "cpu":
        return f"cpu ({socket.gethostname()})"
    for d in getattr(interp, "_delegates", None) or []:
        devs = d.devices() if callable(getattr(d, "devices", None)) else None
        if devs:
            return f"{backend}:{opts.get('device', 0)} {devs[0]}"
    return f"{backend}:{opts.get('device', 0)}"


def prepare_once(spec: ModelSpec) -> dict[str, Any]:
    """Ray task run once before the actors start, with one actor's resources: prepare the model (its
    compiled kernels land in this node's serialization cache) and return those cache entries, which
    every actor then imports, so that each actor's prepare is a warm start.  Also surfaces a model or
    backend that cannot work as one clear error instead of a pool of failing actors."""
    from ..cache import model_token

    device = _ray_device() if spec.device_from_ray else None
    _interp, info = build_interpreter(spec, device=device)
    files: dict[str, bytes] = {}
    cache = _cache(spec.options)
    if cache is not None and spec.backend != "cpu":
        files = cache.export_entries(model_token(spec.data), spec.backend)
    return {"info": info, "cache_files": files}


def _ray_device() -> int | None:
    import ray

    ids = ray.get_gpu_ids()
    return int(ids[0]) if ids else None


# --------------------------------------------------------------------------- reading and preprocessing


def read_table_file(row: dict[str, Any], *, column: str | None, id_column: str | None,
                    skip: Any = None) -> list[dict[str, Any]]:
    """``flat_map`` over Parquet/Arrow files: one row per table row, ``path`` being the id column's
    value or ``FILE#ROW``, ``data`` the cell (bytes of an encoded image or .npy, or numbers)."""
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    f = row["file"]
    table = feather.read_table(f) if f.endswith((".arrow", ".feather", ".ipc")) else pq.read_table(f)
    col = pick_column(table.schema, column)
    data = table.column(col).to_pylist()
    ids = table.column(id_column).to_pylist() if id_column else [f"{f}#{i}" for i in range(len(data))]
    if skip is not None and not isinstance(skip, (list, set, tuple, frozenset)):
        import ray

        skip = ray.get(skip)  # the done set travels once through the object store
    done = set(skip) if skip else ()
    return [{"path": str(i), "data": d} for i, d in zip(ids, data, strict=True) if str(i) not in done]


def pick_column(schema: Any, column: str | None) -> str:
    """The column holding the images: ``column``, else ``image``, else the only binary or list one."""
    import pyarrow as pa

    names = list(schema.names)
    if column is not None:
        if column not in names:
            raise ValueError(f"no column {column!r} in the table (columns: {', '.join(names)})")
        return column
    if "image" in names:
        return "image"
    cands = [f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
             or pa.types.is_list(f.type) or pa.types.is_fixed_size_list(f.type)]
    if len(cands) != 1:
        raise ValueError(f"cannot tell which column holds the images (columns: {', '.join(names)}); "
                         "name it with --column")
    return cands[0]


def preprocess_batch(batch: dict[str, np.ndarray], *, pre: Any) -> dict[str, np.ndarray]:
    """CPU stage: file or cell -> the model's input tensor, through ``litegpu``'s image preprocessing
    (:class:`litegpu.cli._preprocess.Preprocess`).  A row that cannot be read gets a zero tensor and
    its reason in ``error``; the job goes on."""
    from ..cli._common import CliError
    from ..cli._preprocess import load_image

    paths = [str(p) for p in batch["path"]]
    cells = batch.get("data")
    shape = (1, pre.height, pre.width, pre.channels)
    inputs = np.zeros((len(paths), *shape), pre.dtype)
    errors: list[str] = []
    for i, path in enumerate(paths):
        try:
            cell = None if cells is None else cells[i]
            if cell is None and cells is not None:
                raise ValueError("empty cell")
            if cell is None or isinstance(cell, (bytes, bytearray)):
                arr = load_image(Path(path), data=None if cell is None else bytes(cell))
            else:  # numbers: the model input, flattened
                arr = np.asarray(cell).astype(pre.dtype, copy=False)
                if arr.size != int(np.prod(shape)):
                    raise ValueError(f"cell has {arr.size} values; the model input {list(shape)} needs "
                                     f"{int(np.prod(shape))}")
                arr = arr.reshape(shape)
            inputs[i] = pre.input_from(arr)
            errors.append("")
        except Exception as e:  # noqa: BLE001 - any unreadable input becomes an error row, not a failed job
            errors.append(str(e) if isinstance(e, CliError) else f"{type(e).__name__}: {e}")
    return {"path": np.array(paths, dtype=object), "input": inputs, "error": np.array(errors, dtype=object)}


# --------------------------------------------------------------------------- inference


class InferenceActor:
    """One prepared model on one device; runs batches and writes each as an output shard.

    Ray Data restarts an actor that dies and re-runs the batch it held; since a shard's name and
    content depend only on the batch, the re-run rewrites the same shard and nothing is lost or doubled.
    """

    def __init__(self, spec: ModelSpec | Any, out_dir: str, fmt: str, metadata: Mapping[str, str]):
        import ray

        if isinstance(spec, ray.ObjectRef):
            spec = ray.get(spec)
        device = _ray_device() if spec.device_from_ray else None
        self.interp, self.info = build_interpreter(spec, device=device)
        from ..cli._run import safe_name

        taken: set[str] = set()
        self.outs = [(d["index"], safe_name(d["name"], taken), tuple(int(s) for s in d["shape"]),
                      np.dtype(d["dtype"])) for d in self.interp.get_output_details()]
        self.in_index = self.interp.get_input_details()[0]["index"]
        self.out_dir = Path(out_dir)
        self.fmt = fmt
        self.metadata = dict(metadata)
        self.label = f"{self.info['host']}:{self.info['pid']}"
        log.info("litegpu batch actor %s: %s, prepared in %.2f s (warm start: %s)", self.label,
                 self.info["device"], self.info["init_s"], self.info["warm"])

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        paths = [str(p) for p in batch["path"]]
        errors: list[str | None] = [str(e) or None for e in batch["error"]]
        per_out: dict[str, list[np.ndarray | None]] = {name: [] for _, name, _, _ in self.outs}
        t0 = time.perf_counter()
        for i in range(len(paths)):
            results = None
            if errors[i] is None:
                try:
                    self.interp.set_tensor(self.in_index, batch["input"][i])
                    self.interp.invoke()
                    results = [self.interp.get_tensor(idx).copy() for idx, _, _, _ in self.outs]
                except Exception as e:  # noqa: BLE001 - a row the model rejects is reported, the batch goes on
                    errors[i] = f"inference failed: {type(e).__name__}: {e}"
            for k, (_, name, _, _) in enumerate(self.outs):
                per_out[name].append(None if results is None else results[k])
        run_s = time.perf_counter() - t0
        shard = write_shard(self.out_dir, self.fmt, paths, errors,
                            {name: (shape, dtype, per_out[name]) for _, name, shape, dtype in self.outs},
                            self.metadata)
        n = len(paths)
        return {"path": np.array(paths, dtype=object),
                "error": np.array([e or "" for e in errors], dtype=object),
                "shard": np.array([shard] * n, dtype=object),
                "actor": np.array([self.label] * n, dtype=object),
                "device": np.array([self.info["device"]] * n, dtype=object),
                "warm": np.array([str(self.info["warm"])] * n, dtype=object),
                "init_s": np.full(n, self.info["init_s"]),
                "run_s": np.full(n, run_s / max(n, 1)),
                "t_end": np.full(n, time.time())}  # wall clock: comparable across an actor pool's processes
