"""``litegpu diff``: zero error for cpu vs itself; exact error and failing exit for a wrong backend."""

from __future__ import annotations

import numpy as np
import pytest
from _cli_helpers import cli


def test_diff_cpu_vs_cpu_is_exact(mlp_path):
    r = cli("diff", mlp_path, "--backend", "cpu", "--runs", "4", "--json")
    assert r.status == 0, r
    d = r.json()
    assert d["passed"] is True and d["runs"] == 4
    assert [o["name"] for o in d["outputs"]] == ["sum:0", "prob"]
    for o in d["outputs"]:
        assert o["avg_error"] == 0 and o["std_dev"] == 0 and o["max_error"] == 0 and o["ok"]
    for k in ("reference_latency_us", "test_latency_us"):
        assert d[k]["avg"] > 0 and d[k]["std"] >= 0


def test_diff_wrong_backend_fails_with_exact_errors(add_path, register_backend):
    register_backend("wrongadd")
    runs = 5
    r = cli("diff", add_path, "--backend", "wrongadd", "--runs", runs, "--seed", "11", "--json")
    assert r.status == 1, r
    d = r.json()
    assert d["passed"] is False
    assert [s["backend"] for s in d["execution_plan"]] == ["wrongadd", "cpu"]
    # The same Gaussian inputs the command drew: (a + b) * 2 against (a - b) * 2.
    rng = np.random.default_rng(11)
    diffs = []
    for _ in range(runs):
        a = rng.standard_normal((1, 8)).astype(np.float32)
        b = rng.standard_normal((1, 8)).astype(np.float32)
        right = (a + b) * np.float32(2)
        wrong = (a - b) * np.float32(2)
        diffs.append(np.abs(right.astype(np.float64) - wrong.astype(np.float64)))
    diffs = np.concatenate(diffs)
    o = d["outputs"][0]
    assert o["name"] == "out" and not o["ok"]
    assert o["max_error"] == pytest.approx(diffs.max(), rel=1e-12)
    assert o["avg_error"] == pytest.approx(diffs.mean(), rel=1e-9)
    assert o["std_dev"] == pytest.approx(diffs.std(), rel=1e-6)


def test_diff_text_and_tolerance(add_path, register_backend):
    register_backend("wrongadd")
    r = cli("diff", add_path, "--backend", "wrongadd", "--runs", "2")
    assert r.status == 1
    assert "FAIL" in r.stdout and "AVG_ERROR" in r.stdout and "reference latency" in r.stdout
    # a tolerance above the (at most 4 * |b| ~ 4 * 5) error passes
    r = cli("diff", add_path, "--backend", "wrongadd", "--runs", "2", "--tolerance", "1000")
    assert r.status == 0 and "PASS" in r.stdout


def test_diff_errors(mlp_path, tmp_path):
    assert cli("diff", mlp_path).status == 2  # --backend is required (argparse)
    r = cli("diff", tmp_path / "missing.tflite", "--backend", "cpu")
    assert r.status == 2 and "model file not found" in r.stderr
    r = cli("diff", mlp_path, "--backend", "metal")  # installed nowhere
    assert r.status == 2 and "metal" in r.stderr


def test_relative_error_of_constant_outputs():
    """A one-element output over one run has no range: its error is relative to its magnitude (not an
    infinite relative error that fails every backend), and absolute when the value is 0."""
    from litegpu.cli._diff import relative_error

    assert relative_error(1e-6, 2.0, 5.0) == 5e-7
    assert relative_error(3.6e-7, 0.0, 0.9) == 3.6e-7 / 0.9
    assert relative_error(4.6e-10, 0.0, 0.0) == 4.6e-10
    assert relative_error(0.0, 0.0, 0.0) == 0.0 and relative_error(float("inf"), 0.0, 1.0) == float("inf")
