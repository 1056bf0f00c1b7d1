"""``litegpu diff``: Inference Diff, the single-thread CPU reference against a backend."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from .._errors import LiteGPUError
from ._common import (
    EXIT_FAIL,
    CliError,
    add_backend_options,
    add_common_args,
    backend_options,
    emit_json,
    fail_invoke,
    get_outputs,
    load_config_or_none,
    load_model,
    make_interpreter,
    make_progress,
    out,
    parse_option_pairs,
    random_inputs,
    resolve_backend,
    set_inputs,
    table,
    timed_invoke,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="compare a backend's outputs and latency with the CPU reference",
                       description="Inference Diff: run the single-thread CPU reference and the backend on the "
                                   "same N random Gaussian inputs; report both latencies (avg/std) and, per "
                                   "output, the average, standard deviation and maximum of the absolute "
                                   "difference.  Exit status 1 when an output's error is above --tolerance.")
    p.add_argument("model", help=".tflite model file")
    p.add_argument("--backend", "-b", required=True, help="backend under test (auto: the auto-selected one)")
    p.add_argument("--runs", type=int, default=50, metavar="N", help="random inputs to compare on (default 50)")
    p.add_argument("--tolerance", type=float, default=1e-4, metavar="T",
                   help="largest accepted max error (default 1e-4; see --relative)")
    p.add_argument("--relative", action="store_true",
                   help="measure the max error relative to the reference output's range (max - min)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_backend_options(p)
    add_common_args(p, progress=True)
    p.set_defaults(func=run)


def abs_diff(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """|ref - got| in float64; equal non-finite values (nan and nan, inf and inf) count as 0."""
    r = np.asarray(ref, dtype=np.float64)
    g = np.asarray(got, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(r - g)
    same = (r == g) | (np.isnan(r) & np.isnan(g))
    d[same] = 0.0
    d[np.isnan(d)] = np.inf
    return d


def run(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise CliError("--runs must be at least 1")
    if args.tolerance < 0:
        raise CliError("--tolerance must be >= 0")
    model = load_model(args.model)
    config = load_config_or_none(args.config)
    opts = backend_options(config, args.backend, args.precision, parse_option_pairs(args.option))
    args.backend, opts = resolve_backend(model, args.backend, config, opts)
    ref = make_interpreter(model, "cpu", {}, num_threads=1)
    test = make_interpreter(model, args.backend, opts, config=config)
    details = ref.get_input_details()
    out_details = ref.get_output_details()
    rng = np.random.default_rng(args.seed)
    n_out = len(out_details)
    sums = np.zeros(n_out)
    sq = np.zeros(n_out)
    counts = np.zeros(n_out)
    maxes = np.zeros(n_out)
    lo = np.full(n_out, np.inf)
    hi = np.full(n_out, -np.inf)
    per_run_avg: list[list[float]] = [[] for _ in range(n_out)]
    ref_us: list[float] = []
    test_us: list[float] = []
    with make_progress(args, f"diff cpu vs {args.backend}", args.runs) as bar:
        for k in range(args.runs):
            inputs = random_inputs(details, rng, gaussian=True)
            try:
                set_inputs(ref, inputs)
                if k == 0:
                    ref.invoke()  # the first run is the checked one: keep it out of the timings
                ref_us.append(timed_invoke(ref) * 1e6)
                want = get_outputs(ref)
            except (LiteGPUError, ValueError, RuntimeError) as e:
                raise fail_invoke(model, "cpu", e) from e
            try:
                set_inputs(test, inputs)
                if k == 0:
                    test.invoke()
                test_us.append(timed_invoke(test) * 1e6)
                got = get_outputs(test)
            except (LiteGPUError, ValueError, RuntimeError) as e:
                raise fail_invoke(model, args.backend, e) from e
            for j, (w, g) in enumerate(zip(want, got, strict=True)):
                if w.shape != g.shape:
                    raise CliError(f"output {out_details[j]['name']!r}: backend {args.backend} gave shape "
                                   f"{g.shape}, the reference {w.shape}", status=EXIT_FAIL)
                d = abs_diff(w, g)
                if d.size:
                    sums[j] += d.sum()
                    sq[j] += np.square(d).sum()
                    counts[j] += d.size
                    maxes[j] = max(maxes[j], float(d.max()))
                    per_run_avg[j].append(float(d.mean()))
                    wf = w.astype(np.float64)
                    finite = wf[np.isfinite(wf)]
                    if finite.size:
                        lo[j] = min(lo[j], float(finite.min()))
                        hi[j] = max(hi[j], float(finite.max()))
            bar.update()
    rows = []
    failed = False
    for j, d in enumerate(out_details):
        n = counts[j] or 1
        avg = sums[j] / n
        var = max(0.0, sq[j] / n - avg * avg)
        rng_ = float(hi[j] - lo[j]) if np.isfinite(hi[j] - lo[j]) else 0.0
        rel = maxes[j] / rng_ if rng_ > 0 else (0.0 if maxes[j] == 0 else float("inf"))
        measured = rel if args.relative else maxes[j]
        ok = bool(measured <= args.tolerance)
        failed |= not ok
        rows.append({"name": d["name"], "index": int(d["index"]), "shape": [int(s) for s in d["shape"]],
                     "avg_error": float(avg), "std_dev": float(np.sqrt(var)), "max_error": float(maxes[j]),
                     "reference_range": rng_, "max_error_relative": float(rel),
                     "per_run_avg_error_std": float(np.std(per_run_avg[j])) if per_run_avg[j] else 0.0,
                     "ok": ok})
    result: dict[str, Any] = {
        "model": model.path, "backend": args.backend, "options": {k: v for k, v in opts.items() if k != "cache"},
        "runs": args.runs, "seed": args.seed, "tolerance": args.tolerance,
        "metric": "max_error_relative" if args.relative else "max_error",
        "reference_latency_us": {"avg": float(np.mean(ref_us)), "std": float(np.std(ref_us))},
        "test_latency_us": {"avg": float(np.mean(test_us)), "std": float(np.std(test_us))},
        "execution_plan": test.get_execution_plan(), "outputs": rows, "passed": not failed,
    }
    if args.json:
        emit_json(result)
    else:
        r, t = result["reference_latency_us"], result["test_latency_us"]
        out(f"{model.name}: cpu reference (1 thread) vs {args.backend}, {args.runs} random Gaussian inputs")
        out(f"reference latency: avg {r['avg']:.1f} us, std {r['std']:.1f} us")
        out(f"test latency:      avg {t['avg']:.1f} us, std {t['std']:.1f} us")
        body = [[o["name"], "x".join(map(str, o["shape"])), f"{o['avg_error']:.6g}", f"{o['std_dev']:.6g}",
                 f"{o['max_error']:.6g}", f"{o['max_error_relative']:.3g}", "ok" if o["ok"] else "FAIL"]
                for o in rows]
        out(table(["OUTPUT", "SHAPE", "AVG_ERROR", "STD_DEV", "MAX_ERROR", "MAX/RANGE", ""], body,
                  right=(2, 3, 4, 5)))
        what = "max error relative to the output range" if args.relative else "max error"
        out(f"{'PASS' if not failed else 'FAIL'}: {what} {'within' if not failed else 'above'} "
            f"tolerance {args.tolerance:g}")
    return EXIT_FAIL if failed else 0
