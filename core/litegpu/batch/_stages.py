"""What runs on the Ray workers of ``litegpu batch``: reading table files, CPU preprocessing, the
inference actor and the one-off preparation task.  Ray itself is imported only inside functions, so
this module loads (and pickles by reference) without it."""

from __future__ import annotations

import collections
import json
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._shards import shard_table, write_table

log = logging.getLogger("litegpu.batch")

#: Set on GPU actors so that Ray does not narrow CUDA_VISIBLE_DEVICES: a backend's device index is
#: then Ray's GPU id (backends list GPUs first), for OpenCL and Vulkan alike.
NOSET_CUDA = {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}


def native_arrow_pickle() -> None:
    """In a GPU actor's process: the tables it returns are serialized by pyarrow's own pickling (its
    buffers out of band, no copy) instead of Ray's Arrow serializer, which rebuilds every array's
    buffers (it exists so that a slice of a big table does not carry the whole parent; an actor's
    table is never a slice) and takes 2.5x the CPU time, holding the GIL the device thread needs (64
    face-detection rows: 1.66 -> 0.66 ms on the 2-core development machine).  What Ray's
    ``RAY_DISABLE_CUSTOM_ARROW_DATA_SERIALIZATION=1`` does at a worker's start, done in the running
    actor (Ray registers its serializer as cloudpickle reducers, process-wide)."""
    try:
        import pyarrow as pa
        from ray import cloudpickle

        for cls in (pa.Table, pa.Schema):
            cloudpickle.CloudPickler.dispatch.pop(cls, None)
    except Exception as e:  # noqa: BLE001 - only a speed-up
        log.info("litegpu batch: Ray's Arrow serializer stays in place (%s)", e)


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
    in_flight: int = 0  # submissions in flight of a GPU actor (0: IN_FLIGHT)
    rows_per_submit: int = 0  # rows a GPU actor submits as one (0: ROWS_PER_SUBMIT)
    #: the one-off prepare's result (a Ray ObjectRef of :func:`prepare_once`'s dict) where the actors
    #: start beside it: each actor waits for it and takes its ``cache_files`` before its own prepare
    prepared: Any = None


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

    t_start = time.time()  # wall clock: its worker process is up and litegpu imported
    device = _ray_device() if spec.device_from_ray else None
    _interp, info = build_interpreter(spec, device=device)
    info["t_start"] = t_start
    info["t_end"] = time.time()  # wall clock: the driver measures the prepare from its submission to here
    files: dict[str, bytes] = {}
    cache = _cache(spec.options)
    if cache is not None and spec.backend != "cpu":
        files = cache.export_entries(model_token(spec.data), spec.backend)
    return {"info": info, "cache_files": files}


def _ray_device() -> int | None:
    import ray

    ids = ray.get_gpu_ids()
    return int(ids[0]) if ids else None


#: what the pipeline's read, preprocessing and write tasks and the inference actors import in a
#: worker process (Ray Data's map tasks, Arrow and Parquet, litegpu's preprocessing and this module):
#: a local instance's worker processes import them at their start (``PRELOAD_WORKERS`` in
#: ``_job.py``), and :func:`warm_worker` imports them where they were not
WORKER_MODULES = ("pyarrow.parquet", "ray.data", "ray.data.extensions",
                  "ray.data._internal.execution.operators.map_operator", "ray.data._internal.planner.plan_udf_map_op",
                  "litegpu.cli._preprocess", "litegpu.batch._stages")


def warm_worker(until: float) -> int:
    """Ray task run on each CPU worker while the model is prepared: import :data:`WORKER_MODULES`
    (nothing to do where the worker preloaded them), then hold the worker until the wall-clock time
    ``until`` so that the other warm-up tasks land on other workers.  Returns the worker's pid."""
    import importlib

    for name in WORKER_MODULES:
        importlib.import_module(name)
    time.sleep(max(0.0, min(1.0, until - time.time())))
    return os.getpid()


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

    t_start = time.time()  # wall clock, for the job's start-up timeline (BatchResult.timeline)
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
    n = len(paths)
    return {"path": np.array(paths, dtype=object), "input": inputs, "error": np.array(errors, dtype=object),
            "t_pre": np.full(n, t_start), "t_pre_end": np.full(n, time.time())}


