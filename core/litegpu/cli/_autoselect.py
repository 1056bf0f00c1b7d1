"""``litegpu autoselect``: choose the backend and precision for a model by measuring them."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from .._autoselect import POLICIES, Decision, _cache_enabled, abandoned_workers, autoselect
from .._errors import LiteGPUError
from ._common import (
    CliError,
    add_common_args,
    emit_json,
    fmt_bytes,
    load_config_or_none,
    load_model,
    make_progress,
    out,
    table,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("autoselect", help="choose the fastest correct backend for a model (backend: auto)",
                       description="Try every available backend (cpu included) at every allowed precision: "
                                   "prepare it, check its outputs against the CPU reference, time it, and "
                                   "choose by policy, all within --time-budget (fp32 of every backend first).  "
                                   "The decision is cached per model and machine; the next run (and "
                                   "litegpu.load(model), backend auto) reuses it.  A decision with candidates "
                                   "cut by the budget is provisional and measured again next time.")
    p.add_argument("model", help=".tflite model file")
    p.add_argument("--policy", choices=POLICIES, help="what to optimise (default: config autoselect.policy)")
    p.add_argument("--time-budget", "--budget", type=float, metavar="S",
                   help="hard limit in seconds on the whole command, Python's start-up and imports included "
                        "(default: config autoselect.time_budget_s)")
    p.add_argument("--tolerance", type=float, metavar="T",
                   help="largest error relative to the output range (default: config)")
    p.add_argument("--precision", action="append", metavar="P", choices=("fp32", "fp16", "fp16_fp32acc"),
                   help="precision to try (repeatable; default: config autoselect.precisions)")
    p.add_argument("--backend", "-b", action="append", metavar="B", help="limit the candidates (repeatable)")
    p.add_argument("--force", action="store_true", help="measure again even when a decision is cached")
    p.add_argument("--no-cache", action="store_true", help="neither read nor store the decision")
    p.add_argument("--cache-dir", metavar="DIR", help="cache directory (default: config cache.dir / user cache)")
    p.add_argument("--config", metavar="YAML", help="litegpu configuration (YAML file or preset name)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random check inputs (default 0)")
    p.add_argument("--no-background", action="store_true",
                   help="do not finish the fp32 prepares cut by the budget in a background process (by default "
                        "they go on there, at the lowest CPU priority, so that the next call finds their "
                        "compiled kernels cached and can measure them)")
    add_common_args(p, progress=True)
    p.set_defaults(func=run)


def process_started() -> float:
    """This process's start as a ``time.perf_counter()`` value (Linux: from /proc; elsewhere: now), so
    ``--budget`` covers the whole command: Python's start-up, the imports and the plugin registry
    (seconds on a loaded machine) count against it, not only the measuring."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after "(comm)", which may hold spaces
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in clock ticks
    except (OSError, ValueError, IndexError):
        return now
    return now - age if 0 <= age < 3600 else now


def run(args: argparse.Namespace) -> int:
    # a whole command counts from its process's start; main([...]) called from Python, from its call
    started = process_started() if getattr(args, "process_is_command", False) else time.perf_counter()
    model = load_model(args.model)
    config = load_config_or_none(args.config)
    with make_progress(args, "autoselect") as bar:
        try:
            dec = autoselect(model.data, config=config, policy=args.policy, time_budget_s=args.time_budget,
                             tolerance=args.tolerance, precisions=args.precision, backends=args.backend,
                             cache_dir=args.cache_dir, use_cache=not args.no_cache, force=args.force,
                             seed=args.seed, progress=lambda label: bar.update(label=f"autoselect {label}"),
                             started=started)
        except LiteGPUError as e:
            raise CliError(str(e)) from e
    if args.json:
        emit_json(dec.as_dict())
    else:
        print_decision(dec, model.name)
    if not args.no_background and not dec.cached and _cache_enabled(config):  # else nothing would be kept
        _prepare_cut_in_background(dec, model.path, args.config)
    if abandoned_workers() or getattr(args, "process_is_command", False):
        _end_without_driver_teardown(started, dec.settings.get("time_budget_s", args.time_budget))
    return 0


#: the longest the exit handlers may take when the budget has no time left for them
_EXIT_HANDLERS_S = 0.2


def _end_without_driver_teardown(started: float, budget: float | None) -> None:
    """End the process now that the decision is stored and printed, without the drivers' teardown.

    Python's own exit would (1) join every non-daemon thread, and a candidate cut by the budget may
    still be inside a driver call (a cold compile: seconds), and (2) tear down every candidate's
    driver (devices, contexts, lavapipe's and PoCL's threads, the ICDs' unloading): 0.4-1.1 s on the
    2-core CI machine, past the budget.  Neither can be shortened from Python.  What the
    interpreter's exit does for Python code is done here: the exit handlers libraries registered
    (``atexit``: temporary files, the logging module's flush) run on a thread for at most what is
    left of the budget (at least 0.2 s; one stuck in a driver is left behind), the standard streams
    are flushed, and then the process ends with ``os._exit``, skipping only the drivers' teardown
    and the abandoned threads.  The caches are unaffected: their writes are atomic renames, done
    or not done."""
    import atexit
    import threading

    left = _EXIT_HANDLERS_S if budget is None else max(_EXIT_HANDLERS_S, started + budget - time.perf_counter())
    handlers = threading.Thread(target=atexit._run_exitfuncs, name="litegpu-exit-handlers", daemon=True)
    handlers.start()
    handlers.join(left)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say
            pass
    os._exit(0)


def _prepare_cut_in_background(dec: Decision, model_path: str, config: str | None) -> None:
    """The fp32 candidates cut by the budget (their prepare, often a cold compile, had not finished,
    or never started): prepared in a background process so that their compiled kernels are cached
    for the next call (see litegpu._autoselect_prepare)."""
    from .._autoselect_prepare import spawn

    cut = [c for c in dec.candidates
           if c.status == "over_budget" and c.backend != "cpu" and c.precision in (None, "fp32")]
    if not cut:
        return
    proc = spawn(model_path, cut, config)
    if proc is not None:
        logging.getLogger("litegpu").warning(
            "autoselect: preparing %s in a background process (pid %d, lowest CPU priority) so that their "
            "compiled kernels are cached and the next `litegpu autoselect` can measure them "
            "(--no-background: do not)", ", ".join(c.label for c in cut), proc.pid)


def _num(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:.1f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def print_decision(dec: Decision, name: str) -> None:
    src = f"cached (measured {dec.measured_at})" if dec.cached else f"measured now in {dec.measure_s:.2f} s"
    if not dec.final:
        src += "; provisional (candidates cut by the time budget; measured again next time)"
    choice = dec.backend if dec.precision is None else f"{dec.backend} (precision {dec.precision})"
    out(f"{name}: backend {choice}, policy {dec.policy}: {src}")
    out(f"why: {dec.reason}")
    rows = []
    for c in dec.candidates:
        rows.append([c.label, c.status, _num(c.init_us), _num(c.first_us), _num(c.latency_us),
                     c.latency_runs or "-", "-" if c.max_error is None else f"{c.max_error:.2g}",
                     fmt_bytes(c.memory_bytes), c.reason or ""])
    out(table(["CANDIDATE", "STATUS", "INIT_US", "FIRST_US", "MEDIAN_US", "RUNS", "MAX_ERR", "MEMORY", "NOTE"],
              rows, right=(2, 3, 4, 5, 6, 7)))
    if dec.path:
        out(f"decision file: {dec.path}")
