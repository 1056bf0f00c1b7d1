"""Host-side cost of the OpenCL delegate's partition boundary, and invoke time.

Per invoke: the time spent in the device's upload / download / replay / copy calls (the queue is
drained, untimed, before each, so GPU work is not counted) and in the executor's numpy conversions
(``_runtime.to_device/from_device``, where the running tree still calls them), medians over invokes;
and the whole invoke's median and minimum.  Runs on any litegpu tree on ``PYTHONPATH`` (an older one
too: that is how before/after numbers are taken on one machine).

``python bench/gpu_boundary.py [--models a,b | --paths x.tflite,...] [--precisions fp32,fp16] [--runs N]
[--label NAME] [--npz OUT]`` (``--npz``: the outputs, for comparing two trees).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models  # noqa: E402

_TIMED = ("upload", "download", "download_many", "replay", "copy")


def _delegate(options: dict):
    import litegpu

    try:
        return litegpu.load_delegate("opencl", options)
    except litegpu.UnknownBackendError:  # a source tree: backends/opencl on PYTHONPATH, not installed
        from litegpu_opencl import OpenCLBackend

        return OpenCLBackend().create_delegate(options)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="selfie_segmentation,pose_landmark_full")
    ap.add_argument("--paths", default="", help="model files instead of --models")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--label", default="")
    ap.add_argument("--npz", default="")
    args = ap.parse_args()

    import litegpu
    from litegpu.gpu import _runtime

    spent: dict[str, float] = collections.defaultdict(float)

    def timed(fn, key, drain=None):
        def run(*a, **kw):
            if drain is not None:
                drain()
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[key] += time.perf_counter() - t0
        return run

    for name in ("to_device", "from_device"):  # the numpy conversions, where the tree still uses them
        if hasattr(_runtime, name):
            setattr(_runtime, name, timed(getattr(_runtime, name), "numpy " + name))

    paths = ({Path(p).stem: Path(p) for p in args.paths.split(",") if p} if args.paths
             else mediapipe_models(args.models))
    print(machine_line(), flush=True)
    saved: dict[str, np.ndarray] = {}
    for model, path in paths.items():
        for prec in args.precisions.split(","):
            d = _delegate({"cache": {"enabled": False}, "precision": prec})
            it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
            it.allocate_tensors()
            rng = np.random.default_rng(0)
            for det in it.get_input_details():
                it.set_tensor(det["index"], rng.random(tuple(det["shape"])).astype(det["dtype"]))
            for _ in range(max(args.runs // 10, 2)):
                it.invoke()
            ts = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                it.invoke()
                ts.append(time.perf_counter() - t0)
            for i, o in enumerate(it.get_output_details()):
                saved[f"{model}_{prec}_{i}"] = it.get_tensor(o["index"]).copy()
            dev = d.device
            plain = {n: getattr(dev, n) for n in _TIMED if hasattr(dev, n)}
            for n, fn in plain.items():
                setattr(dev, n, timed(fn, n, dev.finish))
            parts: dict[str, list[float]] = collections.defaultdict(list)
            for _ in range(max(args.runs // 3, 2)):
                spent.clear()
                it.invoke()
                for k, v in spent.items():
                    parts[k].append(v)
            for n, fn in plain.items():
                setattr(dev, n, fn)
            launches = [s.kernel.describe()["launches"] for s in it._main.plan.steps if s.kind == "delegate"]
            print(f"{args.label} {model} {prec} (ran {d.precision}, launches {launches}): invoke median "
                  f"{np.median(ts) * 1e3:.3f} ms, min {min(ts) * 1e3:.3f} ms | host ms per invoke (median): "
                  + ", ".join(f"{k} {np.median(v) * 1e3:.3f}" for k, v in sorted(parts.items())), flush=True)
            d.close()
    if args.npz:
        np.savez(args.npz, **saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