# --------------------------------------------------------------------------- inference

#: submissions in flight per actor on a GPU backend (``run_batch(in_flight=)``, ``--in-flight``; each
#: of :data:`ROWS_PER_SUBMIT` rows): a single process is at its fastest from 2 runs in flight
#: (docs/compiled-model.md), submission N+1 written and submitted while N executes; an actor needs one
#: more, to cover the time its device thread waits for the GIL while another thread of its process
#: runs Python (H200, face_detection_short_range, 2 actors, one row a submission, measured while the
#: actors still wrote their shards themselves: 0.86x of the pipelined rate with 2, 0.95x with 3, 0.96x
#: with 4; 1 actor: 0.76x, 0.86x, 0.81x; docs/performance.md)
IN_FLIGHT = 3
#: rows of a batch a GPU actor hands the model as one submission (``CompiledModel.run_rows_async``:
#: on Vulkan one ``vkQueueSubmit`` of that many runs and one wait), so that its device thread's Python
#: work and its GIL hand-offs (each driver call drops the GIL and must win it back from Ray Data's
#: threads) are per that many rows, not per row.  1: one run per row, as before (an A/B switch).
#: H100, face_detection_short_range, vulkan: the device thread's host work 0.037-0.048 ms a row in Ray
#: against 0.115-0.122 at 1; 2 actors x 3 in flight 0.92-0.96x of the pipelined rate against 0.81-0.83x
#: (docs/performance.md)
ROWS_PER_SUBMIT = 16
#: the GIL switch interval of a GPU actor's process (seconds; Python's default is 0.005): when the
#: device thread comes back from the driver (a submit, a fence) while another of the actor's threads
#: runs Python (Ray Data's batch conversions and object-store copies), it waits for the GIL at most about
#: this long instead of 5 ms, during which the device would idle.  Measured with a thread shaped like
#: the device thread beside one holding the GIL 2 ms of every 6: 0.49x its rate alone at 5 ms, 0.70x
#: at 0.2 ms (the ideal being 0.67x-1x)
SWITCH_INTERVAL = 0.0002
#: batches one actor holds at a time (Ray Data's ``max_concurrent_calls_per_actor``, each in its own
#: thread): while one batch's rows are on the device, the next ones are queued behind it (so the
#: device never waits for a batch boundary) and the one done before is handed back to Ray Data.
#: H100, face_detection_short_range, vulkan, one batch a call, one actor, the rate once rows flow / the
#: pipelined rate, 4 against 3 in the same runs, six pairs over two sessions: 0.93/0.85, 1.03/0.85,
#: 0.81/0.69, 0.73/0.68, 1.04/0.68, 0.68/0.70; two actors about even (docs/performance.md)
ACTOR_CALLS = 4


@dataclass
class ActorModel:
    """What an actor runs rows with (:func:`build_model`): ``runner`` has the CompiledModel call
    :class:`_DeviceFeed` makes (``run_rows_async``: a CompiledModel, or :class:`_InterpreterRuns`) on
    its signature ``signature``; ``outputs`` per output array, in the runner's order: (position among the
    interpreter's outputs, which is ``litegpu run``'s order, shape, dtype); ``info`` the start facts."""

    runner: Any
    signature: int
    depth: int  # submissions in flight
    rows: int  # rows a submission
    input: tuple[tuple[int, ...], np.dtype]  # the input's shape and dtype
    outputs: list[tuple[int, tuple[int, ...], np.dtype]]
    names: list[str]  # the output columns, in the interpreter's order (named as litegpu run names them)
    info: dict[str, Any]


