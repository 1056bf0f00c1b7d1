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
    chosen_backend,
    emit_json,
    fail_invoke,
    get_outputs,
    load_model,
    make_interpreter,
    make_progress,
    out,
    parse_input_specs,
    random_inputs,
    set_inputs,
    table,
    timed_invoke,
)
from ._preprocess import ImageInputs, add_image_args


def relative_error(max_error: float, ref_range: float, ref_magnitude: float) -> float:
    """The max error relative to the reference output's range; an output with no range (a constant,
    such as one score over one run) relative to its largest magnitude, and absolute when that is 0."""
    scale = ref_range if ref_range > 0 else ref_magnitude if ref_magnitude > 0 else 1.0
    return max_error / scale

def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="compare a backend's outputs and latency with a reference (CPU or LiteRT)",
                       description="Inference Diff: run the reference (litegpu's single-thread CPU interpreter, or "
                                   "LiteRT with --reference litert) and the backend on the same inputs (random "
                                   "Gaussian ones, or files given with --input); report both latencies and, per "
                                   "output, the average, standard deviation and maximum of the absolute "
                                   "difference, and the maximum relative to the reference output's range.  Exit "
                                   "status 1 when an output's error is above --tolerance.")
    p.add_argument("model", help=".tflite model file, or the name of a fetched model")
    p.add_argument("--backend", "-b", required=True, help="backend under test (auto: the auto-selected one)")
    p.add_argument("--reference", choices=("cpu", "litert"), default="cpu",
                   help="reference: litegpu's CPU interpreter (default) or LiteRT's reference kernels "
                        "(needs ai-edge-litert: pip install 'litegpu[litert]')")
    p.add_argument("--input", "-i", action="append", default=[], metavar="[NAME=]FILE",
                   help="use this input (a .npy array or an image) in every run instead of random values; "
                        "a bare FILE for a single-input model; repeatable")
    p.add_argument("--runs", type=int, default=None, metavar="N",
                   help="inputs to compare on (default 50; 1 when --input gives every input)")
    p.add_argument("--tolerance", type=float, default=1e-4, metavar="T",
                   help="largest accepted max error relative to the reference output's range (default 1e-4); "
                        "with --absolute, the largest absolute error")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--absolute", action="store_true", help="check the absolute max error instead")
    mode.add_argument("--relative", action="store_true", help=argparse.SUPPRESS)  # the default; kept for scripts
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_image_args(p)
    add_backend_options(p)
    add_common_args(p, progress=True)
    p.set_defaults(func=run)


def _litert_reference(model: Any) -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise CliError("--reference litert needs LiteRT: pip install 'litegpu[litert]' (ai-edge-litert)") from None
    it = Interpreter(model_content=model.data, num_threads=1,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    return it


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
    if args.runs is not None and args.runs < 1:
        raise CliError("--runs must be at least 1")
    if args.tolerance < 0:
        raise CliError("--tolerance must be >= 0")
    model = load_model(args.model)
    config, args.backend, opts = chosen_backend(model, args)
    ref = _litert_reference(model) if args.reference == "litert" else make_interpreter(model, "cpu", {},
                                                                                         num_threads=1)
    ref_name = "litert" if args.reference == "litert" else "cpu"
    test = make_interpreter(model, args.backend, opts, config=config)
    details = test.get_input_details()
    out_details = test.get_output_details()
    given = parse_input_specs(args.input, details, image_loader=ImageInputs(model.path, model.model, model.data, args))
    if args.runs is None:
        args.runs = 1 if len(given) == len(details) else 50
    rng = np.random.default_rng(args.seed)
    n_out = len(out_details)
    sums = np.zeros(n_out)
    sq = np.zeros(n_out)
    counts = np.zeros(n_out)
    maxes = np.zeros(n_out)
    lo = np.full(n_out, np.inf)
    hi = np.full(n_out, -np.inf)
    mag = np.zeros(n_out)  # largest |reference value|: the scale of an output with no range
    per_run_avg: list[list[float]] = [[] for _ in range(n_out)]
    ref_us: list[float] = []
    test_us: list[float] = []
    with make_progress(args, f"diff {ref_name} vs {args.backend}", args.runs) as bar:
        for k in range(args.runs):
            rand = random_inputs(details, rng, gaussian=True)
            inputs = [given.get(i, rand[i]) for i in range(len(details))]
            try:
                set_inputs(ref, inputs)
                if k == 0:
                    ref.invoke()  # the first run is the checked one: keep it out of the timings
                ref_us.append(timed_invoke(ref) * 1e6)
                want = get_outputs(ref)
            except (LiteGPUError, ValueError, RuntimeError) as e:
                raise fail_invoke(model, ref_name, e) from e
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
                        mag[j] = max(mag[j], float(np.abs(finite).max()))
            bar.update()
    rows = []
    failed = False
    for j, d in enumerate(out_details):
        n = counts[j] or 1
        avg = sums[j] / n
        var = max(0.0, sq[j] / n - avg * avg)
        rng_ = float(hi[j] - lo[j]) if np.isfinite(hi[j] - lo[j]) else 0.0
        rel = relative_error(float(maxes[j]), rng_, float(mag[j]))
        measured = maxes[j] if args.absolute else rel
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
        "reference": ref_name, "given_inputs": sorted(int(k) for k in given),
        "metric": "max_error" if args.absolute else "max_error_relative",
        "reference_latency_us": {"avg": float(np.mean(ref_us)), "std": float(np.std(ref_us))},
        "test_latency_us": {"avg": float(np.mean(test_us)), "std": float(np.std(test_us))},
        "execution_plan": test.get_execution_plan(), "outputs": rows, "passed": not failed,
    }
    if args.json:
        emit_json(result)
    else:
        r, t = result["reference_latency_us"], result["test_latency_us"]
        src = "the given inputs" if len(given) == len(details) else (
            "random Gaussian inputs" + (" and the given ones" if given else ""))
        what_ref = "LiteRT reference kernels" if ref_name == "litert" else "cpu reference (1 thread)"
        out(f"{model.name}: {what_ref} vs {args.backend}, {args.runs} run(s) on {src}")
        out(f"reference latency: avg {r['avg'] / 1e3:.3g} ms, std {r['std'] / 1e3:.3g} ms")
        out(f"test latency:      avg {t['avg'] / 1e3:.3g} ms, std {t['std'] / 1e3:.3g} ms")
        body = [[o["name"], "x".join(map(str, o["shape"])), f"{o['avg_error']:.6g}", f"{o['std_dev']:.6g}",
                 f"{o['max_error']:.6g}", f"{o['max_error_relative']:.3g}", "ok" if o["ok"] else "FAIL"]
                for o in rows]
        out(table(["OUTPUT", "SHAPE", "AVG_ERROR", "STD_DEV", "MAX_ERROR", "MAX/RANGE", ""], body,
                  right=(2, 3, 4, 5)))
        what = "max error" if args.absolute else "max error relative to the output range"
        out(f"{'PASS' if not failed else 'FAIL'}: {what} {'within' if not failed else 'above'} "
            f"tolerance {args.tolerance:g}")
    return EXIT_FAIL if failed else 0
