"""``litegpu benchmark``: init, first inference, warmup and inference timings per backend,
memory, optional per-op profile, comparison table and bar chart."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import LiteGPUError
from .._profile import BenchResult, benchmark_interpreter, summarize_kernel_profile, summarize_op_profile
from ._common import (
    CliError,
    add_backend_options,
    add_common_args,
    backend_infos,
    backend_options,
    emit_json,
    fail_invoke,
    fmt_bytes,
    load_config_or_none,
    load_model,
    make_interpreter,
    make_progress,
    model_io_details,
    out,
    parse_input_specs,
    parse_option_pairs,
    random_inputs,
    resolve_backend,
    table,
)
from ._preprocess import ImageInputs, add_image_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("benchmark", help="time a model on one or more backends",
                       description="Measure Init (interpreter creation and allocate_tensors), First inference, "
                                   "Warmup and Inference latency (avg/median/std/min/max/p90, microseconds), "
                                   "peak host RSS and device memory for each backend.  Several backends give "
                                   "a comparison table (and a bar chart with --plot).")
    p.add_argument("model", help=".tflite model file")
    p.add_argument("--backend", "-b", action="append", default=None, metavar="B",
                   help="backend to measure; repeatable; 'all' = every available backend, 'auto' = the auto-selected one (default: cpu)")
    p.add_argument("--num-runs", type=int, default=50, metavar="N", help="timed inference runs (default 50)")
    p.add_argument("--warmup-runs", type=int, default=1, metavar="N", help="untimed-in-stats warmup runs (default 1)")
    p.add_argument("--max-secs", type=float, default=150.0, metavar="S",
                   help="stop the timed runs of a backend after S seconds (default 150)")
    p.add_argument("--min-runs", type=int, default=1, metavar="N", help="timed runs even past --max-secs (default 1)")
    p.add_argument("--enable-op-profiling", action="store_true",
                   help="time every CPU node and delegate partition; print run-order and top-by-time tables")
    p.add_argument("--profile", action="store_true",
                   help="per-kernel accounting of every GPU partition: each launch's kernel variant, GPU time "
                        "(OpenCL profiling events, Vulkan/WebGPU timestamp queries; host time where the "
                        "device has none, said so) and the graph nodes it covers")
    p.add_argument("--profile-runs", type=int, default=10, metavar="N",
                   help="passes over the launches for --profile; each launch's median is shown (default 10)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows of the top-by-time table (default 10)")
    p.add_argument("--plot", metavar="FILE.png", help="bar chart of the backends' latencies (needs matplotlib)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="[NAME=]FILE",
                   help="value of an input, a .npy array or an image (others random); a bare FILE for a "
                        "single-input model; repeatable")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_image_args(p)
    add_backend_options(p)
    add_common_args(p, progress=True)
    p.set_defaults(func=run)


def resolve_backends(names: list[str] | None) -> list[str]:
    names = names or ["cpu"]
    outl: list[str] = []
    for n in names:
        for part in n.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                outl.extend(r.name for r in backend_infos() if r.available)
            else:
                outl.append(part)
    seen: set[str] = set()
    return [n for n in outl if not (n in seen or seen.add(n))]


def run(args: argparse.Namespace) -> int:
    if args.num_runs < 1:
        raise CliError("--num-runs must be at least 1")
    if args.warmup_runs < 0:
        raise CliError("--warmup-runs must be >= 0")
    if args.profile and args.profile_runs < 1:
        raise CliError("--profile-runs must be at least 1")
    if args.plot:
        _check_matplotlib()
    model = load_model(args.model)
    config = load_config_or_none(args.config)
    backends = resolve_backends(args.backend)
    extra = parse_option_pairs(args.option)
    results: list[BenchResult] = []
    inputs: list[np.ndarray] | None = None
    for name in backends:
        opts = backend_options(config, name, args.precision, extra)
        name, opts = resolve_backend(model, name, config, opts)
        total = 1 + args.warmup_runs + args.num_runs
        with make_progress(args, f"benchmark {name}", total) as bar:
            def make(name: str = name, opts: dict = opts) -> Any:
                return make_interpreter(model, name, opts, config=config)

            if inputs is None:  # the same inputs for every backend
                details = model_io_details(model)
                given = parse_input_specs(args.input, details,
                                          image_loader=ImageInputs(model.path, model.model, model.data, args))
                rand = random_inputs(details, np.random.default_rng(args.seed))
                inputs = [given.get(k, rand[k]) for k in range(len(details))]
            try:
                res = benchmark_interpreter(
                    make, inputs, backend=name, options=opts, num_runs=args.num_runs,
                    warmup_runs=args.warmup_runs, max_secs=args.max_secs, min_runs=max(1, args.min_runs),
                    op_profiling=args.enable_op_profiling,
                    kernel_profile_runs=args.profile_runs if args.profile else 0, tick=bar.update)
            except CliError:
                raise
            except (LiteGPUError, ValueError, RuntimeError) as e:
                raise fail_invoke(model, name, e) from e
        results.append(res)

    data = {"model": model.path, "num_runs": args.num_runs, "warmup_runs": args.warmup_runs,
            "max_secs": args.max_secs, "results": [r.as_dict() for r in results]}
    for r in data["results"]:
        if args.enable_op_profiling:
            r["op_summary"] = summarize_op_profile(r["op_profile"])
        else:
            r.pop("op_profile")
        if not args.profile:
            r.pop("kernel_profile")
        else:
            for part in r["kernel_profile"]:
                part["by_kernel"] = summarize_kernel_profile(part)
    if args.plot:
        _plot(results, Path(args.plot), model.name)
        data["plot"] = args.plot
    if args.json:
        emit_json(data)
        return 0
    for r in data["results"]:
        _print_one(r, args.top)
    if len(results) > 1:
        _print_comparison(data["results"])
    if args.plot:
        out(f"bar chart written to {args.plot}")
    return 0


def _ms(us: float | None) -> str:
    """Microseconds shown as milliseconds with three significant digits or more
    (``328.9``, ``12.35``, ``0.0412``): readable at every scale, no false precision."""
    if us is None:
        return "-"
    ms = us / 1e3
    if ms >= 100:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3g}"


def _print_one(r: dict[str, Any], top: int) -> None:
    inf = r["inference_us"]
    opts = ", ".join(f"{k}={v}" for k, v in r["options"].items() if k != "cache")
    out(f"== {r['backend']}" + (f" ({opts})" if opts else ""))
    plan = r["execution_plan"]
    out("plan: " + ", ".join(f"{s['backend']}[{len(s['node_indices'])}]" for s in plan) if plan else "plan: empty")
    out(f"Init: {_ms(r['init_us'])} ms")
    out(f"First inference: {_ms(r['first_inference_us'])} ms")
    out(f"Warmup ({r['warmup_runs']} runs, avg): {_ms(r['warmup_avg_us'])} ms")
    out(f"Inference ({inf['count']} runs{', stopped by --max-secs' if r['stopped_by_max_secs'] else ''}): "
        f"avg {_ms(inf['avg'])}  median {_ms(inf['median'])}  std {_ms(inf['std'])}  min {_ms(inf['min'])}  "
        f"max {_ms(inf['max'])}  p90 {_ms(inf['p90'])} ms")
    out(f"Peak host RSS: {fmt_bytes(r['peak_rss_bytes'])} (process peak so far); device memory: "
        f"{fmt_bytes(r['device_memory_bytes']) if r['device_memory_bytes'] is not None else 'not reported'}")
    prof = r.get("op_profile")
    if prof:
        total = sum(p["avg_us"] for p in prof) or 1.0
        out("Operator profile, run order (avg per inference):")
        rows = [[p["step"], p["backend"], _what(p), _ms(p["avg_us"]), f"{100 * p['avg_us'] / total:.1f}%"]
                for p in prof]
        out(table(["STEP", "BACKEND", "NODE(S)", "AVG_MS", "%"], rows, right=(0, 3, 4)))
        out(f"Top {min(top, len(prof))} by time:")
        ranked = sorted(prof, key=lambda p: -p["avg_us"])[:top]
        cum = 0.0
        rows = []
        for p in ranked:
            cum += p["avg_us"]
            rows.append([p["step"], p["backend"], _what(p), _ms(p["avg_us"]),
                         f"{100 * p['avg_us'] / total:.1f}%", f"{100 * cum / total:.1f}%"])
        out(table(["STEP", "BACKEND", "NODE(S)", "AVG_MS", "%", "CUM%"], rows, right=(0, 3, 4, 5)))
        out("Summary by op type:")
        rows = [[s["op"], s["count"], _ms(s["avg_us"]), f"{s['percent']:.1f}%"] for s in r["op_summary"]]
        out(table(["OP", "COUNT", "AVG_MS", "%"], rows, right=(1, 2, 3)))
    if r.get("kernel_profile") is not None:
        _print_kernel_profile(r["kernel_profile"], r["backend"])
    out("")


def _nodes(ln: dict[str, Any]) -> str:
    """The graph nodes a launch covers: ``#2 CONV_2D + #4 PRELU`` (boundary layout launches: none)."""
    if not ln["nodes"]:
        return "- (partition boundary)"
    return " + ".join(f"#{n} {o}" for n, o in zip(ln["nodes"], ln["ops"], strict=False))


