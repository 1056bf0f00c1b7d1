"""GPU time of selfie_segmentation's se_gate and spatial-mean reduce launches on Vulkan and OpenCL.

``python bench/gpu_se.py [--backends vulkan,opencl] [--model selfie_segmentation] [--runs 51]``
plans the model on each backend (no cache) and prints, as Markdown tables, every ``se_gate`` and
``reduce`` launch with its input shape, options and median GPU time (Vulkan: timestamp queries around
each dispatch of the partition's command buffer, one at a time; OpenCL: a profiling queue), and the
partition's GPU sum.  Each such launch is also timed at its other group sizes (se_gate ``threads`` x ``loads``,
reduce ``split`` x ``unroll``; Vulkan: one profiled command buffer of the variants), to check the cost model's choice against the best variant.
Compare with the same script's output at an earlier commit, or with ``bench/gpu_kernels.py``'s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models  # noqa: E402
from gpu_kernels import _KEEP, _refs_of, _time_launches, delegated, launch_items, vulkan_rows  # noqa: E402

_KERNELS = ("se_gate", "reduce")
_THREADS = (128, 256, 512, 1024)
_SPLITS = (128, 256, 512, 1024)
_UNROLLS = (1, 2, 4, 8)


def _shape(kernel: str, p: dict) -> str:
    if kernel == "se_gate":
        hid = f"->{p['HID_S'] * 4}" if p.get("HID_S") else ""
        return f"{p['SRC_H']}x{p['SRC_W']}x{p['SRC_S'] * 4}{hid}->{p['C']}"
    return f"{p['SRC_H']}x{p['SRC_W']}x{p['SRC_C']} axes " + "".join(
        a for a, f in zip("BHWC", ("RB", "RH", "RW", "RC"), strict=True) if p.get(f))


def _opts(o: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(o.items()) if k in ("threads", "loads", "cap", "layers", "split", "unroll", "op"))


def _table(title: str, rows: list[tuple]) -> None:
    print(f"\n### {title}\n")
    print("| # | kernel | shape | options | us | other variants (us) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


def _variants(op) -> list[tuple[dict, dict]]:
    """``(options, params)`` of the other group sizes of a se_gate / reduce launch."""
    from litegpu.gpu._cost import SHARED_MEMORY_FLOOR, launch_options
    from litegpu.gpu.ops.squeeze_excite import SE_GATE_LOADS, se_gate_params

    p, o = dict(op.params), dict(op.options)
    ran = launch_options(op.kernel, o)  # the launch's own variant, its left-out options at their defaults
    if op.kernel == "se_gate":
        return [({**o, "threads": th, "loads": ld}, {**p, **se_gate_params(
                    p["B"], (p["SRC_H"], p["SRC_W"]), p["SRC_S"], p["HID_S"], p["C"], th)})
                for th in _THREADS for ld in SE_GATE_LOADS
                if (th, ld) != (ran["threads"], ran["loads"]) and (th + 2 * ran["cap"]) * 16 <= SHARED_MEMORY_FLOOR]
    return [({**o, "split": s, "unroll": u}, p) for s in _SPLITS for u in _UNROLLS
            if (s, u) != (ran["split"], ran["unroll"])]


def _label(o: dict) -> str:
    return _opts({kk: o[kk] for kk in ("threads", "loads", "split", "unroll") if kk in o})


def _vulkan(path: Path, precision: str, runs: int) -> None:
    import statistics

    from litegpu.gpu._device import BufferRef
    from litegpu.gpu.kernels import render

    rows, dev, k = vulkan_rows(path, precision, runs)
    disp = [r for r in rows if r["kernel"] != "copy"]
    out = []
    for i, (ln, op) in enumerate(zip(k._launches, k.ops, strict=True)):
        if op.kernel not in _KERNELS:
            continue
        # the launch's own buffers (its params uniform left out), re-bound for each variant
        n = sum(1 for b in ln.kernel.bindings if b.kind == "storage")
        refs = [BufferRef(buf, off, end - off) for _idx, buf, off, end, _w in ln.bound.uses[:n]]
        # the planned variant again, in the same command buffer as the others; the buffer's first dispatch
        # is a warm-up (on the H200 the first one took ~1.5 us more) whose time is dropped
        planned = (ln.bound, ln.kernel, ln.grid)
        launches, labels = [planned, planned], ["warm-up", _label(op.options) + " (planned)"]
        for vo, vp in _variants(op):
            try:
                rk = render(op.kernel, dev.dialect, k.plan.precision, **vo)
                bound = dev.bind(dev.compile(rk), rk, refs, vp)
            except Exception as e:  # noqa: BLE001 - a variant the device refuses
                print(f"  (variant {vo} skipped: {str(e)[:80]})", file=sys.stderr)
                continue
            _KEEP.append(bound)
            launches.append((bound, rk, rk.global_size(vp)))
            labels.append(_label(vo))
        other = ""
        if len(launches) > 2:
            rec = dev.record(launches, profile=True)
            _KEEP.append(rec)
            samples: dict[int, list[float]] = {}
            for _ in range(runs):
                dev.replay(rec)
                dev.finish()
                for what, j, us in dev.timestamps(rec):
                    if what == "dispatch":
                        samples.setdefault(j, []).append(us)
            vt = [statistics.median(samples[j]) for j in range(1, len(launches))]
            other = ", ".join(f"{lab} {u:.1f}" for lab, u in sorted(zip(labels[1:], vt, strict=True),
                                                                    key=lambda x: x[1]))
        r = disp[i]
        out.append((i, op.kernel, _shape(op.kernel, r["params"]), _opts(r["options"]), f"{r['us']:.1f}", other))
    _table(f"vulkan {path.stem} ({precision}): GPU sum {sum(r['us'] for r in disp):.1f} us over {len(disp)} "
           f"launches; se_gate+reduce {sum(r['us'] for r in disp if r['kernel'] in _KERNELS):.1f} us", out)


def _opencl(path: Path, precision: str, runs: int) -> None:
    import pyopencl as cl
    from litegpu.gpu.kernels import render

    _d, _it, dev, k = delegated(path, "opencl", precision)
    times = _time_launches(cl, dev.ctx, launch_items(k), runs)
    out = []
    for i, (op, t) in enumerate(zip(k.ops, times, strict=True)):
        if op.kernel not in _KERNELS:
            continue
        items, labels = [], []
        for vo, vp in _variants(op):
            try:
                rk = render(op.kernel, dev.dialect, k.plan.precision, **vo)
                bound = dev.bind(dev.compile(rk), rk, _refs_of(k, i), vp)
            except Exception as e:  # noqa: BLE001 - a variant the device refuses (group too large)
                print(f"  (variant {vo} skipped: {str(e)[:80]})", file=sys.stderr)
                continue
            lim = dev.kernel_max_workgroup(bound)
            if lim and rk.workgroup[0] > lim:
                print(f"  (variant {vo} skipped: the compiled kernel takes at most {lim} threads a group)",
                      file=sys.stderr)
                continue
            _KEEP.append(bound)
            grid = rk.global_size(vp)
            items.append((bound[0], tuple(-(-g // w) * w for g, w in zip(grid, rk.workgroup, strict=True)),
                          rk.workgroup))
            labels.append(_label(vo))
        vt = _time_launches(cl, dev.ctx, items, runs) if items else []
        other = ", ".join(f"{lab} {u:.1f}" for lab, u in sorted(zip(labels, vt, strict=True), key=lambda x: x[1]))
        out.append((i, op.kernel, _shape(op.kernel, op.params), _opts(op.options), f"{t:.1f}", other))
    _table(f"opencl {path.stem} ({precision}): GPU sum {sum(times):.1f} us over {len(times)} launches; "
           f"se_gate+reduce {sum(t for op, t in zip(k.ops, times, strict=True) if op.kernel in _KERNELS):.1f} us",
           out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="vulkan,opencl")
    ap.add_argument("--model", default="selfie_segmentation")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--runs", type=int, default=51)
    args = ap.parse_args()
    print(machine_line())
    (path,) = mediapipe_models(args.model).values()
    for b in args.backends.split(","):
        try:
            {"vulkan": _vulkan, "opencl": _opencl}[b](path, args.precision, args.runs)
        except Exception as e:  # noqa: BLE001 - one backend missing must not hide the other's numbers
            print(f"\n{b}: not measured ({type(e).__name__}: {e})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
