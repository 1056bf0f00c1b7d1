"""Soak: many invokes and many interpreter lifetimes per backend, recording RSS, open file
descriptors and outputs (issue 19).

    python bench/soak.py --backends cpu,opencl,vulkan,webgpu --invokes 100000 --lifetimes 1000
    python bench/soak.py --model hand_recrop --invokes 2000 --lifetimes 100   # a quick run
    python bench/soak.py --model small --backends vulkan --phases invokes --until 20:30 --progress v.jsonl

``--model small`` is ``litegpu.testing.small_image_classifier()`` (16x16 conv, pool, FC, softmax;
every op on every GPU backend).  ``--until HH:MM`` (UTC) stops each phase at that time and records
how many invokes/lifetimes actually ran; ``--progress FILE`` appends a JSON line per sample so a
killed run still leaves its numbers.

For each backend: phase 1 invokes one interpreter ``--invokes`` times (outputs must stay
bit-identical to the first invoke's); phase 2 creates, allocates, invokes once and drops
``--lifetimes`` interpreters (one delegate object per backend, as a service would hold it).
RSS (``/proc/self/statm``) and the open descriptor count are sampled along the way; a JSON
line per backend goes to stdout, the summary to stderr.  Results: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _feed(it, rng) -> None:
    for d in it.get_input_details():
        it.set_tensor(d["index"], rng.standard_normal(d["shape"]).astype(d["dtype"]) if d["dtype"] == np.float32
                      else np.zeros(d["shape"], d["dtype"]))


def _outputs(it) -> list[np.ndarray]:
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _deadline(until: str | None) -> float:
    """Seconds since the epoch of ``HH:MM`` UTC today (inf when not given)."""
    if not until:
        return float("inf")
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    h, m = (int(v) for v in until.split(":"))
    return now.replace(hour=h, minute=m, second=0, microsecond=0).timestamp()


def soak(backend: str, data: bytes, invokes: int, lifetimes: int, samples: int = 20,
         until: float = float("inf"), progress: Path | None = None) -> dict:
    import litegpu

    def note(phase: str, k: int, **kw) -> None:
        if progress is not None:
            line = json.dumps({"backend": backend, "phase": phase, "done": k, "t": round(time.time(), 1),
                               "rss_mb": round(rss_mb(), 1), "fds": fds(), **kw})  # before opening the file
            with progress.open("a") as f:
                f.write(line + "\n")

    delegates = [] if backend == "cpu" else [litegpu.load_delegate(backend)]
    it = litegpu.Interpreter(model_content=data, experimental_delegates=delegates)
    it.allocate_tensors()
    _feed(it, np.random.default_rng(0))
    it.invoke()
    first = _outputs(it)
    start_rss, start_fds = rss_mb(), fds()
    rss_inv, fd_inv, differ = [round(start_rss, 1)], [start_fds], 0
    t = time.perf_counter()
    invokes_done = 0
    for k in range(invokes):
        if time.time() > until:
            break
        it.invoke()
        invokes_done = k + 1
        if k % max(1, invokes // samples) == 0 or k == invokes - 1:
            if any(not np.array_equal(a, b) for a, b in zip(_outputs(it), first, strict=True)):
                differ += 1
            rss_inv.append(round(rss_mb(), 1))
            fd_inv.append(fds())
            note("invokes", invokes_done, differing=differ)
    if invokes_done and any(not np.array_equal(a, b) for a, b in zip(_outputs(it), first, strict=True)):
        differ += 1
    rss_inv.append(round(rss_mb(), 1))
    fd_inv.append(fds())
    invoke_s = time.perf_counter() - t
    del it
    gc.collect()
    life_start_rss, life_start_fds = rss_mb(), fds()
    rss_life, fd_life, wrong = [round(life_start_rss, 1)], [life_start_fds], 0
    t = time.perf_counter()
    lifetimes_done = 0
    for k in range(lifetimes):
        if time.time() > until:
            break
        lifetimes_done = k + 1
        it = litegpu.Interpreter(model_content=data, experimental_delegates=delegates)
        it.allocate_tensors()
        _feed(it, np.random.default_rng(0))
        it.invoke()
        if any(not np.array_equal(a, b) for a, b in zip(_outputs(it), first, strict=True)):
            wrong += 1
        del it
        if k % max(1, lifetimes // samples) == 0 or k == lifetimes - 1:
            gc.collect()
            rss_life.append(round(rss_mb(), 1))
            fd_life.append(fds())
            note("lifetimes", lifetimes_done, differing=wrong)
    life_s = time.perf_counter() - t
    gc.collect()
    end_rss = rss_mb()
    return {
        "backend": backend, "invokes": invokes_done, "lifetimes": lifetimes_done,
        "invokes_asked": invokes, "lifetimes_asked": lifetimes,
        "invoke_rss_mb": {"start": round(start_rss, 1), "max": max(rss_inv), "end": rss_inv[-1]},
        "invoke_fds": {"start": start_fds, "max": max(fd_inv), "end": fd_inv[-1]},
        "invoke_outputs_differing_samples": differ, "invoke_s": round(invoke_s, 2),
        "lifetime_rss_mb": {"start": round(life_start_rss, 1), "max": max(rss_life), "end": round(end_rss, 1),
                            "growth_pct": round(100 * (end_rss - life_start_rss) / life_start_rss, 1)},
        "lifetime_fds": {"start": life_start_fds, "max": max(fd_life), "end": fd_life[-1]},
        "lifetime_outputs_differing": wrong, "lifetime_s": round(life_s, 2),
        "rss_samples_invokes": rss_inv, "rss_samples_lifetimes": rss_life,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="cpu,opencl,vulkan,webgpu")
    ap.add_argument("--model", default="hand_recrop", help="a MediaPipe model name or a .tflite path")
    ap.add_argument("--invokes", type=int, default=100_000)
    ap.add_argument("--lifetimes", type=int, default=1000)
    ap.add_argument("--phases", default="invokes,lifetimes", help="invokes, lifetimes or both")
    ap.add_argument("--until", default=None, help="HH:MM UTC: stop each phase then, recording what ran")
    ap.add_argument("--progress", type=Path, default=None, help="append a JSON line per sample here")
    args = ap.parse_args()
    import litegpu

    if args.model == "small":
        from litegpu.testing import small_image_classifier

        name, data = "small_image_classifier", small_image_classifier()
    else:
        path = Path(args.model) if args.model.endswith(".tflite") else mediapipe_models(args.model)[args.model]
        name, data = path.name, path.read_bytes()
    print(f"# soak {name}: {machine_line()}", file=sys.stderr)
    phases = set(args.phases.split(","))
    invokes = args.invokes if "invokes" in phases else 0
    lifetimes = args.lifetimes if "lifetimes" in phases else 0

    for backend in args.backends.split(","):
        try:
            res = soak(backend, data, invokes, lifetimes, until=_deadline(args.until), progress=args.progress)
        except litegpu.BackendUnavailableError as e:
            print(json.dumps({"backend": backend, "skipped": str(e)}))
            continue
        print(json.dumps(res), flush=True)
        print(f"{backend}: {res['invokes']} invokes RSS {res['invoke_rss_mb']} fds {res['invoke_fds']} "
              f"differing {res['invoke_outputs_differing_samples']}; {res['lifetimes']} lifetimes RSS "
              f"{res['lifetime_rss_mb']} fds {res['lifetime_fds']} differing {res['lifetime_outputs_differing']}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
