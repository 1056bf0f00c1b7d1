"""``litegpu autoselect --budget B`` as a new user meets it: the first call with every cache empty, then
the next calls.

Usage: ``python bench/autoselect_calls.py [--model face_detection_short_range] [--calls 3] [--budget 10]
[--wait-background 90]``

Each call is a fresh ``python -m litegpu autoselect MODEL --budget B --json`` process with a private,
initially empty litegpu cache (``LITEGPU_CACHE_DIR``) and the drivers' caches on in a private,
initially empty directory (NVIDIA's ComputeCache and shader cache, PoCL's, Mesa's): the first call
is a machine's first, cold everywhere.  Between calls the script waits (at most ``--wait-background``
seconds) for the background prepare the command starts for the candidates its budget cut
(``litegpu._autoselect_prepare``), as a user's next call a minute later would find it done.  Prints
one row per call: wall time of the whole command (Python's start included), when the decision was
made (from the process start), which backends were measured at fp32 and which were cut, the choice,
whether the decision is final.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, mediapipe_models  # noqa: E402
from init import _child_env  # noqa: E402


def _background_running(cache: Path) -> bool:
    """A background prepare of this run's cache is still alive (its environment names the cache)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"litegpu._autoselect_prepare" not in cmd:
                continue
            if str(cache).encode() in Path(f"/proc/{pid}/environ").read_bytes():
                return True
        except OSError:
            continue
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="face_detection_short_range")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--wait-background", type=float, default=90.0)
    args = ap.parse_args()
    (path,) = mediapipe_models(args.model).values()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "litegpu"
        env = {**_child_env(False, Path(tmp) / "driver"), "LITEGPU_CACHE_DIR": str(cache)}
        for n in range(1, args.calls + 1):
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "litegpu", "autoselect", str(path), "--budget",
                                str(args.budget), "--json"], capture_output=True, text=True, env=env, timeout=300)
            wall = time.perf_counter() - t0
            try:
                dec = json.loads(r.stdout)
            except json.JSONDecodeError:
                rows.append(f"| {n} | {wall:.2f} | failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:120]} |")
                continue
            fp32 = [c for c in dec["candidates"] if c["precision"] in (None, "fp32") and c["status"] != "unavailable"]
            ok = [c["backend"] for c in fp32 if c["status"] == "ok"]
            cut = [c["backend"] for c in fp32 if c["status"] == "over_budget"]
            other = [f"{c['backend']} ({c['status']})" for c in fp32 if c["status"] not in ("ok", "over_budget")]
            t1 = time.perf_counter()
            while time.perf_counter() - t1 < args.wait_background and _background_running(cache):
                time.sleep(0.5)
            waited = time.perf_counter() - t1
            inits = ", ".join(f"{c['backend']} {c['init_us'] / 1e6:.2f}" for c in fp32
                              if c["status"] == "ok" and c.get("init_us"))
            rows.append(f"| {n} | {wall:.2f} | {dec['measure_s']:.2f} | {', '.join(ok) or '-'} | "
                        f"{', '.join(cut + other) or '-'} | {inits} | {dec['backend']}"
                        f"{'/' + dec['precision'] if dec.get('precision') else ''} | {dec['final']} | {waited:.0f} |")
    print(f"\n{machine_line()}; `litegpu autoselect {args.model} --budget {args.budget:g}`, fresh caches "
          "(litegpu's and the drivers') before call 1\n")
    print("| call | wall s | decision at s | fp32 measured | fp32 cut / failed | init s (fp32) | chosen | final | "
          "background prepare after, s |")
    print("|---:|---:|---:|---|---|---|---|---|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
