"""The driver side of ``litegpu batch``: list the inputs, skip what the output folder already holds,
prepare the model once, build the Ray Data pipeline, run it and summarise."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..cli._common import CliError
from ..cli._preprocess import IMAGE_EXTS, Preprocess, PreprocessOptions, read_metadata
from . import _stages
from ._shards import FORMATS, done_paths, has_shards
from ._stages import (
    ACTOR_CALLS,
    NOSET_CUDA,
    WORKER_MODULES,
    WRITE_CPUS,
    InferenceActor,
    ModelSpec,
    StartBarrier,
    prepare_once,
    preprocess_batch,
    read_table_file,
    warm_worker,
    write_batch,
)

__all__ = ["BatchResult", "run_batch", "list_inputs", "TABLE_EXTS"]

log = logging.getLogger("litegpu.batch")

TABLE_EXTS = (".parquet", ".arrow", ".feather", ".ipc")
RAY_HINT = "litegpu batch needs Ray Data: pip install 'litegpu[ray]'"
#: the pool's actors start their first batches together: each one, its model prepared, waits for the
#: others (:class:`~litegpu.batch._stages.StartBarrier`, at most this many seconds) before Ray Data
#: sees it ready, while the read and preprocessing tasks already run.  Ray Data feeds the first actor
#: that is ready; in a fresh Ray instance the actors' starts ended up to 0.6 s apart (NVIDIA H200, two
#: vulkan actors on one GPU), and the first one ran alone, at one actor's rate, for that long: 0.84x
#: of the pipelined rate on such a run against 0.93-0.95x on the others (docs/batch.md, "Start-up").
#: Ray Data's own ``wait_for_min_actors_s`` gates the whole pipeline instead: the preprocessing then
#: starts only with the actors, and they waited for batches 20-40% of the time (0.49-0.71x).  0: off
START_TOGETHER_S = 60.0
#: warm the CPU workers while the model is prepared: Ray Data's internal actors are created and one
#: short task per spare CPU imports what the read, preprocessing and write tasks import, so that the
#: pipeline's first tasks do not each pay a worker's start (GPU backends only: the CPU backend has no
#: prepare to overlap it with)
WARM_WORKERS = True
#: with a local Ray instance (no ``--address``, Ray not yet running) on a GPU backend, prepare the model
#: once in this process while Ray starts (a thread beside ``ray.init``, which mostly waits for Ray's
#: processes): the actors get its cache entries with their spec and never wait for a prepare task.
#: Joining a cluster takes no time to hide it in, and the driver may have no GPU: there the one-off
#: prepare is a Ray task beside the pipeline's start, as before
DRIVER_PREPARE = True
#: with a local Ray instance, its worker processes get :data:`~litegpu.batch._stages.NOSET_CUDA` from
#: their start (set while Ray starts), so GPU actors need no runtime environment of their own and Ray
#: can give them worker processes it has already started (with a runtime environment of their own,
#: each actor waits for a new process to start and import Ray); on a cluster (``--address``) or an
#: already running Ray the actors keep the runtime environment
SHARED_WORKERS = True
#: the first blocks of input paths (one per batch an actor holds at first) hold one batch each, so the
#: first preprocessing tasks end and the actors' first batches arrive a block's work sooner (a block
#: is otherwise four batches)
SMALL_FIRST_BLOCKS = True
#: batches of ``--batch-size`` rows a GPU actor's call takes at once (a preprocessing block holds four,
#: so a call is a block): the actor's device thread then has four times the rows queued from each of
#: the :data:`~litegpu.batch._stages.ACTOR_CALLS` calls it holds, and Ray Data's hand-over (a call,
#: the batch's conversion, its table back) is per four batches.  H100, face_detection_short_range,
#: vulkan, 16,000 rows, same run: the rate once rows flow / the pipelined rate, one actor 0.94, 1.08
#: against 1.04, 0.68 with 1 (its device thread waiting for batches 0-3% against 7-30%); two actors
#: 0.93, 0.89 against 0.75, 0.70; the whole call the same (11.1-12.5 s against 10.8-12.5 s: its first
#: row 0.6 s later, waiting for a whole block) (docs/performance.md)
ACTOR_BATCHES = 4
#: GPU actors per GPU when ``--actors`` is left out.  One actor now feeds its GPU as fast as a single
#: process: each call is a block of four batches (``ACTOR_BATCHES``), four calls held, 16 rows a
#: submission; a second actor on the same GPU only shares the device and adds a process's start.
#: H100, face_detection_short_range, vulkan, the rate once rows flow / litegpu's fastest single-process
#: pipelined rate, same runs: 20,000 rows, 1 actor 0.94, 1.08, 1.09, 1.02, 1.09, 1.01 against 2 actors
#: 0.93, 0.89, 0.90, 0.89, 0.95, 0.87; 100,000 rows 1.00 against 0.88; the whole call shorter with one
#: in every pair (docs/performance.md; two actors were the default while an actor took one batch a
#: call and its device thread waited for Ray Data's threads' GIL at each batch boundary)
ACTORS_PER_GPU = 1
#: a local instance's worker processes (the ones Ray starts with it, which the actors and the
#: pipeline's tasks take) import :data:`~litegpu.batch._stages.WORKER_MODULES` at their start (Ray's
#: ``preload_python_modules``), while the driver still prepares the model and builds the pipeline:
#: the actors' constructors and the first read and preprocessing tasks then start without a worker's
#: first imports (H100, 20,000 rows, one actor: the pipeline's start to its first row 1.96-2.11 s
#: against 2.78-2.82 s without, Ray's own start unchanged; docs/performance.md)
PRELOAD_WORKERS = True
#: stop a local instance without the second its autoscaler monitor costs: ``ray.shutdown()`` stops
#: Ray's processes one after the other, each sent SIGTERM and given up to a second before SIGKILL; the
#: monitor's SIGTERM handler reports its own end as an autoscaler failure to the GCS, which Ray has
#: stopped just before, so it waits out the whole second and is killed anyway.  It is killed first
#: instead (a local instance has nothing for it to report or keep)
FAST_STOP = True
#: a first run (no shard in the output folder yet) that starts its local instance lists its inputs in
#: a thread while ``ray.init`` waits for Ray's processes (after Ray's import, which holds the GIL):
#: listing 100,000 files took the driver 0.6-1.0 s on an H100 host, and beside Ray's start the first
#: row came 0.4-0.6 s sooner (docs/performance.md); a million files take several seconds
LIST_BESIDE_START = True
#: the GPU share the one-off prepare takes (each GPU actor gives up this fraction of its share, so that
#: the prepare runs beside the actors' start instead of holding one back)
PREPARE_GPUS = 0.01


@dataclass
class BatchResult:
    """What a :func:`run_batch` call did (``litegpu batch --json`` prints it)."""

    model: str
    backend: str
    input: str
    output: str
    format: str
    items: int = 0  # rows written by this run
    failures: int = 0  # rows written with an error
    skipped: int = 0  # inputs already in the output folder, not run again
    shards: int = 0
    seconds: float = 0.0  # from the pipeline's start to its last row
    # the pipeline's fixed start: from its start to its first output row in place (the first shard
    # written: Ray Data's start, the actors' prepare, the first batch through every stage)
    start_s: float = 0.0
    items_per_s: float = 0.0
    # the rate once rows flow: rows after the first actor batch over the time from its end to the last
    # batch's end, by the actors' clocks (leaves out the pipeline's start: Ray workers, the actors'
    # prepare); 0 with a single batch
    steady_items_per_s: float = 0.0
    # the rate over the second half of the rows (from the batch that completes the first half to the
    # last one): once the CPU stage, the actors and the write stage are all at speed; 0 with few batches
    late_items_per_s: float = 0.0
    # per actor: device, items, init_s, warm; where its time went from its first batch to its last
    # (seconds): its device thread waiting for batches (idle_s), blocked on the device (device_s),
    # doing host work (host_s: runs submitted, and on the CPU inputs written and outputs read) and
    # that thread's CPU time (cpu_s: host_s well above it is waiting for the GIL); and the shard writes
    # of its rows (write_s, in the write stage's tasks, outside the actor); when it was ready (ready_s:
    # its prepare done) and when its device thread got its first and last batch (first_s, last_s),
    # seconds from the pipeline's start
    actors: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)  # the first failures: path, error
    prepare: dict[str, Any] | None = None  # the one-off preparation (GPU backends)
    # the call's start-up, step by step: seconds from the call's start (run_batch entered) to each
    # event, by the wall clock of the process it happened in, in time order: the driver's (model_loaded,
    # inputs_listed, ray_started, prepare_received (prepared in the driver) or prepare_submitted (a Ray
    # task), workers_warming, inputs_put, pipeline_built, pipeline_started, first_row and last_row (the
    # first and last shard in place), done, stats_done (with stats=True), ray_stopped (a local instance
    # shut down)), the one-off prepare's (prepare_started, prepare_done), the first preprocessing
    # task's (preprocess_started, preprocess_done) and each actor's (actorN.process: its process
    # started, .entered: its constructor, Ray and litegpu imported, .spec, .cache: the prepared cache
    # entries in hand, .built: the model prepared, .warm: its warm-up run done, .ready: the other
    # actors met, .first_batch)
    timeline: dict[str, float] = field(default_factory=dict)
    ray: dict[str, Any] = field(default_factory=dict)  # address, resources, actor resources
    stats: str = ""  # Ray Data's per-operator statistics (``Dataset.stats()``), with ``run_batch(stats=True)``

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_inputs(input: str | os.PathLike[str], exclude: Path | None = None) -> tuple[str, list[str]]:
    """``("files", image and .npy paths)`` or ``("table", Parquet/Arrow files)``: absolute, sorted;
    a folder is searched recursively (hidden entries and the folder ``exclude``, the output, skipped)."""
    p = Path(input)
    if not p.exists():
        raise CliError(f"input not found: {input}")
    skip = os.fspath(exclude.resolve()) if exclude is not None else None
    if p.is_file():
        files = [os.path.realpath(p)]
        if skip is not None and _under(files[0], skip):
            files = []
    else:
        files = _files_under(os.path.realpath(p), skip)
    images = [f for f in files if os.path.splitext(f)[1].lower() in IMAGE_EXTS]
    tables = [f for f in files if os.path.splitext(f)[1].lower() in TABLE_EXTS]
    if images and tables:
        raise CliError(f"{input} holds both images and Parquet/Arrow files; give one kind per job")
    if tables:
        return "table", tables
    if not images:
        raise CliError(f"no images ({', '.join(IMAGE_EXTS)}) or Parquet/Arrow files ({', '.join(TABLE_EXTS)}) "
                       f"in {input}")
    return "files", images


def _holds_an_input(input: str | os.PathLike[str]) -> bool:
    """Whether ``input`` is, or holds (not hidden, at any depth), a file :func:`list_inputs` takes: a
    look that ends at the first one, so that a wrong input is still reported before Ray starts."""
    exts = IMAGE_EXTS + TABLE_EXTS
    p = Path(input)
    if p.is_file():
        return p.suffix.lower() in exts
    if not p.is_dir():
        return False
    return any(os.path.splitext(f)[1].lower() in exts for f in _walk_files(os.path.realpath(p), None))


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _walk_files(root: str, skip: str | None) -> Iterator[str]:
    """The files below the real folder ``root`` (hidden entries and the folder ``skip`` left out, symbolic
    links followed, each folder once) as real paths, in no order, one ``scandir`` per folder and no per-file
    path resolution (a job over 12,000 inputs spent about a second resolving paths).  A generator, so that
    :func:`_holds_an_input` stops at the first file it takes."""
    stack, seen = [root], set()
    while stack:
        d = stack.pop()
        if d in seen or (skip is not None and _under(d, skip)):
            continue
        seen.add(d)
        with os.scandir(d) as entries:
            for e in entries:
                if e.name.startswith("."):
                    continue
                if e.is_dir():
                    stack.append(os.path.realpath(e.path) if e.is_symlink() else e.path)
                elif e.is_file():
                    f = os.path.realpath(e.path) if e.is_symlink() else e.path
                    if skip is None or not _under(f, skip):
                        yield f


def _files_under(root: str, skip: str | None) -> list[str]:
    """:func:`_walk_files`, each file once (a file linked twice is one input), sorted by its path's parts."""
    return sorted(set(_walk_files(root, skip)), key=lambda f: f.split(os.sep))