def _print_kernel_profile(parts: list[dict[str, Any]], backend: str) -> None:
    if not parts:
        out(f"Kernel profile: {backend} runs no delegate partition")
        return
    for part in parts:
        rows = part["launches"]
        total = sum(ln["us"] for ln in rows)
        out(f"Kernel profile, {part['label']} ({part['backend']}"
            + (f", {part['device']}" if part.get("device") else "") + f"): {len(rows)} launches, "
            f"sum {total:.1f} us" + (f", median of {part['runs']} passes" if part.get("runs") else ""))
        out(f"  timed by {part['source']}")
        if not rows:
            continue
        body = [[i, ln["variant"], f"{ln['us']:.1f}", "x".join(map(str, ln["grid"])), _nodes(ln)]
                for i, ln in enumerate(rows)]
        out(table(["#", "KERNEL", "US", "GRID", "NODES"], body, right=(0, 2)))
        body = [[a["kernel"], a["launches"], a["nodes"], f"{a['us']:.1f}", f"{a['percent']:.1f}%"]
                for a in part["by_kernel"]]
        out("  by kernel:")
        out(table(["KERNEL", "LAUNCHES", "NODES", "US", "%"], body, right=(1, 2, 3, 4)))


def _what(p: dict[str, Any]) -> str:
    if p["kind"] == "cpu":
        return f"#{p['node_indices'][0]} {p['op_names'][0]}"
    ns = p["node_indices"]
    return f"{len(ns)} nodes #{ns[0]}-{ns[-1]}"