def build_model(spec: ModelSpec, *, device: int | None = None) -> ActorModel:
    """A GPU backend's model as a :class:`litegpu.compiled_model.CompiledModel` with up to
    :data:`IN_FLIGHT` runs in flight (its first copy is :func:`build_interpreter`'s, so the start facts
    are that one's), on the signature that runs the main subgraph as ``litegpu run`` does.  The CPU
    backend (nothing to overlap; its interpreter costs less per row than a CompiledModel), or a model
    with no such signature, runs on the interpreter itself, one row at a time."""
    from .._interpreter import Interpreter
    from ..cli._common import apply_partition_options
    from ..cli._run import safe_name
    from ..compiled_model import CompiledModel
    from ..hardware_accelerator import HardwareAccelerator

    first, info = build_interpreter(spec, device=device)
    in_det = first.get_input_details()[0]  # batch feeds models with one input (checked first)
    in_index = int(in_det["index"])
    inp = (tuple(int(x) for x in in_det["shape"]), np.dtype(in_det["dtype"]))
    details = first.get_output_details()
    taken: set[str] = set()
    names = [safe_name(d["name"], taken) for d in details]
    want = [int(d["index"]) for d in details]

    def on_interpreter() -> ActorModel:
        return ActorModel(_InterpreterRuns(first, in_index, want), 0, 1, 1, inp,
                          [(k, tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"])) for k, d in enumerate(details)],
                          names, info)

    if spec.backend == "cpu":
        return on_interpreter()
    spare = [first]
    delegates = list(getattr(first, "_delegates", None) or [])
    ir = first._model

    def factory() -> Any:
        if spare:
            return spare.pop()
        it = Interpreter(model_content=ir, experimental_delegates=delegates or None)
        apply_partition_options(it, spec.config)
        return it

    # GPU | CPU: a model the backend does not run whole runs as the single-process interpreter does
    # (its CPU ops on the CPU), synchronously
    model = CompiledModel(ir, factory, HardwareAccelerator.GPU | HardwareAccelerator.CPU, spec.backend,
                          max_in_flight=spec.in_flight or IN_FLIGHT)
    for sig in range(model.get_num_signatures()):
        key = model.get_signature_by_index(sig)["key"]
        ins = [int(d["index"]) for d in model.get_input_tensor_details(key).values()]
        outs = list(model.get_output_tensor_details(key).values())
        if ins == [in_index] and sorted(int(d["index"]) for d in outs) == sorted(want):
            return ActorModel(model, sig, spec.in_flight or IN_FLIGHT, spec.rows_per_submit or ROWS_PER_SUBMIT, inp,
                              [(want.index(int(d["index"])), tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]))
                               for d in outs], names, info)
    model.close()
    log.warning("litegpu batch: no signature of %s runs its main subgraph; running it one row at a time "
                "(no runs in flight)", spec.name)
    return on_interpreter()


class _Ran:
    """The handle of runs that have already ended."""

    @staticmethod
    def wait() -> None:
        return None