def _input_detail(model: Any) -> dict[str, Any]:
    from ..cli._common import model_io_details

    details = model_io_details(model)
    if len(details) != 1:
        raise CliError(f"{model.name} has {len(details)} inputs; litegpu batch feeds models with one (image) input")
    sg = model.model.subgraphs[0]
    q = sg.tensors[sg.inputs[0]].quantization
    quant = (float(q.scale[0]), int(q.zero_point[0])) if q is not None and q.scale.size == 1 else (0.0, 0)
    return {**details[0], "quantization": quant}


def preprocessing(lm: Any, options: PreprocessOptions | None = None) -> Preprocess:
    """How batch turns an input into the model's tensor: :meth:`Preprocess.for_model`, exactly what
    ``litegpu run`` uses (the bundled MediaPipe models letterboxed)."""
    return Preprocess.for_model(lm.path, _input_detail(lm), options or PreprocessOptions(),
                                read_metadata(lm.model, lm.data))


def _ray_running() -> bool:
    """Whether this process has Ray initialised (without importing Ray)."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(getattr(ray, "is_initialized", lambda: False)())


#: the GCS address of the local instance :func:`_start_local_ray` started in this process, while it runs
_LOCAL_INSTANCE: str | None = None


def _own_local_ray() -> bool:
    """Whether the Ray this process runs is a local instance :func:`_start_local_ray` started (and
    still runs): its worker processes have the GPU settings and the preloaded modules, and this
    machine's GPUs are the cluster's, so a call may treat it as its own local instance."""
    if _LOCAL_INSTANCE is None or not _ray_running():
        return False
    return str(sys.modules["ray"].get_runtime_context().gcs_address) == _LOCAL_INSTANCE


def _start_local_ray(ray: Any, num_cpus: int | None = None, num_gpus: int | None = None, *,
                     log_to_driver: bool = True) -> None:
    """Start a local Ray instance as ``litegpu batch`` without ``--address`` does: its worker processes
    get :data:`~litegpu.batch._stages.NOSET_CUDA` (:data:`SHARED_WORKERS`) and preload
    :data:`~litegpu.batch._stages.WORKER_MODULES` (:data:`PRELOAD_WORKERS`); no dashboard.
    :func:`run_batch` calls in this process use it as their own local instance and leave it running
    (a long-lived process, or a test session, pays Ray's start once); :func:`_stop_local_ray` stops it."""
    global _LOCAL_INSTANCE
    kw: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus}
    env = dict(NOSET_CUDA) if SHARED_WORKERS else {}
    if PRELOAD_WORKERS:
        kw["_system_config"] = {"preload_python_modules": list(WORKER_MODULES)}
        if "OMP_NUM_THREADS" not in os.environ:
            # Ray sets a task's OMP_NUM_THREADS (1 for every task and actor here, which take at most a
            # CPU) only when the task starts, too late for a BLAS that numpy loaded with the preloaded
            # modules: it would keep a thread per core, and the CPU interpreter's sums would no longer
            # be `OMP_NUM_THREADS=1 litegpu run`'s to the bit.  So the workers get it from their start
            # (a value set by the user is left to Ray, as Ray leaves it)
            env["OMP_NUM_THREADS"] = "1"
    with _worker_env(env):
        ray.init(**kw, include_dashboard=False, log_to_driver=log_to_driver, logging_level=logging.WARNING)
    _LOCAL_INSTANCE = str(ray.get_runtime_context().gcs_address)


