"""How well the GPU cost model (``litegpu.gpu._cost``) ranks kernel variants against measured times.

``python bench/cost_fit.py explore.json [--profile nvidia] [--cost field=value,...] [--floor US] [--worst N]
[--fit step_us,group_us,...] [--gain pack,unroll]``

Reads the output of ``bench/gpu_kernels.py --backend opencl --explore --json explore.json`` (every launch of
the benchmark models with every variant's GPU time) -- no GPU needed -- and, for each launch of a kernel
family the model chooses among (conv2d / conv2d_tiled, fully_connected), ranks the variants the chooser
weighs by the model's estimate and compares with the measured ranking:

* ``picked``: the measured time of the variant the model picks now (the cheapest estimate among the
  variants that were measured; launches whose pick was not measured are counted in ``unmeasured``),
* ``ran``: the measured time of the variant the run that recorded the file chose (the model of that day),
* ``best``: the measured best of the variants the chooser weighs,

summed per model and per kernel family, and the estimate error: the median of estimate / measured
(``--floor`` is added to every estimate: OpenCL event times carry a larger per-launch floor than the
Vulkan ``launch_us`` the profile holds) and the mean |log| ratio, over every measured variant and over the
picks.  Depthwise convolutions (no choice) count in the error only.  A variant's time is the one with the
work group the runtime would use (the tuner's first candidate, ``tuning: none``); a ``split`` or tiled
variant's group is fixed.  ``--worst N`` lists the N launches where the pick loses most to the best;
``--cost`` replaces fields of the profile (e.g. to rank with an earlier calibration's constants).

``--fit FIELDS`` calibrates: it fits the named :class:`~litegpu.gpu._cost.DeviceCost` fields of the profile
(least squares of log(estimate / measured) over every measured variant, Nelder-Mead on their logarithms),
prints the fitted values and the tables for the fitted profile.  The fitted values are for
``PROFILES`` in ``core/litegpu/gpu/_cost.py`` (record the date and device in its comment).

``--gain OPTIONS`` (e.g. ``pack,unroll``) prints, per model and kernel, the summed best measured time of the
explored launches with those options at their defaults against the best with any value, and which values
won: what a new kernel option can give before the model is taught to pick it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

#: the tuning options that tell a kernel's variants apart
_TUNING = {"conv2d": ("block_w", "block_s", "split", "pack", "unroll", "two_round"), "conv2d_tiled": ("tile_p", "tile_s", "kc"),
           "heads": ("split",), "fully_connected": ("split",)}


def _fc_row(row: dict) -> bool:
    """A FULLY_CONNECTED launch: the ``heads`` kernel's one-head, one-tap case (files from before the fold name
    it ``fully_connected``)."""
    return row["kernel"] == "fully_connected" or (
        row["kernel"] == "heads" and row["options"].get("n") == 1 and row["params"].get("T0") == 1)


def _key(kernel: str, options: dict[str, Any]) -> tuple:
    """``(kernel, option values...)``; an option left out (lowering omits defaults) is the template's default."""
    from litegpu.gpu.kernels import kernel_spec

    given = {k: v for k, v in options.items() if k in _TUNING[kernel] and v is not None}
    kernel = "heads" if kernel == "fully_connected" else kernel  # the FC's kernel since the fold
    full = kernel_spec(kernel).resolve(given)
    return (kernel, *(int(full[k]) for k in _TUNING[kernel]))


def _measured(row: dict) -> dict[tuple, float]:
    """Each explored option set's time with the work group the runtime would give it (the first listed)."""
    out: dict[tuple, float] = {}
    for v in row.get("variants", []):
        if "us" in v:
            out.setdefault(_key(v.get("kernel", row["kernel"]), v["options"]), v["us"])
    return out