class _InterpreterRuns:
    """The CompiledModel call :class:`_DeviceFeed` makes, on an interpreter: one row after the other,
    all ended before ``run_rows_async`` returns."""

    def __init__(self, interp: Any, in_index: int, out_indices: list[int]):
        self.interp, self.in_index, self.out_indices = interp, in_index, out_indices

    def run_rows_async(self, signature: int, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> _Ran:
        (x,) = inputs
        for i in range(len(x)):
            self.interp.set_tensor(self.in_index, x[i])
            self.interp.invoke()
            for o, idx in zip(outputs, self.out_indices, strict=True):
                o[i] = self.interp.get_tensor(idx)
        return _Ran()


class _Job:
    """One batch on its way through :class:`_DeviceFeed`: its inputs, the arrays its outputs land in,
    its per-row errors, and the event set when its last row is done."""

    __slots__ = ("inputs", "outputs", "errors", "left", "done")

    def __init__(self, inputs: np.ndarray, outputs: list[np.ndarray], errors: list[str | None], left: int):
        self.inputs, self.outputs, self.errors, self.left = inputs, outputs, errors, left
        self.done = threading.Event()


class _DeviceFeed:
    """The actor's one thread that drives the device.  The rows of every batch handed to :meth:`run`
    go to the model in order, ``rows`` at a time as one submission
    (:meth:`litegpu.compiled_model.CompiledModel.run_rows_async`), with up to ``depth`` submissions in
    flight, across batch boundaries (the ring is drained only when no batch is waiting).  Calls come
    from Ray Data's threads (one per batch the actor holds); only this thread touches the model, so the
    model needs no locks.

    Nothing is copied on the way but into and out of the device's staging memory: a submission's
    input is a slice of the batch's input array (as Ray Data hands it over) and its outputs slices of
    the batch's output arrays.  Each batch gets new output arrays (``np.empty``: the allocator hands
    back the pages of the batches Ray has already copied out, so they are not faulted in anew): the
    actor returns them to Ray Data, which copies them into the object store after the call, so they
    cannot be reused safely.  On Vulkan a submission of ``rows`` rows is one ``vkQueueSubmit`` and
    one wait, so the thread's Python work and its GIL hand-offs are per ``rows`` rows; where the model
    cannot submit rows as one it runs them one by one, lent as their buffers.  The rows of a batch's
    error rows (unreadable inputs) are not run; a submission that fails is run again one row at a
    time, so that only the rows that fail get the error."""

    def __init__(self, model: Any, inp: tuple[tuple[int, ...], np.dtype], outs: list[tuple[tuple[int, ...], np.dtype]],
                 depth: int, signature: int = 0, rows: int = 1):
        self.model = model
        self.signature = signature
        self.depth = max(1, int(depth))
        self.rows = max(1, int(rows))
        self.inp = (tuple(inp[0]), np.dtype(inp[1]))
        self.outs = [(tuple(shape), np.dtype(dtype)) for shape, dtype in outs]
        self.ring: collections.deque = collections.deque()  # (handle, job, first row, end row), oldest first
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        # where the device thread's time goes, from its first batch on (seconds): waiting for a batch
        # (the stages before it are slower), blocked on the device (the device is the limit), and the
        # rest, its host work (submitting runs: copying rows into and out of staging, Python); ``cpu_s``
        # the CPU time of that thread: host work far above it is time spent waiting for the GIL
        # (another thread of the actor holding it), not work
        self.started: float | None = None
        self.last = 0.0
        # the same two instants by the wall clock (comparable across the actors' processes)
        self.first_wall = 0.0
        self.last_wall = 0.0
        self.idle_s = 0.0
        self.device_s = 0.0
        self.cpu_s = 0.0
        self.crashed: BaseException | None = None  # what ended the device thread (a bug): calls raise it
        self.thread = threading.Thread(target=self._loop, name="litegpu-batch-device", daemon=True)
        self.thread.start()

    def close(self) -> None:
        """End the device thread once the runs it has are done, and drop the model it holds (an actor
        lives as long as its process and never needs this; an in-process caller does)."""
        if self.thread.is_alive():
            self.jobs.put((None, None))
            self.thread.join()
        self.model = None

    def warm_up(self) -> None:
        """Run one submission of zero rows per submission in flight (the model's copies for them are
        made, allocated and their submissions recorded on their first run) and start the time split
        afresh, so that an actor's first batch is not slower and its host work a row counts rows
        only, as the single-process loop's does."""
        x = np.zeros((self.depth * self.rows, *self.inp[0]), self.inp[1])
        self.run(x, [None] * len(x))
        self.started, self.idle_s, self.device_s, self.cpu_s = None, 0.0, 0.0, 0.0
        self.first_wall = self.last_wall = 0.0

    def run(self, inputs: np.ndarray, errors: list[str | None]) -> list[np.ndarray]:
        """Run every row of ``inputs`` whose error is None; the outputs stacked by row (zeros on
        error rows).  A row the model rejects gets its error in ``errors``."""
        n = len(errors)
        outputs = [np.empty((n, *shape), dtype) for shape, dtype in self.outs]
        bad = [i for i in range(n) if errors[i] is not None]
        if bad:  # np.empty: the error rows' slots hold whatever the memory held
            for out in outputs:
                out[bad] = 0
        if len(bad) < n:
            shape, dtype = self.inp
            # the model takes C-contiguous rows of its input's dtype and shape; Ray Data hands such a batch over
            x = np.asarray(inputs)
            if x.dtype != dtype or not x.flags.c_contiguous or x.shape[1:] != shape:
                x = np.ascontiguousarray(x, dtype).reshape(n, *shape)
            job = _Job(x, outputs, errors, n - len(bad))
            self.jobs.put((job, self._spans(errors)))
            while not job.done.wait(0.25):  # never hang on a thread that is gone
                if not self.thread.is_alive():
                    break
            if not job.done.is_set():
                raise RuntimeError(f"litegpu batch: the actor's device thread ended ({self.crashed!r}); "
                                   "the job stops; the shards written so far are kept") from self.crashed
        return outputs

    def _spans(self, errors: list[str | None]) -> list[tuple[int, int]]:
        """The submissions of a batch: runs of consecutive rows without an error, cut every ``rows``."""
        spans: list[tuple[int, int]] = []
        i, n = 0, len(errors)
        while i < n:
            if errors[i] is not None:
                i += 1
                continue
            j = i
            while j < n and j - i < self.rows and errors[j] is None:
                j += 1
            spans.append((i, j))
            i = j
        return spans

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as e:  # rows' own errors are caught below; this is anything else
            self.crashed = e
            log.exception("litegpu batch: the device thread failed")

    def _serve(self) -> None:
        ring, model, sig, depth = self.ring, self.model, self.signature, self.depth
        cpu0 = 0.0
        while True:
            t = time.perf_counter()
            job, spans = self.jobs.get()
            if job is None:  # close()
                while ring:
                    self._finish(ring.popleft())
                return
            now = time.perf_counter()
            if self.started is None:
                self.started = now
                self.first_wall = time.time()
                cpu0 = time.thread_time()
            else:
                self.idle_s += now - t
            x, outputs = job.inputs, job.outputs
            for a, b in spans:
                if len(ring) >= depth:
                    self._finish(ring.popleft())
                try:
                    handle = model.run_rows_async(sig, [x[a:b]], [out[a:b] for out in outputs])
                except Exception as e:  # noqa: BLE001 - a row the model rejects is reported, the batch goes on
                    self._retry(job, a, b, e)
                    continue
                ring.append((handle, job, a, b))
            if self.jobs.empty():  # nothing queued behind: finish this batch now
                while ring:
                    self._finish(ring.popleft())
            self.last = time.perf_counter()
            self.last_wall = time.time()
            self.cpu_s = time.thread_time() - cpu0

    def timings(self) -> tuple[float, float, float, float]:
        """(idle, blocked on the device, host work, CPU time of the thread) seconds of the device
        thread so far."""
        busy = self.last - self.started if self.started is not None else 0.0
        return self.idle_s, self.device_s, max(0.0, busy - self.idle_s - self.device_s), self.cpu_s

    def _finish(self, entry: tuple[Any, _Job, int, int]) -> None:
        handle, job, a, b = entry
        try:
            t = time.perf_counter()
            handle.wait()
            self.device_s += time.perf_counter() - t
        except Exception as e:  # noqa: BLE001 - as above
            self._retry(job, a, b, e)
            return
        self._done(job, b - a)

    def _retry(self, job: _Job, a: int, b: int, e: BaseException) -> None:
        """Rows ``a:b`` failed as one submission (``e``): run them again one at a time, so that only
        the rows that fail get an error (a single row gets ``e``)."""
        if b - a == 1:
            self._failed(job, a, e)
            return
        for row in range(a, b):
            try:
                self.model.run_rows_async(self.signature, [job.inputs[row:row + 1]],
                                          [out[row:row + 1] for out in job.outputs]).wait()
            except Exception as e1:  # noqa: BLE001 - as above
                self._failed(job, row, e1)
                continue
            self._done(job, 1)

    @staticmethod
    def _done(job: _Job, rows: int) -> None:
        job.left -= rows
        if job.left == 0:
            job.done.set()

    @staticmethod
    def _failed(job: _Job, row: int, e: BaseException) -> None:
        job.errors[row] = f"inference failed: {type(e).__name__}: {e}"
        for out in job.outputs:
            out[row] = 0
        _DeviceFeed._done(job, 1)


#: CPUs a write task asks for (a shard write is one thread of numpy, Arrow and file I/O)
WRITE_CPUS = 1.0
#: the actor's bookkeeping columns (its timings, for the driver's summary) are named ``batch:<what>``
#: beside the shard's own columns (``path``, ``error``, the outputs): an output's column name never
#: holds a ``:`` (``litegpu run``'s file names, ``safe_name``)
BOOKKEEPING = "batch:"


class StartBarrier:
    """Ray actor (async, no CPU) the pool's actors meet at once their models are prepared, so that Ray
    Data sees them ready together (``START_TOGETHER_S`` in :mod:`litegpu.batch._job`).  An actor that
    arrives after the others (a replacement of one that died) passes at once."""

    def __init__(self, n: int):
        import asyncio

        self.n, self.arrived, self.all_in = n, 0, asyncio.Event()

    async def arrive(self, timeout: float) -> int:
        """Wait until ``n`` actors have arrived, at most ``timeout`` seconds; how many had."""
        import asyncio

        self.arrived += 1
        if self.arrived >= self.n:
            self.all_in.set()
        try:
            await asyncio.wait_for(self.all_in.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self.arrived


def _earliest(batch: Mapping[str, Any], key: str) -> float:
    """The earliest of a batch's per-row wall-clock times ``key`` (0.0 where it has none)."""
    t = batch.get(key)
    return float(np.min(t)) if t is not None and len(t) else 0.0


def _process_start() -> float:
    """When this process started, by the wall clock (0.0 where /proc does not say)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime, after the name
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return 0.0


class PrepareFailed(RuntimeError):
    """The one-off prepare (:func:`prepare_once`) an actor waited for failed; the driver reports the
    prepare's own error."""


def _prepared_files(ref: Any) -> dict[str, bytes]:
    """The cache entries of the one-off prepare ``ref`` (waiting for it)."""
    import ray

    try:
        return ray.get(ref)["cache_files"]
    except ray.exceptions.RayError as e:
        raise PrepareFailed(f"the model's one-off prepare failed: {getattr(e, 'cause', None) or e}") from None


def _start_together(barrier: Any, timeout: float) -> None:
    """Wait at ``barrier`` for the pool's other actors; never fail the actor for it (a barrier that is
    gone or late only costs the wait)."""
    import ray

    try:
        ray.get(barrier.arrive.remote(timeout), timeout=timeout + 10)
    except Exception as e:  # noqa: BLE001 - starting together is an optimisation, never a failure
        log.info("litegpu batch: starting without the other actors (%s)", e)


class InferenceActor:
    """One prepared model on one device; runs batches and returns their outputs.

    On a GPU backend the model is a ``CompiledModel`` with :data:`IN_FLIGHT` runs in flight, fed by
    one device thread (:class:`_DeviceFeed`; :func:`build_model`); Ray Data hands the actor up to
    :data:`ACTOR_CALLS` batches at once, so the next batch's rows are queued while one batch runs.
    The actor writes nothing: it returns each batch as its shard's Arrow table
    (:func:`~litegpu.batch._shards.shard_table`: built without copying the outputs, and about a
    fifth of the CPU time Ray Data's own conversion of numpy columns takes) with its bookkeeping
    columns, and the write stage (:func:`write_batch`, Ray tasks on other CPUs) writes the shard, so
    no shard write holds the GIL in the actor's process while its device thread needs it.  Ray Data
    restarts an actor that dies and re-runs the batches it held; their outputs only reach the write
    stage once a call has returned, so nothing is lost or doubled.
    """

    def __init__(self, spec: ModelSpec | Any, start: tuple[Any, float] | None = None):
        import ray

        # the actor's start, by the wall clock (BatchResult.timeline): its process started, this
        # constructor entered (Ray and litegpu imported), the spec fetched, the prepared cache entries
        # in hand, the model built, the warm-up run done, ready (the other actors met)
        phases = {"process": _process_start(), "entered": time.time()}
        if isinstance(spec, ray.ObjectRef):
            spec = ray.get(spec)
        phases["spec"] = time.time()
        if spec.prepared is not None:
            # the one-off prepare runs beside this actor's process start; wait for its entries
            spec.cache_files = _prepared_files(spec.prepared)
        phases["cache"] = time.time()
        device = _ray_device() if spec.device_from_ray else None
        m = build_model(spec, device=device)
        phases["built"] = time.time()
        if not isinstance(m.runner, _InterpreterRuns):  # the device thread is the actor's critical path
            sys.setswitchinterval(SWITCH_INTERVAL)
            native_arrow_pickle()
        self.info = m.info
        self.feed = _DeviceFeed(m.runner, m.input, [(shape, dtype) for _, shape, dtype in m.outputs], m.depth,
                                m.signature, m.rows)
        self.feed.warm_up()
        phases["warm"] = time.time()
        # the output columns in litegpu run's order: (name, index of its array among the feed's outputs)
        where = {pos: k for k, (pos, _, _) in enumerate(m.outputs)}
        self.columns = [(name, where[pos]) for pos, name in enumerate(m.names)]
        self.label = f"{self.info['host']}:{self.info['pid']}"
        if start is not None:  # (barrier, seconds): wait for the pool's other actors (START_TOGETHER_S)
            _start_together(*start)
        self.ready = phases["ready"] = time.time()  # wall clock: the driver sets it beside the pipeline's start
        self.phases = json.dumps(phases)
        log.info("litegpu batch actor %s: %s, prepared in %.2f s (warm start: %s)", self.label,
                 self.info["device"], self.info["init_s"], self.info["warm"])

    def __call__(self, batch: dict[str, np.ndarray]) -> Any:
        import pyarrow as pa

        paths = [str(p) for p in batch["path"]]
        errors: list[str | None] = [str(e) or None for e in batch["error"]]
        outputs = self.feed.run(batch["input"], errors)
        idle_s, device_s, host_s, cpu_s = self.feed.timings()
        table = shard_table(paths, errors, {name: outputs[k] for name, k in self.columns})
        n = len(paths)
        for name, value in (("actor", self.label), ("device", self.info["device"]), ("warm", str(self.info["warm"])),
                            ("phases", self.phases)):
            table = table.append_column(BOOKKEEPING + name, pa.array([value] * n, pa.string()))
        # the actor's device thread so far (BatchResult.actors keeps each actor's last values)
        for name, x in (("init_s", self.info["init_s"]), ("idle_s", idle_s), ("device_s", device_s),
                        ("host_s", host_s), ("cpu_s", cpu_s), ("t_ready", self.ready),
                        ("t_first", self.feed.first_wall), ("t_last", self.feed.last_wall),
                        ("t_pre", _earliest(batch, "t_pre")), ("t_pre_end", _earliest(batch, "t_pre_end"))):
            table = table.append_column(BOOKKEEPING + name, pa.array(np.full(n, x)))
        return table


def write_batch(table: Any, *, out_dir: str, fmt: str, metadata: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The write stage (Ray tasks after the actor pool): one shard of an actor's output table
    (:func:`litegpu.batch._shards.write_table`, named by the rows' paths); returns the rows'
    bookkeeping (no outputs) with the shard's name, its write time a row and the wall-clock time the
    shard was in place, for the driver's summary.  A retried write task gets the same block and
    writes the same shard under the same name."""
    t = time.perf_counter()
    names = table.column_names
    shard = write_table(Path(out_dir), fmt, table.select([c for c in names if not c.startswith(BOOKKEEPING)]),
                        metadata)
    n = table.num_rows
    summary = {"path": np.array(table.column("path").to_pylist(), dtype=object),
               "error": np.array([e or "" for e in table.column("error").to_pylist()], dtype=object)}
    for c in names:
        if c.startswith(BOOKKEEPING):
            summary[c[len(BOOKKEEPING):]] = table.column(c).to_numpy(zero_copy_only=False)
    summary["shard"] = np.full(n, shard, dtype=object)
    summary["write_s"] = np.full(n, (time.perf_counter() - t) / max(n, 1))  # per row: its shard's write
    summary["t_end"] = np.full(n, time.time())  # wall clock: comparable across the write tasks' processes
    return summary