@contextlib.contextmanager
def _worker_env(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in this process while a local Ray instance starts: its processes, the workers
    included, inherit it; this process's environment is put back afterwards."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        raise CliError(f"{RAY_HINT} ({e})") from None
    return ray


def run_batch(model: str | os.PathLike[str], input: str | os.PathLike[str], output: str | os.PathLike[str], *,
              backend: str = "cpu", config: Any = None, actors: int | None = None, batch_size: int = 32,
              address: str | None = None, output_format: str = "parquet", column: str | None = None,
              id_column: str | None = None, preprocess: PreprocessOptions | None = None,
              precision: str | None = None, options: Mapping[str, Any] | None = None,
              num_cpus: int | None = None, gpus_per_actor: float | None = None,
              progress: bool = True, keep_errors: int = 20, stats: bool = False,
              in_flight: int | None = None, num_gpus: int | None = None) -> BatchResult:
    """Run ``model`` over every image, ``.npy`` file or Parquet/Arrow row under ``input`` on Ray Data,
    writing one output row per input into ``output`` (see :mod:`litegpu.batch`).

    Ray: an already initialised Ray is used as it is (one :func:`_start_local_ray` started as this
    call's local instance, left running); else ``address`` (``ray://host:10001`` or ``auto``) joins a
    cluster; else a local Ray instance is started (``num_cpus`` CPUs, default all; ``num_gpus`` GPUs,
    default those Ray finds) and shut down at the end.  ``actors``: size of the
    model actor pool (default: :data:`ACTORS_PER_GPU` per GPU of the cluster for a GPU backend, else
    half the CPUs).  Raises :class:`litegpu.cli._common.CliError` for
    bad arguments (the CLI prints it as one line).  ``stats``: keep Ray Data's per-operator
    statistics in :attr:`BatchResult.stats` (where the time went, stage by stage).  ``in_flight``:
    submissions in flight in each GPU actor (default :data:`~litegpu.batch._stages.IN_FLIGHT`, 3), each
    of up to :data:`~litegpu.batch._stages.ROWS_PER_SUBMIT` rows (16) run as one submission.
    """
    from ..cli._common import backend_options, load_config_or_none, load_model, resolve_backend

    t_call = time.time()  # the start of the call's timeline (BatchResult.timeline)
    marks: dict[str, float] = {}
    if output_format not in FORMATS:
        raise CliError(f"unknown output format {output_format!r} (choose from {', '.join(FORMATS)})")
    if batch_size < 1:
        raise CliError(f"--batch-size must be at least 1, got {batch_size}")
    if actors is not None and actors < 1:
        raise CliError(f"--actors must be at least 1, got {actors}")
    if in_flight is not None and not 1 <= in_flight <= 16:
        raise CliError(f"--in-flight must be between 1 and 16, got {in_flight}")
    try:
        import pyarrow  # noqa: F401 - shards are Parquet; Ray itself is imported only when there is work
    except ImportError as e:
        raise CliError(f"{RAY_HINT} ({e})") from None
    lm = load_model(os.fspath(model))
    pre = preprocessing(lm, preprocess)
    cfg = load_config_or_none(os.fspath(config) if isinstance(config, os.PathLike) else config)
    opts = backend_options(cfg, backend, precision, options)
    backend, opts = resolve_backend(lm, backend, cfg, opts)
    marks["model_loaded"] = time.time()
    out_dir = Path(output).resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"output {output} exists and is not a folder")
    result = BatchResult(model=lm.path, backend=backend, input=os.fspath(input), output=str(out_dir),
                         format=output_format)
    # a local instance: one this call starts (no --address, Ray not running), or one _start_local_ray
    # started earlier in this process (kept running after the call)
    local = not address and (not _ray_running() or _own_local_ray())
    # a first run (no shard in the output folder: every input will run) that starts its own instance
    # lists its inputs while ray.init waits for Ray's processes; otherwise first, so that a rerun with
    # nothing left to do, or a wrong input, never starts Ray
    beside = (LIST_BESIDE_START and local and not _ray_running() and not has_shards(out_dir)
              and _holds_an_input(input))
    kind, sources, done, todo = "", [], set(), None
    if not beside:
        kind, sources, done, todo = _listing(input, out_dir, result, marks)
        if todo is not None and not todo:
            log.info("litegpu batch: all %d inputs are already in %s; nothing to run", len(sources), out_dir)
            return result
    started = False
    early: Future | None = None  # the one-off prepare in this process, beside Ray's start (DRIVER_PREPARE)
    if local and backend != "cpu" and DRIVER_PREPARE:  # (before Ray is even imported: that takes a second too)
        spec = ModelSpec(name=lm.name, data=lm.data, backend=backend, options=opts, config=cfg)
        early = ThreadPoolExecutor(1, thread_name_prefix="litegpu-batch-prepare").submit(prepare_once, spec)
    try:
        ray = _ray()
        listing = ThreadPoolExecutor(1, thread_name_prefix="litegpu-batch-list").submit(
            _listing, input, out_dir, result, marks) if beside else None
        try:
            if not ray.is_initialized():
                if address:
                    ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
                else:
                    _start_local_ray(ray, num_cpus, num_gpus)
                started = True
            marks["ray_started"] = time.time()
        finally:
            if listing is not None:
                wait([listing])
        if listing is not None:
            kind, sources, done, todo = listing.result()  # (a listing error ends the call; Ray is stopped below)
        return _run(ray, lm, pre, backend, opts, cfg, kind, sources, done, todo,
                    out_dir, output_format, result, actors=actors, batch_size=batch_size, column=column,
                    id_column=id_column, gpus_per_actor=gpus_per_actor,
                    progress=progress, keep_errors=keep_errors, stats=stats, in_flight=in_flight, early=early,
                    marks=marks, t_call=t_call, shared_env=local)
    finally:
        if early is not None:
            wait([early])  # (a prepare still running when Ray failed to start: never leave it behind)
        if started:
            if local:
                _stop_local_ray(ray)
            else:
                ray.shutdown()  # (joined a cluster: only this driver leaves it)
        result.timeline["ray_stopped"] = time.time() - t_call


