"""Warm start, A against B, alternating: the fair way to compare two settings of a start-up switch.

Usage: ``python bench/init_ab.py --set MODULE.NAME=VALUE [--set ...] [--backends vulkan,opencl]
[--models a,b] [--runs 5] [--keep-driver-caches | --driver-caches-off] [--json FILE]``

``bench/init.py --set`` measures one variant after the other, so a host that warms up (the page cache,
the drivers' files) or a neighbour that starts working favours one of them: in one NVIDIA call the
first cells of the first variant were slower, cold runs included. Here, per (backend, model), one
untimed run per variant fills the serialization cache and the drivers' own caches (in a private directory, as
``bench/init.py``'s "warm, driver caches on" column), then ``--runs`` pairs of fresh processes
alternate A (the code as it is) and B (every ``--set`` applied), the order flipped every pair. The
timed span is ``bench/init.py``'s (after ``import litegpu`` to the end of ``allocate_tensors()``).
Prints a Markdown table: medians of wall and process CPU time, B - A, and the main thread's CPU time
(what is left once the driver's threads are taken out).  ``--set import:MODULE`` makes B import MODULE
inside the timed span (B = a build that imported it eagerly).  ``--pythonpath-b DIR`` puts DIR first
on B's ``PYTHONPATH`` (B = another build of some packages, e.g. main's backend beside a branch's); each
variant then fills its own serialization cache (an entry's key holds the code's fingerprint).
Both variants' Python bytecode is compiled first, B's directory included, as ``bench/init.py`` does
(``--no-compile`` leaves it as it is).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, compile_bytecode, machine_line, mediapipe_models  # noqa: E402
from init import _CHILD, _child_env, _run_child  # noqa: E402


def measure(model: Path, backend: str, runs: int, sets: list[str], keep: bool,
            caches_off: bool = False, pythonpath_b: str = "", cold: bool = False) -> dict[str, list[float]]:
    """``cold``: each pair also times a cold start of A and B (fresh cache directories, the drivers' caches
    off, as ``bench/init.py``'s cold column), in the pair's order, before the warm ones."""
    with tempfile.TemporaryDirectory(prefix="litegpu-bench-init-ab-") as tmp:
        root = Path(tmp)
        env = _child_env(keep, None if keep or caches_off else root / "driver-caches")
        envs, caches = {"a": env, "b": env}, {"a": str(root / "cache"), "b": str(root / "cache")}
        _run_child(_CHILD, [str(model), backend, caches["a"]], env)  # the fill (variant A's code path)
        if pythonpath_b:
            envs["b"] = {**env, "PYTHONPATH": os.pathsep.join([pythonpath_b, env.get("PYTHONPATH", "")])}
            caches["b"] = str(root / "cache-b")
        if pythonpath_b or sets:
            # B's own fill (untimed): a switch that changes what the driver compiles (webgpu's
            # SHADER_RUNTIME_CHECKS: other SPIR-V) found only A's entries in the drivers' caches, and B's
            # first timed run compiled them (until 2026-11-27)
            _run_child(_CHILD, [str(model), backend, caches["b"], *sets], envs["b"])
        got: dict[str, list[float]] = {"a": [], "b": [], "a_cpu": [], "b_cpu": [], "a_main": [], "b_main": [],
                                       "a_import": [], "b_import": []}
        cold_env = _child_env(keep)  # the drivers' caches off, as bench/init.py's cold column
        cold_envs = {"a": cold_env, "b": {**cold_env, "PYTHONPATH": envs["b"]["PYTHONPATH"]}}
        for i in range(runs):
            order = "ab" if i % 2 == 0 else "ba"
            for v in order if cold else "":
                d = _run_child(_CHILD, [str(model), backend, str(root / f"cold-{v}{i}"), *(sets if v == "b" else [])],
                               cold_envs[v])
                got.setdefault(v + "_cold", []).append(d["prepare_s"] * 1e3)
            for v in order:
                d = _run_child(_CHILD, [str(model), backend, caches[v], *(sets if v == "b" else [])], envs[v])
                got[v].append(d["prepare_s"] * 1e3)
                got[v + "_cpu"].append(d["cpu_s"] * 1e3)
                got[v + "_main"].append(d["main_cpu_s"] * 1e3)
                got[v + "_import"].append((d["import_s"] + d["prepare_s"]) * 1e3)  # a user's warm start
        return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="variant B's module constants (A: the code as it is)")
    ap.add_argument("--pythonpath-b", default="", metavar="DIR",
                    help="first on variant B's PYTHONPATH (another build of some packages), its own cache fill")
    ap.add_argument("--backends", default="vulkan,opencl")
    ap.add_argument("--models", default="", help="comma-separated MediaPipe model names (default: the GPU set)")
    ap.add_argument("--runs", type=int, default=5, help="A/B pairs per cell")
    ap.add_argument("--keep-driver-caches", action="store_true", help="the user's driver caches, not private ones")
    ap.add_argument("--driver-caches-off", action="store_true",
                    help="the drivers' own caches off (bench/init.py's plain warm column), not private ones")
    ap.add_argument("--cold", action="store_true",
                    help="also alternate cold starts (fresh cache directories, drivers' caches off) and print "
                         "warm/cold of each variant")
    ap.add_argument("--no-compile", action="store_true",
                    help="leave the tree's Python bytecode as it is (a checkout has none: with PYTHONDONTWRITEBYTECODE "
                         "every child then compiles what it imports, as these benches measured until 2026-11-26)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    # both variants as installed (B's directory too: an A/B of bytecode against source is not a code change)
    bytecode = ("bytecode left as it is (--no-compile)" if args.no_compile
                else compile_bytecode(args.pythonpath_b.split(os.pathsep)))
    if not args.set and not args.pythonpath_b:
        ap.error("B needs --set or --pythonpath-b")
    models = mediapipe_models(args.models, default=GPU_SET)
    rows = []
    caches = "off" if args.driver_caches_off and not args.keep_driver_caches else "on"
    print(f"{machine_line()}; warm, drivers' caches {caches}; {args.runs} alternating A/B pairs per cell, medians; "
          f"A: as built; B: {' '.join(args.set)}"
          f"{' PYTHONPATH=' + args.pythonpath_b + ':...' if args.pythonpath_b else ''}; {bytecode}; "
          f"1-min load average {os.getloadavg()[0]:.1f} at the start\n")
    cold_head = " A cold (ms) | B cold (ms) | A warm/cold | B warm/cold |" if args.cold else ""
    print("| backend | model | A warm (ms) | B warm (ms) | B - A | A warm CPU (ms) | B warm CPU (ms) | B - A CPU | "
          "A main thread CPU (ms) | B main thread CPU (ms) | A import + warm (ms) | B import + warm (ms) |"
          + cold_head)
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * (4 if args.cold else 0))
    for backend in [b for b in args.backends.split(",") if b]:
        for name, path in models.items():
            try:
                g = measure(path, backend, args.runs, args.set, args.keep_driver_caches, args.driver_caches_off,
                            args.pythonpath_b, args.cold)
            except RuntimeError as e:
                print(f"| {backend} | {name} | failed: {e} | | | | | | | | | |", flush=True)
                continue
            m = {k: statistics.median(v) for k, v in g.items()}
            rows.append({"backend": backend, "model": name, **m, "runs": g})
            cold_cells = (f" {m['a_cold']:.0f} | {m['b_cold']:.0f} | {100 * m['a'] / m['a_cold']:.1f}% | "
                          f"{100 * m['b'] / m['b_cold']:.1f}% |" if args.cold else "")
            print(f"| {backend} | {name} | {m['a']:.0f} | {m['b']:.0f} | {m['b'] - m['a']:+.0f} | {m['a_cpu']:.0f} | "
                  f"{m['b_cpu']:.0f} | {m['b_cpu'] - m['a_cpu']:+.0f} | {m['a_main']:.0f} | {m['b_main']:.0f} | "
                  f"{m['a_import']:.0f} | {m['b_import']:.0f} |" + cold_cells, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_line(), "sets": args.set, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