def _candidates(row: dict, dev) -> list[tuple[tuple, Any]]:
    """``(key, Work)`` of every variant the chooser weighs for this launch."""
    from litegpu.gpu import _cost
    from litegpu.gpu.ops.conv import tiled_has_form

    p, o = row["params"], row["options"]
    if row["kernel"] in ("conv2d", "conv2d_tiled"):
        tiled = row["kernel"] == "conv2d_tiled" or tiled_has_form(o)  # the chooser's own rule
        out = []
        for k, opts, w in _cost.conv_candidates(p, dev, bool(o.get("grouped")), tiled, o):
            out.append((_key(k, opts), w))
            if k == "conv2d" and opts["split"] > 1:  # the split summed the other way (two_round), as a file
                other = {**opts, "two_round": not opts["two_round"]}  # from before the option has timed it
                out.append((_key(k, other), _cost.launch_work(k, {**o, **other}, p)))
        return out
    rows, out_s, in_s = (p["B"], p["S"], p["SRC_S"]) if "SRC_S" in p else (p["B"], p["G0"], p["SRC_S0"])
    return [(_key("heads", {"split": s}), w) for s, w in _cost.fc_candidates(rows, out_s, in_s, dev)]


def analyse(data: dict[str, list[dict]], dev, floor: float) -> dict[str, Any]:
    from litegpu.gpu._cost import estimate, launch_work

    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])  # picked ran best n
    ratios_all: list[float] = []
    by_kernel: dict[str, list[float]] = defaultdict(list)  # every measured variant's ratio, per kernel
    ratios_pick: list[float] = []
    unmeasured = 0
    losses: list[tuple[float, str, dict, tuple, float, tuple, float, float]] = []
    for model, rows in data.items():
        for row in rows:
            kern = row["kernel"]
            family = "fully_connected" if _fc_row(row) else {"conv2d_tiled": "conv2d"}.get(kern, kern)
            if kern == "depthwise_conv2d" and "est" in row:
                w = launch_work(kern, row["options"], row["params"])
                if w is not None:
                    ratios_all.append((estimate(w, dev) + floor) / row["us"])
                    by_kernel[kern].append(ratios_all[-1])
                continue
            if family not in ("conv2d", "fully_connected") or not row.get("variants"):
                continue
            meas = _measured(row)
            cands = [(k, estimate(w, dev)) for k, w in _candidates(row, dev)]
            top = min(cands, key=lambda c: c[1])
            timed = [(k, e) for k, e in cands if k in meas]
            if not timed:
                continue
            for k, e in timed:
                ratios_all.append((e + floor) / meas[k])
                by_kernel[k[0]].append(ratios_all[-1])
            if top[0] not in meas:
                unmeasured += 1
            pick, est = min(timed, key=lambda c: c[1])
            ran = meas.get(_key(kern, row["options"]), row["us"])
            best_k = min((k for k, _ in timed), key=meas.__getitem__)
            ratios_pick.append((est + floor) / meas[pick])
            for key in ((model, family), (model, "all"), ("all", family), ("all", "all")):
                s = sums[key]
                s[0] += meas[pick]
                s[1] += ran
                s[2] += meas[best_k]
                s[3] += 1
            losses.append((meas[pick] - meas[best_k], model, row["params"], pick, meas[pick], best_k,
                           meas[best_k], est + floor))
    return {"sums": dict(sums), "ratios_all": ratios_all, "by_kernel": dict(by_kernel),
            "ratios_pick": ratios_pick, "unmeasured": unmeasured,
            "losses": sorted(losses, key=lambda x: -x[0])}


