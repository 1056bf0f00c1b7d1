"""Full-integer UNIDIRECTIONAL_SEQUENCE_LSTM fully delegated to a GPU backend against LiteRT: the fraction
of int8 outputs identical to LiteRT's and the largest difference, over 24 builder models (1-3 batch rows,
3-9 steps, 8-20 cells, with and without cell_clip, both time orders) x 3 invokes (the state carries over).

    python bench/lstm_int8_exact.py [opencl|vulkan|webgpu ...] [--models N] [--forms]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "quant"), str(ROOT / "tests" / "backends"), str(ROOT / "tests")]

import litegpu  # noqa: E402
from _litegpu_backends import load_backend_delegate  # noqa: E402
from litegpu.testing import run_invokes  # noqa: E402
from test_quant_recurrent import integer_lstm_model  # noqa: E402


def model_configs(n: int, forms: bool = False) -> list[dict]:
    """The plain converter form; with ``forms`` also CIFG, peephole, projection and the one-step LSTM op."""
    r = np.random.default_rng(16)
    cfgs = [dict(n_batch=int(r.integers(1, 4)), steps=int(r.integers(3, 10)), n_input=int(r.integers(3, 12)),
                 n_cell=int(r.integers(8, 21)), time_major=bool(k % 2), cell_clip=float(0.5 if k % 3 == 0 else 0.0))
            for k in range(n)]
    if forms:
        for k, c in enumerate(cfgs):
            c.update(cifg=k % 4 in (1, 3), peephole=k % 4 in (2, 3), projection=k % 3 == 1)
            if c["projection"]:  # a projection to fewer outputs (with a peephole LiteRT needs the same size)
                c.update(n_output=c["n_cell"] if c["peephole"] else c["n_cell"] - 3, proj_clip=0.5 * (k % 2))
            if k % 5 == 0:
                c.update(op="LSTM")
                del c["steps"], c["time_major"]
    return cfgs


def run(backend: str, n_models: int, forms: bool = False) -> tuple[int, int, int]:
    exact = total = worst = 0
    for k, cfg in enumerate(model_configs(n_models, forms)):
        model, x = integer_lstm_model(100 + k, **cfg)
        feeds = [[np.roll(x, j, axis=-1)] for j in range(3)]
        ref = run_invokes(model, feeds)
        it = litegpu.Interpreter(model_content=model,
                                 experimental_delegates=[load_backend_delegate(backend, {"cache": {"enabled": False}})])
        it.allocate_tensors()
        plan = [s["backend"] for s in it.get_execution_plan()]
        assert plan == [backend], f"model {k} not fully delegated: {plan}"
        for f, r in zip(feeds, ref, strict=True):
            it.set_tensor(it.get_input_details()[0]["index"], f[0])
            it.invoke()
            got = it.get_tensor(it.get_output_details()[0]["index"]).astype(int)
            d = np.abs(got - r[0].astype(int))
            exact += int((d == 0).sum())
            total += d.size
            worst = max(worst, int(d.max()))
    return exact, total, worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("backends", nargs="*", default=["opencl"])
    ap.add_argument("--models", type=int, default=24)
    ap.add_argument("--forms", action="store_true", help="CIFG, peephole, projection and LSTM-op models too")
    a = ap.parse_args()
    for b in a.backends:
        exact, total, worst = run(b, a.models, a.forms)
        what = "models (plain, CIFG, peephole, projection, LSTM op)" if a.forms else "models"
        print(f"{b}: {a.models} {what} x 3 invokes, {total} int8 outputs: {exact / total:.2%} exact "
              f"({total - exact} differ), max {worst} LSB")


if __name__ == "__main__":
    main()