def _print_comparison(rows: list[dict[str, Any]]) -> None:
    base = rows[0]["inference_us"]["avg"]
    body = []
    for r in rows:
        inf = r["inference_us"]
        body.append([r["backend"], _ms(r["init_us"]), _ms(r["first_inference_us"]), _ms(r["warmup_avg_us"]),
                     _ms(inf["avg"]), _ms(inf["median"]), _ms(inf["std"]), _ms(inf["min"]), _ms(inf["max"]),
                     _ms(inf["p90"]), fmt_bytes(r["device_memory_bytes"]),
                     f"{base / inf['avg']:.2f}x" if inf["avg"] else "-"])
    out(f"Comparison (milliseconds; speed-up vs {rows[0]['backend']}):")
    out(table(["BACKEND", "INIT", "FIRST", "WARMUP", "AVG", "MEDIAN", "STD", "MIN", "MAX", "P90", "DEV_MEM",
               "SPEEDUP"], body, right=range(1, 12)))


def _check_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CliError("--plot needs matplotlib, which is not installed: pip install matplotlib") from None


def _plot(results: list[BenchResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    names = [r.backend for r in results]
    stats = [r.as_dict() for r in results]
    med = np.array([s["inference_us"]["median"] for s in stats]) / 1e3
    lo = np.array([s["inference_us"]["min"] for s in stats]) / 1e3
    hi = np.array([s["inference_us"]["p90"] for s in stats]) / 1e3
    avg = np.array([s["inference_us"]["avg"] for s in stats]) / 1e3
    init = [s["init_us"] / 1e3 for s in stats]
    first = [s["first_inference_us"] / 1e3 for s in stats]
    x = np.arange(len(names))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(5 + 1.6 * len(names), 4.8))
    # Median bars with whiskers from the fastest run to p90: outliers on a shared machine
    # would make a mean +- std bar meaningless (and dip below zero).
    def num(v: float) -> str:
        return f"{v:.0f}" if v >= 100 else f"{v:.3g}"

    ax1.bar(x, med, 0.5, yerr=[med - lo, hi - med], capsize=4, label="median (whiskers: min to p90)")
    for xi, m, top in zip(x, med, hi, strict=True):  # above the whisker, where nothing covers it
        ax1.annotate(f"median {num(m)}", (xi, top), xytext=(0, 4), textcoords="offset points", ha="center",
                     fontsize=8)
    ax1.plot(x, avg, "k^", label="mean")
    ax1.set_xticks(x, names)
    ax1.set_ylabel("ms per inference")
    ax1.set_title("Inference")
    ax1.margins(y=0.15)  # room above the tallest whisker for its label
    b_init = ax2.bar(x - 0.2, init, 0.4, label="init")
    b_first = ax2.bar(x + 0.2, first, 0.4, label="first inference")
    for b in (b_init, b_first):
        ax2.bar_label(b, labels=[num(v) for v in b.datavalues], padding=2, fontsize=8)
    ax2.set_xticks(x, names)
    ax2.set_ylabel("ms")
    ax2.set_title("Start-up")
    ax2.margins(y=0.15)
    # Legends under the axes: inside, they covered the bars whenever one backend was much slower.
    for ax in (ax1, ax2):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        plt.close(fig)