def _samples(data: dict[str, list[dict]], dev) -> list[tuple[Any, float]]:
    """``(Work, measured us)`` of every measured variant of the launches the model prices (each variant's
    own :class:`Work`, so the twins the chooser would not weigh -- e.g. a split summed the other way -- count)."""
    from litegpu.gpu._cost import launch_work

    out = []
    for rows in data.values():
        for row in rows:
            if row["kernel"] == "depthwise_conv2d":
                w = launch_work(row["kernel"], row["options"], row["params"])
                out += [(w, row["us"])] if w is not None else []
            elif (row["kernel"] in ("conv2d", "conv2d_tiled") or _fc_row(row)) and row.get("variants"):
                seen: set[tuple] = set()
                for v in row["variants"]:
                    kern = v.get("kernel", row["kernel"])
                    if "us" not in v or kern not in _TUNING:
                        continue
                    key = _key(kern, v["options"])
                    if key in seen:  # the work group the runtime would use: the first listed
                        continue
                    seen.add(key)
                    w = launch_work(kern, v["options"], row["params"])
                    out += [(w, v["us"])] if w is not None else []
    return out


def _nelder_mead(f, x0: list[float], step: float = 0.3, iters: int = 800) -> list[float]:
    """Minimise ``f`` from ``x0`` (a plain Nelder-Mead simplex; the fit has a handful of parameters)."""
    pts = [list(x0)] + [[v + (step if i == j else 0.0) for j, v in enumerate(x0)] for i in range(len(x0))]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(len(pts)), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < 1e-7:
            break
        c = [sum(p[j] for p in pts[:-1]) / (len(pts) - 1) for j in range(len(x0))]

        def toward(t: float) -> list[float]:
            return [cj + t * (cj - wj) for cj, wj in zip(c, pts[-1], strict=True)]

        xr = toward(1.0)
        fr = f(xr)
        if fr < vals[0]:
            xe = toward(2.0)
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = toward(-0.5)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                half = [[a + 0.5 * (b - a) for a, b in zip(pts[0], p, strict=True)] for p in pts[1:]]
                pts = [pts[0], *half]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    return pts[min(range(len(pts)), key=vals.__getitem__)]


def fit(data: dict[str, list[dict]], dev, fields: list[str], floor: float):
    """``dev`` with ``fields`` fitted to the measured times (least squares of the log ratio)."""
    from dataclasses import replace

    from litegpu.gpu._cost import estimate

    samples = _samples(data, dev)

    def at(x: list[float]):
        return replace(dev, **{k: math.exp(v) for k, v in zip(fields, x, strict=True)})

    def loss(x: list[float]) -> float:
        d = at(x)
        return statistics.fmean(math.log((estimate(w, d) + floor) / us) ** 2 for w, us in samples)

    x0 = [math.log(max(1e-3, float(getattr(dev, k)))) for k in fields]
    return at(_nelder_mead(loss, x0))


def _err(r: list[float]) -> str:
    if not r:
        return "-"
    mean_log = statistics.fmean(abs(math.log(x)) for x in r)
    return f"median est/us {statistics.median(r):.2f}, mean abs log {mean_log:.2f}"