def _stop_local_ray(ray: Any) -> None:
    """``ray.shutdown()`` of the local instance :func:`_start_local_ray` started; with
    :data:`FAST_STOP`, its autoscaler monitor killed first (Ray's process table is internal: without
    it, the plain stop)."""
    global _LOCAL_INSTANCE
    _LOCAL_INSTANCE = None
    if FAST_STOP:
        try:
            from ray._private import ray_constants
            from ray._private.worker import _global_node

            infos = _global_node.all_processes.get(ray_constants.PROCESS_TYPE_MONITOR, []) if _global_node else []
            for info in infos:
                info.process.kill()
            for info in infos:
                info.process.wait(timeout=1.0)
        except Exception as e:  # noqa: BLE001 - only a shorter stop; ray.shutdown() stops it anyway
            # said at INFO, not DEBUG: a Ray whose internals moved costs every call about a second
            log.info("litegpu batch: Ray's autoscaler monitor could not be stopped first (%s: %s); "
                     "ray.shutdown() stops it, about 1 s slower", type(e).__name__, e)
    ray.shutdown()


def _listing(input: str | os.PathLike[str], out_dir: Path, result: BatchResult,
             marks: dict[str, float]) -> tuple[str, list[str], set[str], list[str] | None]:
    """List the inputs and the rows ``out_dir`` already holds: (kind, sources, done, the files to run
    (None for tables)); fills ``result.skipped`` for files and the ``inputs_listed`` mark."""
    kind, sources = list_inputs(input, exclude=out_dir)
    done = done_paths(out_dir)
    todo: list[str] | None = None
    if kind == "files":
        todo = [s for s in sources if s not in done]
        result.skipped = len(sources) - len(todo)
    marks["inputs_listed"] = time.time()
    return kind, sources, done, todo


