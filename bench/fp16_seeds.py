"""fp16 accuracy of GPU backends over many random inputs, not one: per seed the maximum relative error
(``max|out - ref| / max|ref|``, the metric of ``bench/gpu.py``) and the RMS error of the logits where an
output is a sigmoid's (values in (0, 1)), against LiteRT's XNNPACK in fp32.

``python bench/fp16_seeds.py [--models a,b] [--backends vulkan,opencl] [--seeds 12] [--precision fp16]``

Why: on the selfie models the maximum over a sigmoid tail is a draw over rounding orders (see
docs/gpu-compiler.md, "fp16 accuracy of the MediaPipe models"): two engines running the same plan with
the same storage policy differ by 2-3x on one seed and swap places on the next.  The median over seeds
and the RMS logit error say which engine is more accurate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models  # noqa: E402


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p.astype(np.float64), 1e-30, 1 - 1e-7)
    return np.log(p / (1 - p))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="selfie_segmentation_landscape,selfie_segmentation")
    ap.add_argument("--backends", default="vulkan,opencl")
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--precision", default="fp16")
    args = ap.parse_args()
    import litegpu
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    print(machine_line())
    print(f"precision {args.precision}, {args.seeds} seeds (inputs uniform(-1, 1)); reference LiteRT XNNPACK fp32")
    print("| model | backend | max relative error per seed | median | RMS logit error (sigmoid outputs), mean |")
    print("|---|---|---|---:|---:|")
    for name, path in mediapipe_models(args.models).items():
        ref = LiteRT(model_path=str(path))
        ref.allocate_tensors()
        inp = ref.get_input_details()[0]
        its = {}
        for b in args.backends.split(","):
            d = litegpu.load_delegate(b, {"precision": args.precision, "cache": {"enabled": False}})
            its[b] = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
            its[b].allocate_tensors()
        rows: dict[str, list[tuple[float, float]]] = {b: [] for b in its}
        for seed in range(args.seeds):
            x = np.random.default_rng(seed).uniform(-1, 1, tuple(inp["shape"])).astype(np.float32)
            ref.set_tensor(inp["index"], x)
            ref.invoke()
            want = [ref.get_tensor(o["index"]) for o in ref.get_output_details()]
            for b, it in its.items():
                it.set_tensor(it.get_input_details()[0]["index"], x)
                it.invoke()
                got = [it.get_tensor(o["index"]) for o in it.get_output_details()]
                mx = max(float(np.abs(g - w).max() / max(float(np.abs(w).max()), 1e-30)) for g, w in zip(got, want, strict=True))
                sig = [(g, w) for g, w in zip(got, want, strict=True) if w.min() >= 0 and w.max() <= 1]
                rms = max((float(np.sqrt(np.mean((_logit(g) - _logit(w)) ** 2))) for g, w in sig), default=float("nan"))
                rows[b].append((mx, rms))
        for b, r in rows.items():
            a = np.array(r)
            print(f"| {name} | {b} | {' '.join(f'{v:.1e}' for v in a[:, 0])} | {np.median(a[:, 0]):.1e} | "
                  f"{np.nanmean(a[:, 1]):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
