"""The CLI on the real GPU backends (OpenCL on PoCL, WebGPU on llvmpipe here): diff passes against
the CPU reference, benchmark reports the planned device memory, autoselect measures them.
Skipped, with the reason, where a backend cannot run."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import litegpu
import pytest
from _cli_helpers import cli

BACKENDS = Path(__file__).resolve().parents[2] / "backends"


@pytest.fixture(params=["opencl", "webgpu"])
def gpu_backend(request, register_backend):
    name = request.param
    if not any(b.name == name for b in litegpu.available_backends()):  # not installed: the source folder
        folder = BACKENDS / name
        if not folder.is_dir():
            pytest.skip(f"backend {name} is not in this checkout")
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        try:
            plugin = importlib.import_module(f"litegpu_{name}.plugin")
        except ImportError as e:
            pytest.skip(f"backend {name} cannot be imported: {e}")
        register_backend(name, plugin)
    info = next(b for b in litegpu.available_backends() if b.name == name)
    if not info.available:
        pytest.skip(f"backend {name} unavailable: {info.reason}")
    return name


def test_diff_and_benchmark_on_gpu(mlp_path, gpu_backend):
    r = cli("diff", mlp_path, "--backend", gpu_backend, "--runs", "3", "--relative", "--tolerance", "1e-4",
            "--json")
    assert r.status == 0, r
    d = r.json()
    assert any(s["backend"] == gpu_backend for s in d["execution_plan"])
    assert all(o["max_error_relative"] <= 1e-4 for o in d["outputs"])
    r = cli("benchmark", mlp_path, "-b", gpu_backend, "--num-runs", "3", "--enable-op-profiling", "--json",
            "--profile", "--profile-runs", "2")
    assert r.status == 0, r
    res = r.json()["results"][0]
    assert res["inference_us"]["avg"] > 0 and res["device_memory_bytes"] > 0
    assert any(p["kind"] == "delegate" and p["backend"] == gpu_backend for p in res["op_profile"])
    # --profile: every launch of the partition with its time and the graph nodes it covers
    (part,) = res["kernel_profile"]
    (seg,) = [s for s in res["execution_plan"] if s["backend"] == gpu_backend]
    assert part["backend"] == gpu_backend and part["api"] == gpu_backend and part["runs"] == 2
    assert part["source"].startswith("GPU: ") or "no WebGPU timestamp-query" in part["source"], part["source"]
    launches = part["launches"]
    assert launches and all(ln["us"] >= 0 and ln["kernel"] and ln["grid"] for ln in launches)
    covered = {n for ln in launches for n in ln["nodes"]}
    assert covered == set(seg["node_indices"]), (covered, seg)
    assert all(len(ln["ops"]) == len(ln["nodes"]) for ln in launches)
    assert sum(a["launches"] for a in part["by_kernel"]) == len(launches)
    assert cli("benchmark", mlp_path, "-b", gpu_backend, "--profile", "--profile-runs", "0").status != 0
    if gpu_backend != "opencl":  # the text form once (a second compile on lavapipe costs seconds)
        return
    text = cli("benchmark", mlp_path, "-b", gpu_backend, "--num-runs", "1", "--profile", "--profile-runs", "1")
    assert text.status == 0 and "Kernel profile" in text.stdout and "by kernel:" in text.stdout, text


def test_inspect_shows_gpu_compiler_facts(mlp_path, gpu_backend):
    r = cli("inspect", mlp_path, "-b", gpu_backend, "--json")
    assert r.status == 0, r
    (p,) = r.json()["plans"]
    assert p["nodes_on_backend"] >= 1 and p["planned_device_memory_bytes"] > 0
    (desc,) = p["partition_descriptions"]
    assert desc["transformations"]  # the GPU compiler reports its passes


def test_autoselect_with_gpu_candidates(tmp_path, add_path, gpu_backend):
    r = cli("autoselect", add_path, "-b", "cpu", "-b", gpu_backend, "--precision", "fp32",
            "--cache-dir", tmp_path, "--time-budget", "20", "--json")
    assert r.status == 0, r
    d = r.json()
    cands = {c["label"]: c for c in d["candidates"]}
    assert set(cands) == {"cpu", f"{gpu_backend}/fp32"}
    gpu = cands[f"{gpu_backend}/fp32"]
    assert gpu["status"] == "ok" and gpu["max_error"] <= 0.01 and gpu["latency_us"] > 0, gpu
    assert d["backend"] in ("cpu", gpu_backend)


def test_run_names_the_device_it_ran_on(mlp_path, gpu_backend):
    """`litegpu run`'s first line names the GPU backend's device (on a machine without a GPU, PoCL's or
    lavapipe's CPU device: the times are a CPU's), and says the inference time is the first run's."""
    r = cli("run", mlp_path, "--backend", gpu_backend)
    assert r.status == 0, r.stderr
    device = next(b for b in litegpu.available_backends() if b.name == gpu_backend).devices[0]
    first = r.stdout.splitlines()[0]
    assert f" on {gpu_backend} ({device}): init " in first and ", first inference " in first, first
    # the CPU interpreter has no device to name
    r = cli("run", mlp_path, "--backend", "cpu")
    assert r.status == 0 and " on cpu: init " in r.stdout.splitlines()[0], r.stdout
