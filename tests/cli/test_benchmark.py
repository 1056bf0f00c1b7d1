"""``litegpu benchmark``: every field present and positive, op profiles, comparison, plot."""

from __future__ import annotations

import builtins

import numpy as np
import pytest
from _cli_helpers import cli


def test_benchmark_json_fields(mlp_path):
    r = cli("benchmark", mlp_path, "--num-runs", "12", "--warmup-runs", "2", "--json")
    assert r.status == 0, r
    d = r.json()
    assert d["num_runs"] == 12 and len(d["results"]) == 1
    res = d["results"][0]
    assert res["backend"] == "cpu"
    for k in ("init_us", "first_inference_us", "warmup_avg_us", "peak_rss_bytes", "rss_bytes"):
        assert res[k] > 0, k
    assert res["warmup_runs"] == 2
    inf = res["inference_us"]
    assert inf["count"] == 12
    for k in ("avg", "median", "min", "max", "p90"):
        assert inf[k] > 0, k
    assert inf["min"] <= inf["median"] <= inf["max"] and inf["min"] <= inf["p90"] <= inf["max"]
    assert inf["std"] >= 0
    assert res["device_memory_bytes"] is None  # the cpu has no delegate to report any
    assert res["execution_plan"] == [{"backend": "cpu", "node_indices": [0, 1, 2, 3],
                                      "op_names": ["FULLY_CONNECTED", "FULLY_CONNECTED", "ADD", "LOGISTIC"]}]
    assert "op_profile" not in res


def test_benchmark_op_profiling(mlp_path, register_backend):
    register_backend("wrongadd")
    r = cli("benchmark", mlp_path, "-b", "cpu", "-b", "wrongadd", "--num-runs", "5", "--warmup-runs", "0",
            "--enable-op-profiling", "--json")
    assert r.status == 0, r
    cpu, wrong = r.json()["results"]
    assert [p["op_names"] for p in cpu["op_profile"]] == [["FULLY_CONNECTED"], ["FULLY_CONNECTED"], ["ADD"],
                                                          ["LOGISTIC"]]
    assert all(p["runs"] == 5 and p["avg_us"] > 0 and p["kind"] == "cpu" for p in cpu["op_profile"])
    # the delegate partition is timed as one step
    assert [(p["kind"], p["backend"], p["node_indices"]) for p in wrong["op_profile"]] == [
        ("cpu", "cpu", [0]), ("cpu", "cpu", [1]), ("delegate", "wrongadd", [2]), ("cpu", "cpu", [3])]
    assert wrong["device_memory_bytes"] == 4096  # from the kernel's describe()
    summary = {s["op"]: s for s in cpu["op_summary"]}
    assert summary["FULLY_CONNECTED"]["count"] == 2
    assert sum(s["percent"] for s in cpu["op_summary"]) == pytest.approx(100.0)


def test_benchmark_text_comparison(mlp_path, register_backend):
    register_backend("wrongadd")
    r = cli("benchmark", mlp_path, "-b", "cpu,wrongadd", "--num-runs", "3", "--enable-op-profiling")
    assert r.status == 0, r
    for text in ("Init:", "First inference:", "Warmup", "Inference (3 runs)", "Peak host RSS",
                 "Operator profile, run order", "Top 4 by time", "Summary by op type",
                 "Comparison (milliseconds; speed-up vs cpu)", "SPEEDUP", "device memory: 4.0 KiB"):
        assert text in r.stdout, text


def test_benchmark_max_secs_stops_early(mlp_path):
    r = cli("benchmark", mlp_path, "--num-runs", "100000", "--max-secs", "0", "--min-runs", "2", "--json")
    assert r.status == 0
    res = r.json()["results"][0]
    assert res["inference_us"]["count"] == 2 and res["stopped_by_max_secs"] is True


def test_benchmark_plot(tmp_path, mlp_path, register_backend):
    pytest.importorskip("matplotlib")
    register_backend("wrongadd")
    png = tmp_path / "bench.png"
    r = cli("benchmark", mlp_path, "-b", "cpu", "-b", "wrongadd", "--num-runs", "3", "--plot", png)
    assert r.status == 0, r
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_benchmark_plot_without_matplotlib(tmp_path, mlp_path, monkeypatch):
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    r = cli("benchmark", mlp_path, "--plot", tmp_path / "x.png")
    assert r.status == 2
    assert "--plot needs matplotlib" in r.stderr and "pip install matplotlib" in r.stderr


def test_benchmark_inputs_and_errors(tmp_path, mlp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    r = cli("benchmark", mlp_path, "--num-runs", "2", "-i", f"x={tmp_path / 'x.npy'}", "--json")
    assert r.status == 0
    assert cli("benchmark", mlp_path, "--num-runs", "0").status == 2
    r = cli("benchmark", mlp_path, "-b", "nosuch", "--num-runs", "1")
    assert r.status == 2 and "unknown backend 'nosuch'" in r.stderr
