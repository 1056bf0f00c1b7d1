"""``litegpu batch`` throughput: items per second against the number of actors, per backend, next to
single-process baselines, with every output checked against the single-process loop (exact bytes).

Baselines, measured in the same run:
  * ``invoke``: one process, one interpreter, inputs already preprocessed, invoke + read outputs in a
    loop;
  * ``pipelined``: one process, ``CompiledModel.run_async`` with 2, 3 and 4 runs in flight, and
    ``CompiledModel.run_rows_async`` with 16 rows a submission (the actors' ROWS_PER_SUBMIT) and 2 or 3
    submissions in flight, on the preprocessed inputs, every output read; the fastest of these is
    litegpu's fastest single-process pipelined rate (what the actor pool is held against, by its rate
    once rows flow);
  * ``actor feed, no Ray``: one actor's device thread (the actor's own model and ``_DeviceFeed``) in
    this process on the preprocessed inputs, batches handed over by 3 threads as Ray Data does: the
    device thread's own rate and host work, so that what Ray adds shows apart (``feed, 1 row a
    submit``: the same with one row a submission, as before run_rows_async);
  * ``loop``: one process, one interpreter, read + preprocess + invoke per image: what `litegpu run`'s
    code does per input, in one process (the reference for the outputs);
  * ``litegpu run``: the command itself, one process per image (`--cli-runs` images; start-up included);
  * ``single-process call`` (once per repetition; ``--no-whole-call`` skips it): the like-for-like
    whole-call yardstick, a fresh process running the single-process pipelined program over all the
    inputs: import litegpu, prepare the model (a CompiledModel at the pipelined yardstick's fastest
    setting), list the inputs, then one loop reading and preprocessing K files, submitting them,
    collecting the submission N back and writing a Parquet shard every 256 rows (``write_shard``, the
    shards ``litegpu batch`` writes); timed from the process's spawn to its exit.

    python bench/batch.py                                    # small generated model, 2000 images, cpu
    python bench/batch.py --images 10000 --actors 1 --backends cpu
    python bench/batch.py --model face_detection_short_range --backends opencl,vulkan --actors 1,2,4 --images 3000
    # the NVIDIA machine, issue 18 (1 and 2 actors x 3 runs in flight against the pipelined rate and the
    # single-process call, twice: the spread; each pool run a fresh process and Ray instance), ~4 minutes:
    bash bench/device_run.sh python3 bench/batch.py --model face_detection_short_range --backends vulkan \
        --image-format tensor --images 20000 --batch-size 64 --actors 1,2 --in-flight 3 --repeat 2 \
        --cli-runs 0 --baseline-images 1000
    # A/B in one run, the variants in turn (their order rotated each repetition), e.g. the start-up
    # before issue 18's sixth session against now, and three batches held against four:
    ... --variant new= --variant old=litegpu.batch._job.DRIVER_PREPARE=False,litegpu.batch._job.SHARED_WORKERS=False,\
litegpu.batch._job.SMALL_FIRST_BLOCKS=False,litegpu.batch._job.ACTOR_CALLS=3 --variant calls3=litegpu.batch._job.ACTOR_CALLS=3

Per pool run (``--ray fresh``, the default: a fresh Python process calling ``run_batch``, which starts
and stops a Ray instance of its own, as the ``litegpu batch`` command does; ``--ray shared``: in this
process, in one Ray instance for all, later runs finding Ray's workers warm) it prints the rate once
rows flow, the whole call (the process's spawn to its exit, Ray Data's statistics left out) against
the pipelined rate and the single-process call, the first row's time from the command's start, and
the call's timeline (``BatchResult.timeline``: the driver's steps, the one-off prepare, the first
preprocessing task and each actor's start, step by step).

Inputs (--image-format): ``png`` or ``npy`` pictures a quarter larger than the model input (the
preprocessing resizes or letterboxes each one, as with real pictures), or ``tensor``: ``.npy`` files
that already are the model's input tensor, so the CPU stage only loads them (the pool against the
2-in-flight rate on equal terms: that rate is measured on preprocessed inputs too).

Ray: a local instance with --num-cpus CPUs (default all) and every GPU it finds (--num-gpus N declares
N; with a GPU backend on a machine without one, ``--num-gpus 1`` takes the GPU actor path on the
backend's device 0, as the tests do); GPU actors get (GPUs / actors) of a GPU each.

Where the time goes, per pool run: Ray Data's per-operator totals (``Dataset.stats()``: tasks, remote
wall and CPU time of each stage) and, per actor, its device thread's split from its first batch to its
last (waiting for batches, blocked on the device, host work) and the shard writes of its rows (in the
write stage's tasks, outside the actor; ``--stats`` prints Ray Data's full statistics).  Prints a
table and writes JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# One BLAS/OpenMP thread, as in Ray's workers: preprocessing through a multi-threaded BLAS can differ in
# the last bits, and the outputs are compared byte for byte (docs/batch.md)
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models, set_attribute  # noqa: E402


def _model_path(name: str, hw: int, work: Path) -> Path:
    if name == "small":
        from litegpu.testing import small_image_classifier

        p = work / f"small_{hw}.tflite"
        p.write_bytes(small_image_classifier(hw))
        return p
    if Path(name).is_file():
        return Path(name)
    return mediapipe_models(name)[name]


def _make_images(d: Path, n: int, h: int, w: int, fmt: str, seed: int = 0, pre: Any = None,
                 link: bool = False) -> list[Path]:
    """``n`` pictures of ``h`` x ``w`` (png or npy), or with ``fmt`` "tensor", ``.npy`` files of the
    model's input tensor: such pictures through the model's preprocessing ``pre``.  ``link`` (tensor
    inputs): the files after the first 1000 are hard links to them (the same contents as without, in a
    thousandth of the disk: 100,000 face-detection tensors are 20 GB otherwise)."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    files = []
    tensors: list[np.ndarray] = []  # (tensor inputs: at most 1000 distinct ones, then again in turn)
    if fmt == "png":
        from PIL import Image
    for i in range(n):
        if fmt == "tensor":
            if len(tensors) < 1000:
                tensors.append(pre.input_from(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
            f = d / f"img{i:06d}.npy"
            if link and i >= len(tensors):
                os.link(files[i % len(tensors)], f)
            else:
                np.save(f, tensors[i % len(tensors)])
            files.append(f)
            continue
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        if fmt == "png":
            f = d / f"img{i:06d}.png"
            Image.fromarray(img).save(f, compress_level=1)
        else:
            f = d / f"img{i:06d}.npy"
            np.save(f, img)
        files.append(f)
    return files


def _single_process(model: Path, files: list[Path], backend: str) -> tuple[dict[str, list[np.ndarray]], dict,
                                                                         list[np.ndarray]]:
    """The baselines in this process: the loop (read+preprocess+invoke) and invoke only; and the
    preprocessed inputs (for the yardstick's repetitions)."""
    from litegpu.batch._job import preprocessing
    from litegpu.cli._common import get_outputs, load_model, make_interpreter, set_inputs
    from litegpu.cli._preprocess import load_image

    lm = load_model(str(model))
    t = time.perf_counter()
    interp = make_interpreter(lm, backend, {})
    init_s = time.perf_counter() - t
    pre = preprocessing(lm)  # what litegpu run and litegpu batch use (MediaPipe models letterboxed)
    outs: dict[str, list[np.ndarray]] = {}
    inputs = []
    t = time.perf_counter()
    for f in files:
        x = pre.input_from(load_image(f))
        inputs.append(x)
        set_inputs(interp, [x])
        interp.invoke()
        outs[str(f.resolve())] = [a.copy() for a in get_outputs(interp)]
    loop_s = time.perf_counter() - t
    t = time.perf_counter()
    for x in inputs:
        set_inputs(interp, [x])
        interp.invoke()
        get_outputs(interp)
    invoke_s = time.perf_counter() - t
    n = len(files)
    del interp
    # the yardstick: the fastest of 2, 3 and 4 runs in flight, one run a submission or ROWS_PER_SUBMIT
    # rows a submission (the actors run 3 x 16 by default)
    rates = {k: _pipelined(model, inputs, backend, k) for k in _depths(backend)}
    best = max(rates, key=lambda k: rates[k][0])
    pipe, pipe_host = rates[best]
    return outs, {"init_s": init_s, "loop_items_per_s": n / loop_s, "invoke_items_per_s": n / invoke_s,
                  "pipelined_items_per_s": pipe, "pipelined_host_s": pipe_host, "pipelined_in_flight": best,
                  "pipelined_by_in_flight": {k: r[0] for k, r in rates.items()},
                  "feed": _actor_feed(model, inputs, backend),
                  "feed_1": _actor_feed(model, inputs, backend, rows=1) if backend != "cpu" else None}, inputs


def _depths(backend: str) -> tuple[str, ...]:
    """What the yardstick tries (its rate: the fastest): ``N``, N runs in flight, one run a submission
    (``run_async``); ``KxN``, N submissions of K rows in flight (``run_rows_async``), K being the
    actors' ROWS_PER_SUBMIT."""
    from litegpu.batch._stages import ROWS_PER_SUBMIT

    if backend == "cpu":
        return ("2",)
    return ("2", "3", "4") + ((f"{ROWS_PER_SUBMIT}x2", f"{ROWS_PER_SUBMIT}x3") if ROWS_PER_SUBMIT > 1 else ())


def _actor_feed(model: Path, inputs: list[np.ndarray], backend: str, batch: int = 64, rows: int = 0) -> dict[str, float]:
    """One actor's device thread (``_DeviceFeed`` on ``build_model``'s model, as the actor builds
    them) in this process, without Ray: batches of ``batch`` preprocessed inputs handed over by 3
    threads at once, as Ray Data does; items/s, and its host work and CPU time a row (seconds).  Set
    beside the 2-in-flight rate, it tells the device thread's own cost from what Ray adds.  ``rows``:
    rows a submission (0: the actors' ROWS_PER_SUBMIT)."""
    from concurrent.futures import ThreadPoolExecutor

    from litegpu.batch._stages import ACTOR_CALLS, ModelSpec, _DeviceFeed, build_model

    m = build_model(ModelSpec(name=model.name, data=model.read_bytes(), backend=backend, options={}, config=None,
                              rows_per_submit=rows))
    feed = _DeviceFeed(m.runner, m.input, [(shape, dtype) for _, shape, dtype in m.outputs], m.depth, m.signature,
                       m.rows)
    batches = [np.stack(inputs[i:i + batch]) for i in range(0, len(inputs), batch)]

    def one(x: np.ndarray) -> None:
        feed.run(x, [None] * len(x))

    feed.warm_up()  # as the actor does
    before = feed.timings()
    t = time.perf_counter()
    with ThreadPoolExecutor(ACTOR_CALLS) as pool:
        list(pool.map(one, batches))
    wall = time.perf_counter() - t
    after = feed.timings()
    n = len(inputs)
    return {"items_per_s": n / wall, "host_s": (after[2] - before[2]) / n, "cpu_s": (after[3] - before[3]) / n}


def _pipelined(model: Path, inputs: list[np.ndarray], backend: str, how: str = "2") -> tuple[float, float]:
    """litegpu's fastest single-process pipelined run (issue 14's) on preprocessed inputs, every output
    read: ``how`` ``N``: CompiledModel.run_async with N runs in flight; ``KxN``: run_rows_async, K rows a
    submission, N submissions in flight (:func:`_pipelined_rows`); (items/s, host work in seconds a
    frame: its time less the time blocked on the device, as the actors' device threads count theirs)."""
    import collections

    from litegpu.compiled_model import CompiledModel
    from litegpu.hardware_accelerator import HardwareAccelerator

    rows, _, depth = how.rpartition("x")
    inflight = int(depth)
    accel = HardwareAccelerator.CPU if backend == "cpu" else HardwareAccelerator.GPU
    kw = {} if backend == "cpu" else {"backend": backend}
    m = CompiledModel.from_file(str(model), hardware_accel=accel, max_in_flight=inflight, **kw)
    if rows:
        return _pipelined_rows(m, inputs, int(rows), inflight)
    key = m.get_signature_by_index(0)["key"]
    sizes = [(int(np.prod(d["shape"])), np.dtype(d["dtype"])) for d in m.get_output_tensor_details(key).values()]
    sets = [(m.create_input_buffers(0), m.create_output_buffers(0)) for _ in range(inflight)]
    ring: collections.deque = collections.deque()
    blocked = [0.0]

    def drain() -> None:
        handle, outs = ring.popleft()
        t = time.perf_counter()
        handle.wait()
        blocked[0] += time.perf_counter() - t
        for b, (n, dt) in zip(outs, sizes, strict=True):
            b.read(n, dt)

    def step(i: int, x: np.ndarray) -> None:
        ins, outs = sets[i % inflight]
        if len(ring) == inflight:
            drain()
        ins[0].write(x)
        ring.append((m.run_async(0, ins, outs), outs))

    for i, x in enumerate(inputs[:2 * inflight]):  # warm-up
        step(i, x)
    blocked[0] = 0.0
    t = time.perf_counter()
    for i, x in enumerate(inputs):
        step(i, x)
    while ring:
        drain()
    wall = time.perf_counter() - t
    m.close()
    return len(inputs) / wall, (wall - blocked[0]) / len(inputs)


def _pipelined_rows(m: Any, inputs: list[np.ndarray], rows: int, inflight: int) -> tuple[float, float]:
    """:func:`_pipelined` through ``CompiledModel.run_rows_async``: the inputs stacked once (as Ray Data
    hands an actor a batch), ``rows`` of them a submission, ``inflight`` submissions in flight, every
    output landing in one array per output."""
    import collections

    key = m.get_signature_by_index(0)["key"]
    shape = tuple(m.get_input_tensor_details(key)[next(iter(m.get_input_tensor_details(key)))]["shape"])
    x = np.stack(inputs).reshape(len(inputs), *shape)
    outs = [np.empty((len(inputs), *d["shape"]), np.dtype(d["dtype"]))
            for d in m.get_output_tensor_details(key).values()]
    ring: collections.deque = collections.deque()
    blocked = [0.0]

    def drain() -> None:
        t = time.perf_counter()
        ring.popleft().wait()
        blocked[0] += time.perf_counter() - t

    def go(n: int) -> None:
        for a in range(0, n, rows):
            if len(ring) == inflight:
                drain()
            b = min(a + rows, n)
            ring.append(m.run_rows_async(0, [x[a:b]], [o[a:b] for o in outs]))
        while ring:
            drain()

    go(min(len(inputs), 2 * inflight * rows))  # warm-up: every copy of the model made and recorded
    blocked[0] = 0.0
    t = time.perf_counter()
    go(len(inputs))
    wall = time.perf_counter() - t
    m.close()
    return len(inputs) / wall, (wall - blocked[0]) / len(inputs)


def _cli_runs(model: Path, files: list[Path], backend: str, work: Path) -> float:
    """`litegpu run` once per image (the input given as the preprocessed tensor); items/s."""
    from litegpu.batch._job import preprocessing
    from litegpu.cli._common import load_model
    from litegpu.cli._preprocess import load_image

    lm = load_model(str(model))
    pre = preprocessing(lm)
    t = time.perf_counter()
    for i, f in enumerate(files):
        x = work / f"cli_in{i}.npy"
        np.save(x, pre.input_from(load_image(f)))  # what a user scripting `litegpu run` would do too
        subprocess.run([sys.executable, "-m", "litegpu.cli", "run", str(model), "--backend", backend, "--input",
                        f"0={x}", "--output", str(work / f"cli_out{i}")], check=True, capture_output=True)
    return len(files) / (time.perf_counter() - t)


def _child_batch(payload: str) -> None:
    """``--child-batch JSON``: one ``run_batch`` call in this fresh process, as ``litegpu batch`` makes
    it (it starts and stops its own Ray instance unless ``--ray shared``), after the variant's module
    settings; writes the result as JSON where the payload says.  The parent times the whole process."""
    a = json.loads(payload)
    for x in a["settings"]:
        set_attribute(x)
    from litegpu.batch import run_batch
    from litegpu.batch._stages import _process_start

    pre_call = time.time() - _process_start()  # this process's start and imports, before the call
    r = run_batch(a["model"], a["input"], a["output"], backend=a["backend"], actors=a["actors"],
                  batch_size=a["batch_size"], progress=False, stats=True, in_flight=a["in_flight"],
                  num_cpus=a["num_cpus"], num_gpus=a["num_gpus"])
    Path(a["result"]).write_text(json.dumps({**r.as_dict(), "pre_call_s": pre_call}, default=str))


def _child_yardstick(payload: str) -> None:
    """``--child-yardstick JSON``: the like-for-like whole-call yardstick, in this fresh process: what a
    user's own single-process pipelined program does over the same inputs: import litegpu, load and
    prepare the model (a CompiledModel, K rows a submission, N submissions in flight, the yardstick's
    fastest setting; the serialization cache as ``litegpu batch`` finds it), list the inputs, then one
    loop: read and preprocess K files, submit them, collect the submission N back, write a Parquet
    shard every 256 rows (the same shards as ``litegpu batch``: ``write_shard``).  Its phases (seconds
    from this process's first line) go to the payload's result file."""
    t0 = time.perf_counter()
    a = json.loads(payload)
    import collections

    from litegpu.batch._job import list_inputs, preprocessing
    from litegpu.batch._shards import write_shard
    from litegpu.batch._stages import ModelSpec, build_model
    from litegpu.cli._common import load_model
    from litegpu.cli._preprocess import load_image

    marks = {"imported": time.perf_counter() - t0}
    lm = load_model(a["model"])
    pre = preprocessing(lm)
    m = build_model(ModelSpec(name=lm.name, data=lm.data, backend=a["backend"], options={}, config=None,
                              in_flight=a["depth"], rows_per_submit=a["rows"]))
    marks["prepared"] = time.perf_counter() - t0
    _, files = list_inputs(a["input"], exclude=Path(a["output"]))
    marks["listed"] = time.perf_counter() - t0
    out_dir = Path(a["output"])
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [m.names[pos] for pos, _, _ in m.outputs]
    meta = {"model": lm.name, "model_sha256": lm.fingerprint, "backend": a["backend"]}
    ring: collections.deque = collections.deque()
    done: list[tuple[list[str], list[np.ndarray]]] = []
    pending = 0

    def finish() -> None:
        nonlocal pending
        handle, paths, outs = ring.popleft()
        handle.wait()
        done.append((paths, outs))
        pending += len(paths)
        if pending >= 256:
            flush()

    def flush() -> None:
        nonlocal pending
        paths = [p for ps, _ in done for p in ps]
        outs = {n: np.concatenate([o[k] for _, o in done]) for k, n in enumerate(names)}
        write_shard(out_dir, "parquet", paths, [None] * len(paths), outs, meta)
        done.clear()
        pending = 0

    k = max(1, m.rows)
    first = None
    for i in range(0, len(files), k):
        chunk = files[i:i + k]
        x = np.stack([pre.input_from(load_image(Path(f))) for f in chunk]).astype(m.input[1], copy=False)
        outs = [np.empty((len(chunk), *shape), dtype) for _, shape, dtype in m.outputs]
        if len(ring) >= m.depth:
            finish()
        ring.append((m.runner.run_rows_async(m.signature, [x.reshape(len(chunk), *m.input[0])], outs), chunk, outs))
        if first is None:
            first = time.perf_counter() - t0
    while ring:
        finish()
    if done:
        flush()
    marks["first_submitted"] = first or 0.0
    marks["done"] = time.perf_counter() - t0
    Path(a["result"]).write_text(json.dumps({"items": len(files), "marks": marks}))


def _run_child(flag: str, payload: dict[str, Any]) -> tuple[dict[str, Any] | None, float]:
    """Run this script with ``flag`` and ``payload`` in a fresh Python process; (its result file's
    JSON, the process's wall time from its spawn to its exit: the whole call a user's command takes)."""
    res = Path(payload["result"])
    t = time.perf_counter()
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), flag, json.dumps(payload)],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0 or not res.exists():  # reported, and the bench goes on with its other runs
        print(f"# {flag} failed (exit {p.returncode}); its output's end:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
        return None, wall
    out = json.loads(res.read_text())
    res.unlink()
    return out, wall


def _yardstick_call(model: Path, images: Path, backend: str, how: str, work: Path) -> dict[str, Any] | None:
    """The like-for-like whole-call yardstick (:func:`_child_yardstick`) over ``images``, ``how`` =
    ``KxN`` (or ``N``: one row a submission): items/s over the whole process, and its phases."""
    rows, _, depth = how.rpartition("x")
    out = work / "yardstick-out"
    shutil.rmtree(out, ignore_errors=True)
    r, wall = _run_child("--child-yardstick", {"model": str(model), "input": str(images), "output": str(out),
                                               "backend": backend, "rows": int(rows or 1), "depth": int(depth),
                                               "result": str(work / "yardstick.json")})
    shutil.rmtree(out, ignore_errors=True)
    if r is None:
        return None
    return {"items": r["items"], "wall_s": wall, "items_per_s": r["items"] / wall, "marks": r["marks"], "how": how}


def _timeline_line(tl: dict[str, float]) -> str:
    """The call's start-up, step by step, from its timeline (seconds from run_batch's start)."""
    def g(k: str) -> float | None:
        return tl.get(k)

    actors = sorted({k.split(".")[0] for k in tl if k.startswith("actor")})
    parts = []
    for label, k in (("model", "model_loaded"), ("listed", "inputs_listed"), ("prepare", "prepare_started"),
                     ("prepared", "prepare_done"), ("ray up", "ray_started"), ("workers", "workers_warming"),
                     ("inputs put", "inputs_put"), ("pipeline", "pipeline_started"),
                     ("1st preprocess", "preprocess_started"), ("1st preprocessed", "preprocess_done")):
        if g(k) is not None:
            parts.append(f"{label} {g(k):.2f}")
    for a in actors:
        ph = [(x, tl[f"{a}.{x}"]) for x in ("process", "entered", "cache", "built", "warm", "ready", "first_batch")
              if f"{a}.{x}" in tl]
        parts.append(f"{a} " + " ".join(f"{x} {t:.2f}" for x, t in ph))
    for label, k in (("first row", "first_row"), ("last row", "last_row"), ("done", "done"),
                     ("ray stopped", "ray_stopped")):
        if g(k) is not None:
            parts.append(f"{label} {g(k):.2f}")
    return "timeline (s from the call's start): " + "; ".join(parts)


def _compare(rows: dict, expected: dict[str, list[np.ndarray]], names: list[str]) -> int:
    """Rows whose outputs differ in any byte from the single-process loop (missing rows count)."""
    bad = 0
    for path, want in expected.items():
        row = rows.get(path)
        if row is None or row["error"] is not None:
            bad += 1
            continue
        if any(row[n] is None or row[n].dtype != w.dtype or not np.array_equal(row[n], w)
               for n, w in zip(names, want, strict=True)):
            bad += 1
    return bad


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def _seconds(text: str) -> float:
    m = re.fullmatch(r"([0-9.e+-]+)(us|ms|s)", text.strip())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")


def _stage_split(stats: str) -> list[dict[str, Any]]:
    """Ray Data's per-operator totals from ``Dataset.stats()``: name, tasks, remote wall and CPU
    seconds summed over the stage's tasks."""
    stages: list[dict[str, Any]] = []
    for line in stats.splitlines():
        m = re.match(r"Operator \d+ (.+?): (\d+) tasks executed, (\d+) blocks produced in ([0-9.]+)s", line)
        if m:
            stages.append({"name": m.group(1), "tasks": int(m.group(2)), "wall_s": 0.0, "cpu_s": 0.0,
                           "stage_s": float(m.group(4))})
            continue
        m = re.match(r"\* Remote (wall|cpu) time: .*?, ([0-9.]+(?:us|ms|s)) total", line.strip())
        if m and stages:
            stages[-1][f"{m.group(1)}_s"] = _seconds(m.group(2))
    return stages


def _split_lines(stages: list[dict[str, Any]], r: Any, pipe_host: float | None = None) -> list[str]:
    """Where a pool run's time went, one line per stage and per actor (``pipe_host``: the 2-in-flight
    run's host work a frame, seconds, which an actor's host work a row is set beside)."""
    lines = []
    for st in stages:
        per = st["wall_s"] / r.items * 1e3 if r.items else 0.0
        lines.append(f"stage {st['name']}: {st['tasks']} tasks, remote wall {st['wall_s']:.2f} s in all "
                     f"({per:.3f} ms a row), cpu {st['cpu_s']:.2f} s; {st['stage_s']:.1f} s from first to last")
    for a in r.actors:
        busy = a["idle_s"] + a["device_s"] + a["host_s"]
        pct = (lambda x: 100 * x / busy) if busy > 0 else (lambda x: 0.0)
        lines.append(f"actor {a['actor']}: {a['items']} rows; device thread over {busy:.2f} s: waiting for batches "
                     f"{pct(a['idle_s']):.0f}%, blocked on the device {pct(a['device_s']):.0f}%, host work "
                     f"{pct(a['host_s']):.0f}% ({a['host_s'] / max(a['items'], 1) * 1e3:.3f} ms a row, CPU "
                     f"{a.get('cpu_s', 0.0) / max(a['items'], 1) * 1e3:.3f} ms a row); shard writes "
                     f"{a['write_s']:.2f} s ({a['write_s'] / max(a['items'], 1) * 1e3:.3f} ms a row, in the write stage)"
                     + (f"; host work a row / pipelined's a frame: {a['host_s'] / max(a['items'], 1) / pipe_host:.2f}"
                        if pipe_host else "")
                     + ("; from the pipeline's start: ready at {:.2f} s, first batch at {:.2f} s, last at {:.2f} s"
                        .format(a["ready_s"], a["first_s"], a["last_s"]) if a.get("first_s") is not None else ""))
    return lines


def _variant(text: str) -> tuple[str, list[str]]:
    """``LABEL=MODULE.NAME=VALUE,...`` -> (label, settings)."""
    label, _, rest = text.partition("=")
    return label, [x for x in rest.split(",") if x]


def _ray_init(ray: Any, args: Any) -> None:
    ray.init(num_cpus=args.num_cpus, num_gpus=args.num_gpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False


def _cold_tasks(ray: Any) -> str:
    """From Ray's task timeline of this instance: how many worker processes ran tasks and what the
    tasks' argument and function loading cost (a worker's first task imports the stage's modules)."""
    try:
        events = [e for e in ray.timeline() if e.get("ph") == "X"]
    except Exception as e:  # noqa: BLE001 - a diagnostic only
        return f"timeline unavailable ({e})"
    des = [e for e in events if e.get("name") == "task:deserialize_arguments"]
    cold = sorted((e["dur"] / 1e6 for e in des), reverse=True)
    workers = {e.get("tid") for e in des}
    slow = [x for x in cold if x > 0.05]
    # Ray Data's map tasks (read/preprocess and write; the actors' calls are not tasks): how many ran at
    # once, at most and on average over each half second from the first one
    spans = sorted((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6) for e in events
                   if str(e.get("name", "")).endswith("map_operator._map_task"))
    ramp = ""
    if spans:
        t0 = spans[0][0]
        edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        peak = run = 0
        for _, d in edges:
            run += d
            peak = max(peak, run)
        busy = [sum(max(0.0, min(b, t0 + k / 2 + 0.5) - max(a, t0 + k / 2)) for a, b in spans) / 0.5 for k in range(8)]
        ramp = (f"; map tasks: {len(spans)}, at most {peak} at once, on average over each half second from the "
                f"first: {', '.join(f'{x:.1f}' for x in busy)}")
    return (f"timeline: {len(des)} tasks on {len(workers)} worker processes; loading a task's function and "
            f"arguments took {sum(cold):.2f} s in all, over 50 ms in {len(slow)} tasks ({sum(slow):.2f} s; the "
            f"longest {', '.join(f'{x:.2f}' for x in cold[:4])} s){ramp}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="small", help="'small' (generated classifier), a MediaPipe name or a .tflite")
    ap.add_argument("--small-size", type=int, default=32, help="input size of the small model (default 32)")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--link-inputs", action="store_true",
                    help="tensor inputs: the files after the first 1000 are hard links to them (same contents, "
                         "for jobs of 100,000 rows and more)")
    ap.add_argument("--image-format", choices=("png", "npy", "tensor"), default="png",
                    help="pictures a quarter larger than the input (png, npy) or the input tensors themselves (tensor)")
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--actors", default="1,2", help="comma-separated actor counts")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--in-flight", default="2", help="comma-separated runs in flight per GPU actor (each a pool run)")
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance (default all)")
    ap.add_argument("--num-gpus", type=int, default=None, help="GPUs of the local Ray instance (default: Ray detects)")
    ap.add_argument("--baseline-images", type=int, default=2000,
                    help="images the single-process baselines run (and the outputs compared over; default 2000)")
    ap.add_argument("--cli-runs", type=int, default=5, help="images run through `litegpu run` one process each")
    ap.add_argument("--no-verify", action="store_true", help="skip the exact comparison with the loop")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the pools this many times, each repetition after the yardstick again (the spread)")
    ap.add_argument("--stats", action="store_true", help="print Ray Data's full statistics of each pool run")
    ap.add_argument("--ray", choices=("fresh", "shared"), default="fresh",
                    help="fresh (default): each pool run in a Ray instance of its own, started just before it, as "
                         "`litegpu batch` does (every run is a first job); shared: all in one instance")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=MODULE.NAME=VALUE[,MODULE.NAME=VALUE]",
                    help="also run each pool with these module settings (an A/B in the same run; repeatable; "
                         "'LABEL=' alone: the defaults), e.g. old=litegpu.batch._job.WAIT_FOR_ACTORS_S=-1")
    ap.add_argument("--timeline", action="store_true",
                    help="with --ray shared: from Ray's task timeline, the pipeline tasks that paid a cold start")
    ap.add_argument("--no-whole-call", dest="whole_call", action="store_false",
                    help="skip the like-for-like whole-call yardstick (a single-process pipelined program over the "
                         "same inputs, in a fresh process, once per repetition)")
    ap.add_argument("--child-batch", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-yardstick", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_batch:
        return _child_batch(args.child_batch)
    if args.child_yardstick:
        return _child_yardstick(args.child_yardstick)

    import ray
    from litegpu.batch import read_outputs, run_batch
    from litegpu.cli._common import load_model, make_interpreter
    from litegpu.cli._run import safe_name

    work = Path(tempfile.mkdtemp(prefix="litegpu-batch-bench-"))
    model = _model_path(args.model, args.small_size, work)
    lm = load_model(str(model))
    interp = make_interpreter(lm, "cpu", {})
    _, h, w, _ = (int(s) for s in interp.get_input_details()[0]["shape"])
    taken: set[str] = set()
    names = [safe_name(d["name"], taken) for d in interp.get_output_details()]
    # images a little larger than the input: preprocessing resizes, as with real pictures
    t = time.perf_counter()
    from litegpu.batch._job import preprocessing

    files = _make_images(work / "images", args.images, h + h // 4, w + w // 4, args.image_format,
                         pre=preprocessing(lm), link=args.link_inputs)
    what = ("model input tensors (preprocessed " if args.image_format == "tensor" else "images of ") + \
        f"{h + h // 4}x{w + w // 4}" + (")" if args.image_format == "tensor" else "")
    print(f"# {machine_line()}")
    print(f"# model {model.name} ({h}x{w}), {len(files)} {args.image_format} {what} "
          f"generated in {time.perf_counter() - t:.1f} s")
    variants = [_variant(v) for v in args.variant] or [("default", [])]
    _ray_init(ray, args)
    res = ray.cluster_resources()
    try:
        shm = os.statvfs("/dev/shm")
        shm_gb = shm.f_bavail * shm.f_frsize / 2**30
    except OSError:
        shm_gb = float("nan")
    print(f"# ray {ray.__version__}: {res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs, object store "
          f"{res.get('object_store_memory', 0) / 2**30:.1f} GiB (/dev/shm {shm_gb:.1f} GiB free); "
          + ("each pool run in a fresh Ray instance (as `litegpu batch` starts one)" if args.ray == "fresh"
             else "every pool run in this one Ray instance"))
    if args.ray == "fresh":
        ray.shutdown()
    for vname, settings in variants:
        if settings:
            print(f"# variant {vname}: {', '.join(settings)}")
    results = {"machine": machine_line(), "model": model.name, "images": len(files), "ray": ray.__version__,
               "cluster": {k: res[k] for k in ("CPU", "GPU") if k in res}, "runs": []}
    print(f"{'backend':8} {'mode':22} {'items/s':>9} {'wall s':>8} {'vs invoke':>9} {'mismatch':>8}  devices; "
          "once flowing: items/s after the first batch (vs invoke)")
    for backend in [b for b in args.backends.split(",") if b]:
        expected, base, inputs = _single_process(model, files[:args.baseline_images], backend)
        inv = base["invoke_items_per_s"]
        print(f"{backend:8} {'single-process invoke':22} {inv:9.1f} {len(files) / inv:8.1f} {1.0:9.2f}")
        pipe = base["pipelined_items_per_s"]
        by = ", ".join(f"{k}: {v:.0f}" for k, v in base["pipelined_by_in_flight"].items())
        print(f"{backend:8} {'single-process pipelined':22} {pipe:9.1f} {len(files) / pipe:8.1f} {pipe / inv:9.2f}"
              f"  (CompiledModel.run_async / run_rows_async, preprocessed inputs, the fastest of runs in flight "
              f"{by} (KxN: K rows a submission, N in flight): the rate the pool is held against, "
              f"{base['pipelined_in_flight']}; host work {base['pipelined_host_s'] * 1e3:.3f} ms a frame)")
        for label, fd in (("actor feed, no Ray", base["feed"]), ("feed, 1 row a submit", base["feed_1"])):
            if fd is None:
                continue
            print(f"{backend:8} {label:22} {fd['items_per_s']:9.1f} {len(files) / fd['items_per_s']:8.1f} "
                  f"{fd['items_per_s'] / inv:9.2f}  (one actor's device thread in this process: "
                  f"{fd['items_per_s'] / pipe:.2f} of pipelined; host work {fd['host_s'] * 1e3:.3f} ms a row, CPU "
                  f"{fd['cpu_s'] * 1e3:.3f} ms a row)")
        print(f"{backend:8} {'single-process loop':22} {base['loop_items_per_s']:9.1f} "
              f"{len(files) / base['loop_items_per_s']:8.1f} {base['loop_items_per_s'] / inv:9.2f}")
        cli = _cli_runs(model, files[:args.cli_runs], backend, work) if args.cli_runs else None
        if cli:
            print(f"{backend:8} {'litegpu run per image':22} {cli:9.2f} {len(files) / cli:8.0f} {cli / inv:9.3f}  "
                  f"(extrapolated from {args.cli_runs})")
        run = {"backend": backend, **base, "cli_items_per_s": cli, "pools": []}
        pools = [(int(a), int(d)) for d in args.in_flight.split(",") if d for a in args.actors.split(",") if a]
        # (actors, in flight, variant) -> per repetition: once flowing / pipelined, whole run / pipelined,
        # start to the first row (s), Ray's start + the prepare (s)
        held: dict[tuple[int, int, str], list[tuple[float, ...]]] = {}
        best = base["pipelined_in_flight"]
        for rep in range(args.repeat):
            if rep:  # the yardstick again beside this repetition's pools: the card's own rate moves too
                rates = {k: _pipelined(model, inputs, backend, k)[0] for k in _depths(backend)}
                best = max(rates, key=lambda k: rates[k])
                pipe = rates[best]
                by = ", ".join(f"{k}: {v:.0f}" for k, v in rates.items())
                print(f"{backend:8} {f'pipelined, repeat {rep + 1}':22} {pipe:9.1f} {len(files) / pipe:8.1f} "
                      f"{pipe / inv:9.2f}  (runs in flight {by})")
                run.setdefault("pipelined_repeats", []).append(rates)
            yard = _yardstick_call(model, work / "images", backend, best, work) if args.whole_call else None
            if yard:
                mk = yard["marks"]
                print(f"{backend:8} {'single-process call':22} {yard['items_per_s']:9.1f} {yard['wall_s']:8.1f} "
                      f"{yard['items_per_s'] / inv:9.2f}  (the like-for-like whole-call yardstick: one fresh process, "
                      f"{best} pipelined, over the same {yard['items']} inputs: {yard['items_per_s'] / pipe:.2f} of "
                      f"pipelined; in it: imports {mk['imported']:.2f} s, model prepared at {mk['prepared']:.2f}, "
                      f"inputs listed at {mk['listed']:.2f}, first rows submitted at {mk['first_submitted']:.2f}, "
                      f"done at {mk['done']:.2f}: reading, preprocessing and Parquet writing in the loop)")
                run.setdefault("yardstick_calls", []).append(yard)
            # variants in turn, their order rotated each repetition (none always goes first)
            turn = variants[rep % len(variants):] + variants[:rep % len(variants)]
            for (n, depth), (vname, settings) in [(p, v) for p in pools for v in turn]:
                out = work / f"out-{backend}-{n}-{depth}-{vname}-{rep}"
                cold = None
                if args.ray == "fresh":  # a fresh process, as `litegpu batch` is: it starts Ray itself
                    rd, wall = _run_child("--child-batch", {
                        "model": str(model), "input": str(work / "images"), "output": str(out), "backend": backend,
                        "actors": n, "batch_size": args.batch_size, "in_flight": depth, "num_cpus": args.num_cpus,
                        "num_gpus": args.num_gpus, "settings": settings, "result": str(work / "call.json")})
                    if rd is None:
                        shutil.rmtree(out, ignore_errors=True)
                        continue
                    pre_call = rd.pop("pre_call_s")
                    r = SimpleNamespace(**rd)
                else:
                    olds = [set_attribute(x) for x in settings]
                    pre_call = 0.0
                    try:
                        t = time.perf_counter()
                        r = run_batch(model, work / "images", out, backend=backend, actors=n,
                                      batch_size=args.batch_size, progress=False, stats=True, in_flight=depth)
                        wall = time.perf_counter() - t
                        cold = _cold_tasks(ray) if args.timeline else None
                    finally:
                        for target, old in olds:
                            set_attribute(f"{target}={old!r}")
                tl = r.timeline
                stats_s = tl.get("stats_done", 0.0) - tl.get("done", 0.0) if "stats_done" in tl else 0.0
                whole = wall - stats_s  # the call as a user's command takes it (Ray Data's statistics left out)
                # the outputs are compared once per variant (the first repetition); later ones are timings only
                bad = None if args.no_verify or rep else _compare(read_outputs(out, expected), expected, names)
                devices = ", ".join(sorted({a["device"] for a in r.actors}))
                label = f"batch, {n} actor(s)" + (f", {depth} in flight" if depth != 2 else "") + \
                    (f" [{vname}]" if len(variants) > 1 else "")
                prep = r.prepare or {}
                print(f"{backend:8} {label:22} {r.items_per_s:9.1f} {whole:8.1f} "
                      f"{r.items_per_s / inv:9.2f} {'-' if bad is None else bad:>8}  {devices}; once flowing "
                      f"{r.steady_items_per_s:.1f} ({r.steady_items_per_s / inv:.2f}; "
                      f"{r.steady_items_per_s / pipe:.2f} of pipelined)")
                first_row = pre_call + tl.get("first_row", 0.0)  # from the command's start to its first row in place
                # Ray's import and start: from the listing's end, or where the inputs are listed beside
                # Ray's start (LIST_BESIDE_START), from the one-off prepare's start just before Ray's import
                ray_s = tl.get("ray_started", 0.0) - min(tl.get("inputs_listed", 0.0),
                                                         tl.get("prepare_started", float("inf")))
                whole_rate = r.items / whole
                print(f"{'':8}   repetition {rep + 1}{' (a fresh process and Ray instance)' if args.ray == 'fresh' else ''}: "
                      f"the whole call {whole:.2f} s = {whole_rate:.0f} items/s = {whole_rate / pipe:.2f} of pipelined"
                      + (f", {whole_rate / yard['items_per_s']:.2f} of the single-process call" if yard else "")
                      + f"; first row at {first_row:.2f} s (before run_batch: {pre_call:.2f}, Ray's start "
                      f"{ray_s:.2f}, the pipeline's start to its first row {r.start_s:.2f}; the one-off prepare "
                      f"{prep.get('seconds', 0.0):.2f} s in {prep.get('where', '-')}); once flowing "
                      f"{r.steady_items_per_s:.0f} items/s = {r.steady_items_per_s / pipe:.2f} of pipelined (the "
                      f"second half of the rows {r.late_items_per_s:.0f} = {r.late_items_per_s / pipe:.2f}); "
                      f"after the last row {whole - pre_call - tl.get('last_row', 0.0):.2f} s (Ray's stop "
                      f"{tl.get('ray_stopped', 0.0) - tl.get('stats_done', tl.get('done', 0.0)):.2f} of it)")
                print(f"{'':8}   {_timeline_line(tl)}")
                held.setdefault((n, depth, vname), []).append(
                    (r.steady_items_per_s / pipe, whole_rate / pipe,
                     whole_rate / yard["items_per_s"] if yard else float("nan"), r.start_s, first_row,
                     getattr(r, "late_items_per_s", 0.0) / pipe, whole,
                     tl.get("ray_stopped", 0.0) - tl.get("stats_done", tl.get("done", 0.0)), ray_s))
                stages = _stage_split(r.stats)
                for line in _split_lines(stages, r, base["pipelined_host_s"]):
                    print(f"{'':8}   {line}")
                if cold:
                    print(f"{'':8}   {cold}")
                if args.stats:
                    print(r.stats)
                run["pools"].append({"actors": n, "in_flight": depth, "variant": vname, "settings": settings,
                                     "repeat": rep, "pipelined_items_per_s": pipe, "ray_init_s": ray_s,
                                     "items_per_s": r.items_per_s, "steady_items_per_s": r.steady_items_per_s,
                                     "start_s": r.start_s, "first_row_s": first_row, "wall_s": whole,
                                     "pipeline_s": r.seconds, "yardstick_call": yard,
                                     "stages": stages, "mismatches": bad, "failures": r.failures,
                                     "result": r.as_dict() if hasattr(r, "as_dict") else vars(r)})
                shutil.rmtree(out, ignore_errors=True)  # (disk: a pool run of a detector writes ~0.7 GB)
        for (n, depth, vname), xs in held.items():
            steady = [x[0] for x in xs]
            print(f"# {backend}: {n} actor(s), {depth} in flight{f' [{vname}]' if len(variants) > 1 else ''}: "
                  f"once flowing / pipelined per repetition: {', '.join(f'{x:.2f}' for x in steady)} (min "
                  f"{min(steady):.2f}, median {float(np.median(steady)):.2f}; the target is 0.90); the second half "
                  f"of the rows / pipelined: {', '.join(f'{x[5]:.2f}' for x in xs)}; the whole call (s): "
                  f"{', '.join(f'{x[6]:.2f}' for x in xs)}; the whole call / "
                  f"pipelined: {', '.join(f'{x[1]:.2f}' for x in xs)}; the whole call / the single-process call: "
                  f"{', '.join(f'{x[2]:.2f}' for x in xs)}; the pipeline's start to its first row (s): "
                  f"{', '.join(f'{x[3]:.2f}' for x in xs)}; the command's start to its first row (s): "
                  f"{', '.join(f'{x[4]:.2f}' for x in xs)}; Ray's import and start (s): "
                  f"{', '.join(f'{x[8]:.2f}' for x in xs)}; Ray's stop (s): {', '.join(f'{x[7]:.2f}' for x in xs)}")
        results["runs"].append(run)
    if ray.is_initialized():
        ray.shutdown()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if os.environ.get("LITEGPU_BENCH_KEEP") == "1":
        print(f"# work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
