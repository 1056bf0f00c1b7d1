"""Shared bits of the benchmarks: which models, which machine."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

# The 13 MediaPipe 0.10.14 models litegpu runs (face_landmark_with_attention needs three custom ops
# MediaPipe registers in its own C++ runtime; LiteRT cannot run it either).
RUNNABLE = (
    "face_detection_full_range_sparse", "face_detection_short_range", "face_landmark", "hand_landmark_full",
    "hand_landmark_lite", "hand_recrop", "iris_landmark", "palm_detection_full", "palm_detection_lite",
    "pose_detection", "pose_landmark_full", "selfie_segmentation", "selfie_segmentation_landscape",
)
GPU_SET = (
    "face_detection_short_range", "face_landmark", "hand_landmark_full", "iris_landmark",
    "palm_detection_full", "pose_landmark_full", "selfie_segmentation",
)


def mediapipe_models(names: str = "", default: tuple[str, ...] = RUNNABLE) -> dict[str, Path]:
    from litegpu.models import MEDIAPIPE_MODELS, fetch_mediapipe

    wanted = [n for n in names.split(",") if n] or list(default)
    # On the device machine (no network) only the benchmarked models travel (bench/device_prep.sh): use
    # the cached files when every wanted one is there, and fetch the whole set only when one is missing.
    import platformdirs

    root = Path(platformdirs.user_cache_dir("litegpu")) / "models" / "mediapipe-0.10.14"
    cached = {n: root / rel for n, rel in MEDIAPIPE_MODELS.items() if (root / rel).is_file()}
    if all(n in cached for n in wanted):
        allm = cached
    else:
        try:
            allm = fetch_mediapipe()
        except Exception as e:  # noqa: BLE001 - no network (the device machine): run the ones that travelled
            absent = [n for n in wanted if n not in cached and n in MEDIAPIPE_MODELS]
            print(f"bench: skipping {', '.join(absent)}: not cached and the fetch failed ({e}); "
                  "bench/device_prep.sh MODELS=all carries every model", file=sys.stderr)
            allm = cached
            wanted = [n for n in wanted if n not in absent]
    missing = [n for n in wanted if n not in allm]
    if missing:
        raise SystemExit(f"unknown models {missing}; known: {sorted(allm)}")
    return {n: allm[n] for n in wanted}


def median_ms(fn, runs: int, warmup: int = 5) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``runs`` calls after ``warmup`` untimed ones."""
    import statistics
    import time

    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


#: the repository root (the source tree the benchmarks' child processes import litegpu from)
ROOT = Path(__file__).resolve().parents[1]


def compile_bytecode(extra: Sequence[str] = ()) -> str:
    """Byte-compile the litegpu packages of this tree (and the ``extra`` directories, e.g. a variant's
    ``--pythonpath-b``) into their ``__pycache__``, as pip does when it installs them; returns the
    condition in words for a table's header.

    The shared development machines run with ``PYTHONDONTWRITEBYTECODE=1`` and a checkout has no
    bytecode, so every fresh child process compiled each litegpu module it imported from source: on
    the 2-core CI-class machine 30-70 ms of a 130-200 ms warm vulkan start (``builtins.compile``
    in a profile of the prepare), which no installed litegpu pays.  ``bench/device_run.sh`` compiles
    the installed tree on the NVIDIA machine for the same reason.  Quick when the bytecode is current
    (compileall only compares timestamps)."""
    import compileall

    dirs = [ROOT / "core", *sorted(d for d in (ROOT / "backends").iterdir() if d.is_dir()), ROOT / "plugins",
            *(Path(e) for e in extra if e)]
    ok = all([compileall.compile_dir(str(d), quiet=1, workers=0) for d in dirs if d.is_dir()])
    return "Python bytecode compiled first (as installed)" if ok else "Python bytecode: some files failed to compile"


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{datetime.date.today().isoformat()}, {cpu}, {os.cpu_count()} cores, "
            f"{platform.system()} {platform.release()}")


def override_cost(spec: str) -> None:
    """Compile every plan with the device's calibration with ``spec``'s fields replaced (``name=value,...``):
    ``--cost`` of bench/gpu_kernels.py and bench/gpu_profile.py (another calibration's picks, same session)."""
    from dataclasses import replace

    from litegpu.gpu import _cost, _runtime

    over = cost_overrides(spec)
    base = _runtime.profile_for
    _runtime.profile_for = lambda info: replace(base(info), **over)
    _cost.profile_for = _runtime.profile_for  # the estimates printed beside the times use it too
    print(f"cost-model overrides: {over}")


def cost_overrides(spec: str) -> dict:
    """``name=value,...`` as replacements of :class:`litegpu.gpu._cost.DeviceCost` fields (typed like them)."""
    from dataclasses import fields

    from litegpu.gpu._cost import DeviceCost

    types = {f.name: f.type for f in fields(DeviceCost)}
    over: dict = {}
    for item in (i for i in spec.split(",") if i):
        name, _, value = item.partition("=")
        if name not in types or name == "name":
            raise SystemExit(f"cost overrides: {name!r} is not a DeviceCost field ({', '.join(sorted(types))})")
        kind = types[name]
        over[name] = value not in ("0", "false", "False") if kind in (bool, "bool") else \
            int(float(value)) if kind in (int, "int") else float(value)
    return over


def set_attribute(item: str) -> tuple[str, object]:
    """``MODULE.NAME=VALUE`` (VALUE a Python literal): set that module attribute (an A/B switch such as
    ``litegpu.gpu._passes.squeeze_excite.SQUEEZE_EXCITE=False``); returns (target, the old value)."""
    import ast
    import importlib

    target, value = item.split("=", 1)
    module, name = target.rsplit(".", 1)
    mod = importlib.import_module(module)
    old = getattr(mod, name)
    setattr(mod, name, ast.literal_eval(value))
    return target, old
