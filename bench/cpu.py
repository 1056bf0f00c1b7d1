"""CPU latency: litegpu's numpy interpreter vs LiteRT XNNPACK (1 thread) and LiteRT reference kernels.

Usage: ``python bench/cpu.py [--runs N] [--models a,b] [--json FILE]``

Every engine runs the same model on the same random input in this one
process; each number is the median of ``--runs`` timed invokes after two
warm-ups.  Prints a Markdown table (ready for docs/performance.md) with the
machine and date, and the geometric mean of litegpu / XNNPACK.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models  # noqa: E402


def _time(make, x, runs: int) -> tuple[float, list[np.ndarray]]:
    it = make()
    it.allocate_tensors()
    inp = it.get_input_details()[0]["index"]
    for _ in range(2):
        it.set_tensor(inp, x)
        it.invoke()
    ts = []
    for _ in range(runs):
        it.set_tensor(inp, x)
        t0 = time.perf_counter()
        it.invoke()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3, [it.get_tensor(d["index"]) for d in it.get_output_details()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--models", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import litegpu
    from ai_edge_litert import interpreter as litert
    from litegpu.testing import rel_error

    models = mediapipe_models(args.models)
    rows = []
    for name, path in models.items():
        probe = litegpu.Interpreter(model_path=str(path))
        shape = tuple(probe.get_input_details()[0]["shape"])
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        row = {"model": name}
        try:
            row["xnnpack_1t_ms"], ref = _time(lambda: litert.Interpreter(model_path=str(path), num_threads=1), x, args.runs)
        except Exception as e:  # custom ops LiteRT's Python build lacks
            row["xnnpack_1t_ms"], ref = math.nan, None
            row["note"] = f"LiteRT: {str(e).splitlines()[0][:60]}"
        try:
            row["litert_ref_ms"], _ = _time(lambda: litert.Interpreter(
                model_path=str(path), num_threads=1,
                experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF), x, max(3, args.runs // 4))
        except Exception:
            row["litert_ref_ms"] = math.nan
        row["litegpu_cpu_ms"], ours = _time(lambda: litegpu.Interpreter(model_path=str(path)), x, args.runs)
        if ref is not None:
            row["max_rel_err"] = max(rel_error(o, r) for o, r in zip(ours, ref, strict=False))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    ratios = [r["litegpu_cpu_ms"] / r["xnnpack_1t_ms"] for r in rows if not math.isnan(r["xnnpack_1t_ms"])]
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else math.nan
    print(f"\n{machine_line()}; numpy {np.__version__}; OMP/BLAS threads: "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')}; python {platform.python_version()}\n")
    print("| model | litegpu CPU (ms) | LiteRT XNNPACK 1 thread (ms) | LiteRT reference (ms) | litegpu / XNNPACK | max rel err vs XNNPACK |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["litegpu_cpu_ms"] / r["xnnpack_1t_ms"] if not math.isnan(r["xnnpack_1t_ms"]) else math.nan
        err = f"{r['max_rel_err']:.1e}" if "max_rel_err" in r else r.get("note", "-")
        print(f"| {r['model']} | {r['litegpu_cpu_ms']:.2f} | {r['xnnpack_1t_ms']:.2f} | {r['litert_ref_ms']:.2f} | {ratio:.2f}x | {err} |")
    print(f"\ngeomean litegpu CPU / XNNPACK 1 thread: {geo:.2f}x over {len(ratios)} models")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "geomean": geo, "machine": machine_line()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
