"""``litegpu batch`` throughput: items per second against the number of actors, per backend, next to
single-process baselines, with every output checked against the single-process loop (exact bytes).

Baselines, measured in the same run:
  * ``invoke``: one process, one interpreter, inputs already preprocessed, invoke + read outputs in a
    loop;
  * ``2 in flight``: one process, ``CompiledModel.run_async`` with two runs in flight on the preprocessed
    inputs, every output read: litegpu's fastest single-process pipelined rate (what the actor pool is
    held against, by its rate once rows flow);
  * ``loop``: one process, one interpreter, read + preprocess + invoke per image: what `litegpu run`'s
    code does per input, in one process (the reference for the outputs);
  * ``litegpu run``: the command itself, one process per image (`--cli-runs` images; start-up included).

    python bench/batch.py                                    # small generated model, 2000 images, cpu
    python bench/batch.py --images 10000 --actors 1 --backends cpu
    python bench/batch.py --model face_detection_short_range --backends opencl,vulkan --actors 1,2,4 --images 3000

Ray: a local instance with --num-cpus CPUs (default all) and every GPU it finds; GPU actors get
(GPUs / actors) of a GPU each.  Prints a table and writes JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# One BLAS/OpenMP thread, as in Ray's workers: preprocessing through a multi-threaded BLAS can differ in
# the last bits, and the outputs are compared byte for byte (docs/batch.md)
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models  # noqa: E402


def _model_path(name: str, hw: int, work: Path) -> Path:
    if name == "small":
        from litegpu.testing import small_image_classifier

        p = work / f"small_{hw}.tflite"
        p.write_bytes(small_image_classifier(hw))
        return p
    if Path(name).is_file():
        return Path(name)
    return mediapipe_models(name)[name]


def _make_images(d: Path, n: int, h: int, w: int, fmt: str, seed: int = 0) -> list[Path]:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    files = []
    if fmt == "png":
        from PIL import Image
    for i in range(n):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        if fmt == "png":
            f = d / f"img{i:06d}.png"
            Image.fromarray(img).save(f, compress_level=1)
        else:
            f = d / f"img{i:06d}.npy"
            np.save(f, img)
        files.append(f)
    return files


def _single_process(model: Path, files: list[Path], backend: str) -> tuple[dict[str, list[np.ndarray]], dict]:
    """The baselines in this process: the loop (read+preprocess+invoke) and invoke only."""
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
    return outs, {"init_s": init_s, "loop_items_per_s": n / loop_s, "invoke_items_per_s": n / invoke_s,
                  "pipelined_items_per_s": _pipelined(model, inputs, backend)}


def _pipelined(model: Path, inputs: list[np.ndarray], backend: str, inflight: int = 2) -> float:
    """litegpu's fastest single-process pipelined run (issue 14's): CompiledModel with ``inflight`` runs
    in flight on preprocessed inputs, every output read; items/s."""
    import collections

    from litegpu.compiled_model import CompiledModel
    from litegpu.hardware_accelerator import HardwareAccelerator

    accel = HardwareAccelerator.CPU if backend == "cpu" else HardwareAccelerator.GPU
    kw = {} if backend == "cpu" else {"backend": backend}
    m = CompiledModel.from_file(str(model), hardware_accel=accel, max_in_flight=inflight, **kw)
    key = m.get_signature_by_index(0)["key"]
    sizes = [(int(np.prod(d["shape"])), np.dtype(d["dtype"])) for d in m.get_output_tensor_details(key).values()]
    sets = [(m.create_input_buffers(0), m.create_output_buffers(0)) for _ in range(inflight)]
    ring: collections.deque = collections.deque()

    def step(i: int, x: np.ndarray) -> None:
        ins, outs = sets[i % inflight]
        if len(ring) == inflight:
            for b, (n, dt) in zip(ring.popleft(), sizes, strict=True):
                b.read(n, dt)
        ins[0].write(x)
        m.run_async(0, ins, outs)
        ring.append(outs)

    for i, x in enumerate(inputs[:2 * inflight]):  # warm-up
        step(i, x)
    t = time.perf_counter()
    for i, x in enumerate(inputs):
        step(i, x)
    while ring:
        for b, (n, dt) in zip(ring.popleft(), sizes, strict=True):
            b.read(n, dt)
    rate = len(inputs) / (time.perf_counter() - t)
    m.close()
    return rate


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="small", help="'small' (generated classifier), a MediaPipe name or a .tflite")
    ap.add_argument("--small-size", type=int, default=32, help="input size of the small model (default 32)")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--image-format", choices=("png", "npy"), default="png")
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--actors", default="1,2", help="comma-separated actor counts")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance (default all)")
    ap.add_argument("--num-gpus", type=int, default=None, help="GPUs of the local Ray instance (default: Ray detects)")
    ap.add_argument("--baseline-images", type=int, default=2000,
                    help="images the single-process baselines run (and the outputs compared over; default 2000)")
    ap.add_argument("--cli-runs", type=int, default=5, help="images run through `litegpu run` one process each")
    ap.add_argument("--no-verify", action="store_true", help="skip the exact comparison with the loop")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()

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
    files = _make_images(work / "images", args.images, h + h // 4, w + w // 4, args.image_format)
    print(f"# {machine_line()}")
    print(f"# model {model.name} ({h}x{w}), {len(files)} {args.image_format} images of {h + h // 4}x{w + w // 4} "
          f"generated in {time.perf_counter() - t:.1f} s")
    ray.init(num_cpus=args.num_cpus, num_gpus=args.num_gpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    res = ray.cluster_resources()
    print(f"# ray {ray.__version__}: {res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs")
    results = {"machine": machine_line(), "model": model.name, "images": len(files), "ray": ray.__version__,
               "cluster": {k: res[k] for k in ("CPU", "GPU") if k in res}, "runs": []}
    print(f"{'backend':8} {'mode':22} {'items/s':>9} {'wall s':>8} {'vs invoke':>9} {'mismatch':>8}  devices; "
          "once flowing: items/s after the first batch (vs invoke)")
    for backend in [b for b in args.backends.split(",") if b]:
        expected, base = _single_process(model, files[:args.baseline_images], backend)
        inv = base["invoke_items_per_s"]
        print(f"{backend:8} {'single-process invoke':22} {inv:9.1f} {len(files) / inv:8.1f} {1.0:9.2f}")
        pipe = base["pipelined_items_per_s"]
        print(f"{backend:8} {'single-process 2 in flight':22} {pipe:9.1f} {len(files) / pipe:8.1f} {pipe / inv:9.2f}"
              "  (CompiledModel.run_async, preprocessed inputs: the rate the pool is held against)")
        print(f"{backend:8} {'single-process loop':22} {base['loop_items_per_s']:9.1f} "
              f"{len(files) / base['loop_items_per_s']:8.1f} {base['loop_items_per_s'] / inv:9.2f}")
        cli = _cli_runs(model, files[:args.cli_runs], backend, work) if args.cli_runs else None
        if cli:
            print(f"{backend:8} {'litegpu run per image':22} {cli:9.2f} {len(files) / cli:8.0f} {cli / inv:9.3f}  "
                  f"(extrapolated from {args.cli_runs})")
        run = {"backend": backend, **base, "cli_items_per_s": cli, "pools": []}
        for n in [int(a) for a in args.actors.split(",") if a]:
            out = work / f"out-{backend}-{n}"
            t = time.perf_counter()
            r = run_batch(model, work / "images", out, backend=backend, actors=n, batch_size=args.batch_size,
                          progress=False)
            wall = time.perf_counter() - t
            bad = None if args.no_verify else _compare(read_outputs(out), expected, names)
            devices = ", ".join(sorted({a["device"] for a in r.actors}))
            print(f"{backend:8} {f'batch, {n} actor(s)':22} {r.items_per_s:9.1f} {wall:8.1f} "
                  f"{r.items_per_s / inv:9.2f} {'-' if bad is None else bad:>8}  {devices}; once flowing "
                  f"{r.steady_items_per_s:.1f} ({r.steady_items_per_s / inv:.2f}; "
                  f"{r.steady_items_per_s / pipe:.2f} of 2 in flight)")
            run["pools"].append({"actors": n, "items_per_s": r.items_per_s, "steady_items_per_s": r.steady_items_per_s,
                                 "wall_s": wall, "pipeline_s": r.seconds,
                                 "mismatches": bad, "failures": r.failures, "result": r.as_dict()})
        results["runs"].append(run)
    ray.shutdown()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if os.environ.get("LITEGPU_BENCH_KEEP") == "1":
        print(f"# work folder kept: {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