def _run(ray: Any, lm: Any, pre: Preprocess, backend: str, opts: dict[str, Any], cfg: Any, kind: str,
         sources: Sequence[str], done: set[str], todo: Sequence[str] | None, out_dir: Path, fmt: str,
         result: BatchResult, *, actors: int | None, batch_size: int, column: str | None, id_column: str | None,
         gpus_per_actor: float | None, progress: bool, keep_errors: int, stats: bool = False,
         in_flight: int | None = None, early: Future | None = None, marks: dict[str, float] | None = None,
         t_call: float | None = None, shared_env: bool = False) -> BatchResult:
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress
    res = ray.cluster_resources()
    cpus, gpus = float(res.get("CPU", 1)), float(res.get("GPU", 0))
    on_gpu = backend != "cpu" and gpus > 0
    if actors is None:  # ACTORS_PER_GPU on each GPU; without GPUs, half the CPUs
        actors = max(1, ACTORS_PER_GPU * int(gpus)) if on_gpu else max(1, int(cpus) // 2)
    actor_gpus = (gpus_per_actor if gpus_per_actor is not None else min(1.0, gpus / actors)) if on_gpu else 0.0
    if on_gpu and gpus_per_actor is None:
        # leave each GPU a sliver for the one-off prepare, which runs while the actors start (a pool that
        # took whole GPUs would hold one actor back until the prepare ended)
        actor_gpus = round(actor_gpus * (1.0 - PREPARE_GPUS), 4)
    # leave a CPU for the reading, preprocessing and writing tasks, else the pool could starve them
    # (an actor writes nothing itself: its device thread is its one busy core)
    actor_cpus = round(min(1.0, max(0.1, (cpus - 1) / actors)), 2)
    # Ray Data's actor pools restart a dead actor and resubmit its batch (max_restarts and
    # max_task_retries -1 by default); its outputs reach the write stage only from calls that
    # returned, and shards named by content make a retried write harmless.
    remote: dict[str, Any] = {"num_cpus": actor_cpus}
    if actor_gpus:
        remote["num_gpus"] = actor_gpus
        if not (shared_env and SHARED_WORKERS):
            # a runtime environment of their own: Ray starts new worker processes for the actors
            remote["runtime_env"] = {"env_vars": dict(NOSET_CUDA)}
    if "device" in opts:  # the user pinned a device: every actor uses it
        on_gpu_device = False
    else:
        on_gpu_device = bool(actor_gpus)
    # actors the cluster can hold now (the rest wait for resources; the ones placed start without them)
    placed = min(actors, int(cpus / actor_cpus + 1e-6), int(gpus / actor_gpus + 1e-6) if actor_gpus else actors)
    if placed < actors:
        log.warning("litegpu batch: the cluster has room for %d of the %d actors now (%g CPUs, %g GPUs; each actor "
                    "takes %g CPUs and %g GPUs); the job starts with those (lower --actors or --gpus-per-actor)",
                    placed, actors, cpus, gpus, actor_cpus, actor_gpus)
    barrier = None
    if START_TOGETHER_S > 0 and placed > 1:  # created first: its process starts while the model is prepared
        barrier = ray.remote(StartBarrier).options(num_cpus=0).remote(placed)
    result.ray = {"address": ray.get_runtime_context().gcs_address, "cluster": {k: res[k] for k in ("CPU", "GPU")
                                                                                if k in res},
                  "actors": actors, "actor_cpus": actor_cpus, "actor_gpus": actor_gpus}
    spec = ModelSpec(name=lm.name, data=lm.data, backend=backend, options=opts, config=cfg,
                     device_from_ray=on_gpu_device, in_flight=in_flight or 0,
                     rows_per_submit=_stages.ROWS_PER_SUBMIT)
    marks = marks if marks is not None else {}
    t_call = t_call if t_call is not None else time.time()
    prep_ref, prep_wall = None, time.time()
    if early is not None:
        # prepared in this process while Ray started: the actors get the entries with their spec
        try:
            prep = early.result()
        except Exception as e:  # noqa: BLE001 - any failure to prepare is the job's one clear error
            raise CliError(f"{lm.name} cannot be prepared on backend {backend}: {e}") from None
        spec.cache_files = prep["cache_files"]
        _fill_prepare(result, prep, prep["info"]["t_start"], where="driver, beside Ray's start")
    elif backend != "cpu":
        # the one-off prepare fills a serialization cache whose entries every actor imports, so that
        # each actor's own prepare is a warm start; it runs while Ray Data starts and the actors' processes
        # start and import litegpu (each actor waits for it only before its own prepare)
        prep_remote = {**remote, "num_gpus": PREPARE_GPUS} if actor_gpus and gpus_per_actor is None else remote
        prep_ref = ray.remote(prepare_once).options(**prep_remote, max_retries=1).remote(spec)
        spec.prepared = prep_ref
    marks["prepare_submitted" if early is None else "prepare_received"] = time.time()
    if backend != "cpu" and WARM_WORKERS:  # (not waited for: they end by themselves, half a second after they start)
        # where the actors can take worker processes Ray started with itself (one per CPU: SHARED_WORKERS),
        # the warm-up leaves them one each, and one for each of Ray Data's helper actors and the barrier
        shared = shared_env and SHARED_WORKERS
        _warm_workers(ray, int(cpus) - placed - 4 if shared else int(cpus - actor_cpus))
        marks["workers_warming"] = time.time()
    spec_ref = ray.put(spec)
    # a GPU actor holds several batches, so that its device thread never waits at a batch boundary;
    # CPU actors take one at a time: their rows run on the CPU anyway, and threads there only contend
    # for the GIL (measured: 0.5x the rate, preprocessing fused in)
    calls = ACTOR_CALLS if actor_gpus else 1
    metadata = {"model": lm.name, "model_sha256": lm.fingerprint, "backend": backend}

    if kind == "files":
        assert todo is not None
        ds = _path_blocks(ray, todo, batch_size, first=placed * calls if SMALL_FIRST_BLOCKS else 0)
        marks["inputs_put"] = time.time()
    else:
        skip_ref = ray.put(sorted(done)) if done else None
        ds = ray.data.from_items([{"file": f} for f in sources], override_num_blocks=len(sources))
        ds = ds.flat_map(read_table_file, fn_kwargs={"column": column, "id_column": id_column, "skip": skip_ref})
    ds = ds.map_batches(preprocess_batch, fn_kwargs={"pre": pre}, batch_size=batch_size, batch_format="numpy")
    start = (barrier, START_TOGETHER_S) if barrier is not None else None
    ds = ds.map_batches(InferenceActor, fn_constructor_kwargs={"spec": spec_ref, "start": start},
                        batch_size=batch_size * ACTOR_BATCHES if actor_gpus else batch_size, batch_format="numpy",
                        compute=ray.data.ActorPoolStrategy(size=actors, max_concurrent_calls_per_actor=calls,
                                                           enable_true_multi_threading=calls > 1), **remote)
    # the write stage: each actor batch's outputs become one shard in a CPU task of its own, outside
    # the actor's process (a Parquet shard costs about 0.2 ms a row, much of it holding the GIL, which
    # the actor's device thread would wait for); batch_size None: one shard per block the actors
    # return (the batches of one actor task, which Ray Data gathers up to its block size; a retried
    # task returns the same block, hence the same shard)
    ds = ds.map_batches(write_batch, fn_kwargs={"out_dir": str(out_dir), "fmt": fmt, "metadata": metadata},
                        batch_size=None, batch_format="pyarrow", num_cpus=WRITE_CPUS)
    marks["pipeline_built"] = time.time()
    t0, wall0 = time.perf_counter(), time.time()
    per_actor: dict[str, dict[str, Any]] = {}
    shards: set[str] = set()
    ends: list[tuple[float, int]] = []  # (when an actor finished a batch, its rows)
    firsts = {"preprocess_started": math.inf, "preprocess_done": math.inf}  # the first preprocessing task's
    try:
        for b in ds.iter_batches(batch_format="numpy", batch_size=None):
            _collect(b, result, per_actor, shards, keep_errors)
            ends.extend(_batch_ends(b))
            for k, col in (("preprocess_started", "t_pre"), ("preprocess_done", "t_pre_end")):
                t = np.asarray(b[col], np.float64)
                if (t > 0).any():
                    firsts[k] = min(firsts[k], float(t[t > 0].min()))
    except ray.exceptions.RayError as e:
        if prep_ref is not None:  # the actors failed because the model cannot be prepared: say why
            _prepare_result(ray, prep_ref, lm.name, backend, prep_wall, result, timeout=10.0)
        first = str(e).strip().splitlines()
        raise CliError(f"the Ray job failed after {result.items} rows ({type(e).__name__}: "
                       f"{first[-1] if first else e}); rows written so far are kept, rerun to go on") from e
    finally:
        if barrier is not None:  # (on a cluster that outlives the job)
            ray.kill(barrier)
    result.seconds = time.perf_counter() - t0
    marks["pipeline_started"] = wall0
    if prep_ref is not None:
        _prepare_result(ray, prep_ref, lm.name, backend, prep_wall, result)
    result.items_per_s = result.items / result.seconds if result.seconds > 0 else 0.0
    ends.sort()
    if ends:
        result.start_s = max(0.0, ends[0][0] - wall0)
    if len(ends) > 1 and ends[-1][0] > ends[0][0]:
        result.steady_items_per_s = (sum(n for _, n in ends) - ends[0][1]) / (ends[-1][0] - ends[0][0])
        result.late_items_per_s = _late_rate(ends)
    result.shards = len(shards)
    if ends:
        marks["first_row"], marks["last_row"] = ends[0][0], ends[-1][0]
    marks.update({k: v for k, v in firsts.items() if v < math.inf})
    marks["done"] = time.time()
    if stats:
        result.stats = ds.stats()
        marks["stats_done"] = time.time()
    if result.prepare is not None:
        for k in ("started", "done"):
            if result.prepare.get(f"t_{k}"):
                marks[f"prepare_{k}"] = result.prepare.pop(f"t_{k}")
    for i, a in enumerate(sorted(per_actor.values(), key=lambda a: a["actor"])):
        for k, t in json.loads(a.pop("phases") or "{}").items():
            if t:
                marks[f"actor{i}.{k}"] = t
        if a["t_first"]:
            marks[f"actor{i}.first_batch"] = a["t_first"]
    result.timeline.update(sorted(((k, round(t - t_call, 4)) for k, t in marks.items()), key=lambda kv: kv[1]))
    for a in per_actor.values():  # the actors' wall clocks -> seconds from the pipeline's start
        for k in ("ready", "first", "last"):
            t = a.pop(f"t_{k}")
            a[f"{k}_s"] = t - wall0 if t else None
    result.actors = sorted(per_actor.values(), key=lambda a: a["actor"])
    if kind == "table":
        result.skipped = len(done)
    return result


def _prepare_result(ray: Any, ref: Any, name: str, backend: str, wall: float, result: BatchResult, *,
                    timeout: float | None = None) -> None:
    """Fill ``result.prepare`` from the one-off prepare ``ref`` (submitted at wall-clock ``wall``); a
    prepare that failed raises its error as a :class:`CliError`."""
    try:
        prep = ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        return
    except ray.exceptions.RayTaskError as e:
        raise CliError(f"{name} cannot be prepared on backend {backend}: {getattr(e, 'cause', None) or e}") from None
    _fill_prepare(result, prep, wall, where="a Ray task beside the pipeline's start")


def _fill_prepare(result: BatchResult, prep: Mapping[str, Any], wall: float, *, where: str) -> None:
    """``result.prepare`` from :func:`prepare_once`'s dict ``prep``, its seconds counted from the
    wall-clock time ``wall`` (its submission) to its end; ``t_started``/``t_done`` (wall clock) are
    moved into the timeline by :func:`_run`."""
    info = prep["info"]
    result.prepare = {**{k: v for k, v in info.items() if k not in ("t_start", "t_end")},
                      "where": where, "seconds": max(0.0, info.get("t_end", wall) - wall),
                      "t_started": info.get("t_start"), "t_done": info.get("t_end"),
                      "cache_entries": len(prep["cache_files"]),
                      "cache_bytes": sum(len(b) for b in prep["cache_files"].values())}


def _warm_workers(ray: Any, n: int) -> list[Any]:
    """Start Ray Data's internal actors and ``n`` warm-up tasks (:func:`warm_worker`), one per CPU
    worker, without waiting for them; their refs."""
    try:  # Ray Data's own helpers, created on a dataset's first execution otherwise (internal API: optional)
        from ray.data._internal.execution.autoscaling_requester import (
            get_or_create_autoscaling_requester_actor,
        )
        from ray.data._internal.execution.node_trackers.actor_location import (
            get_or_create_actor_location_tracker,
        )
        from ray.data._internal.stats import get_or_create_stats_actor

        for make in (get_or_create_stats_actor, get_or_create_autoscaling_requester_actor,
                     get_or_create_actor_location_tracker):
            make()
    except Exception as e:  # noqa: BLE001 - only a head start; the pipeline creates them anyway
        log.debug("litegpu batch: Ray Data's actors not created ahead (%s)", e)
    task = ray.remote(warm_worker).options(num_cpus=1, max_retries=0)
    until = time.time() + 0.5  # each holds its worker that long, so that the n tasks take n workers
    return [task.remote(until) for _ in range(max(0, min(n, 256)))]


def _path_blocks(ray: Any, paths: Sequence[str], batch_size: int, first: int) -> Any:
    """The dataset of input paths (column ``path``): blocks of four batches (at most 1000 blocks),
    except the first ``first`` blocks, of one batch each (:data:`SMALL_FIRST_BLOCKS`).  Built here
    (``from_blocks``: the blocks' metadata computed in this process; ``from_arrow`` runs a Ray task per
    block for it, which in a fresh instance waits for workers to start: 2.5 s on the development
    machine); ``from_items`` with even blocks where Ray Data lacks ``from_blocks``."""
    import pyarrow as pa

    from_blocks = getattr(ray.data, "from_blocks", None)
    if from_blocks is None or not first:
        big = max(batch_size * 4, math.ceil(len(paths) / 1000))
        return ray.data.from_items([{"path": p} for p in paths], override_num_blocks=math.ceil(len(paths) / big))
    edges = block_edges(len(paths), batch_size, first)
    return from_blocks([pa.table({"path": pa.array(paths[a:b], pa.string())})
                        for a, b in zip(edges, edges[1:], strict=False)])


def block_edges(n: int, batch_size: int, first: int) -> list[int]:
    """Where :func:`_path_blocks` cuts ``n`` inputs: ``first`` blocks of one batch, then blocks of four
    batches (larger where that would make more than 1000 blocks); ``[0, ..., n]``."""
    big = max(batch_size * 4, math.ceil(n / 1000))
    edges, i = [0], 0
    while i < n:
        i = min(n, i + (batch_size if len(edges) <= first else big))
        edges.append(i)
    return edges


def _late_rate(ends: Sequence[tuple[float, int]]) -> float:
    """Rows a second over the second half of a job's rows: from the batch that completes the first half
    to the last batch (``ends``: (end, rows) in time order); 0.0 where that span is empty."""
    half, done = sum(n for _, n in ends) / 2, 0
    for k, (t, n) in enumerate(ends):
        done += n
        if done >= half:
            rows = sum(m for _, m in ends[k + 1:])
            return rows / (ends[-1][0] - t) if rows and ends[-1][0] > t else 0.0
    return 0.0


def _batch_ends(b: Mapping[str, Any]) -> list[tuple[float, int]]:
    """The actors' batches in ``b`` (the rows of one actor batch share its ``t_end``): (end, rows)."""
    t, counts = np.unique(np.asarray(b["t_end"], np.float64), return_counts=True)
    return [(float(x), int(n)) for x, n in zip(t, counts, strict=True)]


def _collect(b: Mapping[str, Any], result: BatchResult, per_actor: dict[str, dict[str, Any]], shards: set[str],
             keep_errors: int) -> None:
    """Fold one batch of the actors' summary rows into ``result``."""
    n = len(b["path"])
    result.items += n
    for i in range(n):
        err = str(b["error"][i])
        if err:
            result.failures += 1
            if len(result.errors) < keep_errors:
                result.errors.append({"path": str(b["path"][i]), "error": err})
        shards.add(str(b["shard"][i]))
        a = per_actor.setdefault(str(b["actor"][i]), {"actor": str(b["actor"][i]), "device": str(b["device"][i]),
                                                      "items": 0, "init_s": float(b["init_s"][i]),
                                                      "warm": str(b["warm"][i]), "idle_s": 0.0,
                                                      "device_s": 0.0, "host_s": 0.0, "cpu_s": 0.0,
                                                      "write_s": 0.0, "t_ready": float(b["t_ready"][i]),
                                                      "t_first": float(b["t_first"][i]), "t_last": 0.0,
                                                      "phases": str(b["phases"][i])})
        a["items"] += 1
        for k in ("idle_s", "device_s", "host_s", "cpu_s", "t_last"):  # the actor's running totals: the latest is the largest
            a[k] = max(a[k], float(b[k][i]))
        a["write_s"] += float(b["write_s"][i])


def summary_lines(r: BatchResult) -> list[str]:
    """The human summary ``litegpu batch`` prints."""
    lines = [f"{Path(r.model).name} on {r.backend}: {r.items} rows written to {r.output} ({r.format}, "
             f"{r.shards} shards) in {r.seconds:.1f} s ({r.start_s:.1f} s to the first row), "
             f"{r.items_per_s:.1f} items/s ({r.steady_items_per_s:.1f} once flowing); {r.failures} failed, "
             f"{r.skipped} already done"]
    if r.prepare:
        lines.append(f"prepared once in {r.prepare['seconds']:.1f} s on {r.prepare['device']}; "
                     f"{r.prepare['cache_entries']} cache entries ({r.prepare['cache_bytes']} bytes) sent to the actors")
    for a in r.actors:
        warm = {"True": "warm start", "False": "cold start"}.get(a["warm"], "no GPU kernels")
        lines.append(f"  actor {a['actor']}: {a['device']}, {a['items']} items, prepared in {a['init_s']:.2f} s "
                     f"({warm})")
    for e in r.errors:
        lines.append(f"  failed: {e['path']}: {e['error']}")
    if r.failures > len(r.errors):
        lines.append(f"  ... and {r.failures - len(r.errors)} more (the error column of the output says which)")
    return lines