def report(res: dict[str, Any], worst: int) -> str:
    lines = ["| model | family | launches | picked (us) | ran (us) | best (us) | picked / best |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for (model, fam), (pick, ran, best, n) in sorted(res["sums"].items(), key=lambda x: (x[0][0] == "all", x[0])):
        lines.append(f"| {model} | {fam} | {int(n)} | {pick:.1f} | {ran:.1f} | {best:.1f} | {pick / best:.3f} |")
    lines.append("")
    lines.append(f"estimate error, every measured variant: {_err(res['ratios_all'])}")
    lines.append(f"estimate error, the picks: {_err(res['ratios_pick'])}")
    for kern, r in sorted(res["by_kernel"].items()):
        lines.append(f"estimate error, {kern} ({len(r)} timed): {_err(r)}")
    lines.append(f"launches whose pick was not among the measured variants: {res['unmeasured']}")
    if worst:
        lines += ["", "| loss (us) | model | shape | picked | us | est + floor | best | us |",
                  "|---:|---|---|---|---:|---:|---|---:|"]
        for loss, model, p, pk, pus, bk, bus, est in res["losses"][:worst]:
            shape = (f"{p.get('SRC_H', p.get('B'))}x{p.get('SRC_W', '')}x{p.get('SRC_S')}s -> {p.get('H', '')}x"
                     f"{p.get('W', '')}x{p.get('S')}s k{p.get('KH', '')}s{p.get('STRIDE_H', '')}")
            lines.append(f"| {loss:.1f} | {model} | {shape} | {pk} | {pus:.1f} | {est:.1f} | {bk} | {bus:.1f} |")
    return "\n".join(lines)


def gain(data: dict[str, list[dict]], options: list[str]) -> str:
    """Per model and kernel: the summed best measured time of every explored launch with ``options`` at
    their defaults against the best with any value (what those options can win), and the values that won."""
    from litegpu.gpu.kernels import kernel_spec

    def changed(v: dict, kern: str) -> dict[str, Any]:
        """The variant's ``options`` that are not their template defaults."""
        name = v.get("kernel", kern)
        spec = kernel_spec("heads" if name == "fully_connected" else name).options  # the FC's kernel since the fold
        return {o: v["options"][o] for o in options
                if o in spec and v["options"].get(o) is not None and v["options"][o] != spec[o].default}

    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    wins: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for model, rows in data.items():
        for row in rows:
            ok = [v for v in row.get("variants", []) if "us" in v]
            base = [v["us"] for v in ok if not changed(v, row["kernel"])]
            if not base:
                continue
            best = min(ok, key=lambda v: v["us"])
            won = ",".join(f"{o}={x}" for o, x in changed(best, row["kernel"]).items()) or "defaults"
            for key in ((model, row["kernel"]), ("all", row["kernel"])):
                sums[key][0] += min(base)
                sums[key][1] += best["us"]
                sums[key][2] += 1
                wins[key][won] += 1
    lines = [f"| model | kernel | launches | best, {'/'.join(options)} default (us) | best (us) | ratio | winners |",
             "|---|---|---:|---:|---:|---:|---|"]
    for (model, kern), (b, w, n) in sorted(sums.items(), key=lambda x: (x[0][0] == "all", x[0])):
        top = ", ".join(f"{k} x{c}" for k, c in sorted(wins[(model, kern)].items(), key=lambda x: -x[1])[:4])
        lines.append(f"| {model} | {kern} | {int(n)} | {b:.1f} | {w:.1f} | {w / b:.3f} | {top} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="bench/gpu_kernels.py --explore --json output")
    ap.add_argument("--profile", default="nvidia")
    ap.add_argument("--floor", type=float, default=2.7,
                    help="us added to every estimate (OpenCL event floor above the profile's launch_us)")
    ap.add_argument("--worst", type=int, default=0)
    ap.add_argument("--cost", default="", help="profile fields to replace, e.g. step_us=0.42,overlap=1")
    ap.add_argument("--fit", default="", help="comma-separated DeviceCost fields to fit, e.g. step_us,group_us")
    ap.add_argument("--gain", default="", help="options (a,b): what the explored values of these won over their "
                                                 "defaults, per model and kernel (best measured sums)")
    args = ap.parse_args()
    from litegpu.gpu import ops  # noqa: F401 - hands the cost model the kernel specs (launch_work's defaults)
    from litegpu.gpu._cost import PROFILES

    data = json.loads(Path(args.json).read_text())
    dev = PROFILES[args.profile]
    if args.cost:
        from dataclasses import replace

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _common import cost_overrides

        dev = replace(dev, **cost_overrides(args.cost))
    if args.fit:
        dev = fit(data, dev, [f for f in args.fit.split(",") if f], args.floor)
        print("fitted: " + ", ".join(f"{f}={getattr(dev, f):.4g}" for f in args.fit.split(",") if f) + "\n")
    if args.gain:
        print(f"# what {args.gain} won (best measured variants) in {args.json}\n")
        print(gain(data, [o for o in args.gain.split(",") if o]) + "\n")
    print(f"# cost model `{args.profile}` against {args.json}\n")
    print(report(analyse(data, dev, args.floor), args.worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
