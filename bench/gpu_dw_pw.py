"""Depthwise -> 1x1 conv fusion on OpenCL: fused launch vs the two unfused launches, and whole invokes.

``python bench/gpu_dw_pw.py [--models a,b] [--runs 21] [--invokes 50]`` compiles each model three ways
(fusion off; the default recomputation budget; every fusable pair fused), then prints

* per fusable pair: its shape, the depthwise recomputation the fused kernel adds (multiply-adds, the
  quantity ``_passes/fuse_dw_pw`` budgets), the GPU time of the fused launch and of the depthwise +
  1x1 launches it replaces (profiling events, median of ``--runs``);
* per model: launches and the median wall time of ``invoke`` (inputs set once) in each configuration.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RUNNABLE, machine_line, mediapipe_models  # noqa: E402
from gpu_kernels import _gsize, _time_launches  # noqa: E402

_F = importlib.import_module("litegpu.gpu._passes.fuse_dw_pw")
CONFIGS = {"off": -1, "default": _F.DW_PW_RECOMPUTE_BUDGET, "all": 1 << 62}


def _kernel_of(it):
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    return k


def _extra(op) -> int:
    p = op.params
    s_out = p["S"]
    bs = _F.dw_pw_block_s(s_out)
    return p["B"] * p["H"] * p["W"] * p["SRC_S"] * 4 * p["KH"] * p["KW"] * (-(-s_out // bs) - 1)


_TUNE = ("split", "block_s", "block_w")


def _ops(k) -> list:
    return list(getattr(k, "ops", k.plan.ops))


def _key(op):
    return (tuple(sorted(op.params.items())), tuple(sorted((k, v) for k, v in op.options.items() if k not in _TUNE)))


def _explore(cl, dev, k, seen, keep) -> dict:
    """Best (us, options) of every split / block_s / block_w variant of each new fused launch."""
    from gpu_kernels import _refs_of
    from litegpu.gpu._tuning import candidates
    from litegpu.gpu.kernels import kernel_spec, render

    out = {}
    spec = kernel_spec("dw_pw_conv2d")
    for i, op in enumerate(_ops(k)):
        if op.kernel != "dw_pw_conv2d" or _key(op) in seen or _key(op) in out:
            continue
        base = {kk: v for kk, v in op.options.items() if kk not in _TUNE}
        items, meta = [], []
        for split in (1, 4, 8, 16, 32, 64, 128):
            if split > 2 * op.params["SRC_S"]:
                continue
            for bs in (1, 2):
                for bw in (1, 2):
                    opts = {**base, "split": split, "block_s": bs, "block_w": bw}
                    probe = render("dw_pw_conv2d", dev.dialect, k.plan.precision, **opts)
                    grid = probe.global_size(op.params)
                    fixed = spec.fixed_workgroup(spec.resolve(opts))
                    for wg in [fixed] if fixed else candidates("dw_pw_conv2d", grid, dev.info, "fast")[:3]:
                        rk = render("dw_pw_conv2d", dev.dialect, k.plan.precision, workgroup=wg, **opts)
                        bound = dev.bind(dev.compile(rk), rk, _refs_of(k, i), op.params)
                        lim = dev.kernel_max_workgroup(bound)
                        if lim and int(np.prod(wg)) > lim:
                            continue
                        keep.append(bound)
                        items.append((bound[0], _gsize(rk.global_size(op.params), wg), tuple(wg)))
                        meta.append({"split": split, "block_s": bs, "block_w": bw, "wg": tuple(wg)})
        times = _time_launches(cl, dev.ctx, items, 7)
        j = int(np.argmin(times))
        out[_key(op)] = (times[j], meta[j])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--invokes", type=int, default=50)
    ap.add_argument("--explore", action="store_true", help="time every split/block variant of each fused launch")
    args = ap.parse_args()

    import litegpu
    import pyopencl as cl

    print(machine_line())
    opts = {"precision": "fp32", "cache": {"enabled": False}}
    try:
        d = litegpu.load_delegate("opencl", opts)
    except litegpu.UnknownBackendError:  # a source checkout: PYTHONPATH=core:backends/opencl
        from litegpu_opencl import OpenCLBackend

        d = OpenCLBackend().create_delegate(opts)
    pairs, summary = [], []
    keep: list = []
    explored: dict = {}
    for name, path in mediapipe_models(args.models, default=RUNNABLE).items():
        row = {"model": name}
        kernels = {}
        for cfg, budget in CONFIGS.items():
            _F.DW_PW_RECOMPUTE_BUDGET = budget
            it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
            it.allocate_tensors()
            for det in it.get_input_details():
                it.set_tensor(det["index"], np.random.default_rng(0).random(det["shape"], dtype=np.float32))
            for _ in range(5):
                it.invoke()
            ts = []
            for _ in range(args.invokes):
                t0 = time.perf_counter()
                it.invoke()
                ts.append(time.perf_counter() - t0)
            k = _kernel_of(it)
            row[cfg] = (len(k.plan.ops), statistics.median(ts) * 1e3)
            items = [(ln.bound[0], _gsize(ln.grid, ln.kernel.workgroup), ln.kernel.workgroup) for ln in k._launches]
            kernels[cfg] = (k, _time_launches(cl, d.device.ctx, items, args.runs))
            keep.append(it)
            if args.explore and cfg == "all":
                explored.update(_explore(cl, d.device, k, explored, keep))
        _F.DW_PW_RECOMPUTE_BUDGET = CONFIGS["default"]
        summary.append(row)
        (k_all, t_all), (k_off, t_off) = kernels["all"], kernels["off"]
        # launches in launch order (newer runtimes add boundary layout launches around the plan's: k.ops)
        by_origin = {tuple(op.origin): t for op, t in zip(_ops(k_off), t_off, strict=True) if op.origin}
        for op, t in zip(_ops(k_all), t_all, strict=True):
            if op.kernel != "dw_pw_conv2d":
                continue
            parts = [tt for o, tt in by_origin.items() if set(o) <= set(op.origin)]
            p = op.params
            best = explored.get(_key(op))
            pairs.append({"model": name, "shape": f"{p['KH']}x{p['KW']}/{p['STRIDE_H']} {p['SRC_S'] * 4}->{p['C']} "
                          f"@{p['H']}x{p['W']}", "extra": _extra(op), "fused": t, "unfused": sum(parts),
                          "n": len(parts), "opts": op.describe()
                          + (f" best {best[0]:.1f} {best[1]}" if best else "")})
    print("\n## fusable pairs (GPU time, us; extra = depthwise multiply-adds the fused kernel adds)")
    print(f"{'model':28s} {'pair':28s} {'extra':>12s} {'fused':>8s} {'dw+pw':>8s} {'saved':>8s}  kernel")
    for r in sorted(pairs, key=lambda r: r["extra"]):
        print(f"{r['model'][:28]:28s} {r['shape']:28s} {r['extra']:12d} {r['fused']:8.1f} {r['unfused']:8.1f} "
              f"{r['unfused'] - r['fused']:8.1f}  {r['opts']}" + ("" if r["n"] == 2 else f" (matched {r['n']})"))
    print("\n## invoke wall time (ms, median) and launches per configuration")
    print(f"{'model':34s} " + " ".join(f"{c:>16s}" for c in CONFIGS))
    for row in summary:
        print(f"{row['model']:34s} " + " ".join(f"{row[c][1]:9.3f} ({row[c][0]:3d})" for c in CONFIGS))
    keep.clear()
    d.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
