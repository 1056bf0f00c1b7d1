"""What the first commands print: ``python -m litegpu``, ``backends --options``, no driver noise about
XDG_RUNTIME_DIR, readable ``inspect`` values, benchmark times in milliseconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_helpers import cli

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    paths = [ROOT / "core", *(ROOT / "backends" / b for b in ("opencl", "vulkan", "webgpu")),
             ROOT / "plugins" / "example" / "src"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITEGPU_")}  # the installed plugins load
    return {**env, "PYTHONPATH": os.pathsep.join(map(str, paths)), **extra}


def test_python_dash_m_litegpu():
    proc = subprocess.run([sys.executable, "-m", "litegpu", "--version"], capture_output=True, text=True,
                          env=_env(), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "litegpu 0.1.0", proc


def test_backends_options_lists_common_and_own_options(register_backend):
    register_backend("wrongadd")
    r = cli("backends", "--options")
    assert r.status == 0, r
    assert "backends.all (common to every backend):" in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.startswith("precision "))
    assert row.split()[1:6] == ["one", "of", "fp32,", "fp16,", "fp16_fp32acc"] and " fp32 " in row
    j = cli("backends", "--options", "--json").json()
    assert {o["option"] for o in j["all"]} >= {"precision", "device", "tuning", "quantization_simulation"}
    assert "wrongadd" in j


def test_the_yaml_comment_points_at_a_command_that_exists():
    text = (ROOT / "configs" / "default.yaml").read_text() if (ROOT / "configs").is_dir() else \
        (ROOT / "core" / "litegpu" / "configs" / "default.yaml").read_text()
    assert "litegpu backends --options" in text


def test_no_xdg_runtime_dir_noise_from_the_webgpu_probe():
    pytest.importorskip("wgpu")
    env = _env()
    env.pop("XDG_RUNTIME_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "litegpu", "backends", "--refresh"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "XDG_RUNTIME_DIR" not in proc.stderr + proc.stdout
    assert re.search(r"^webgpu ", proc.stdout, re.M)


def test_ensure_xdg_runtime_dir_keeps_a_valid_one_and_replaces_a_bad_one(tmp_path, monkeypatch):
    from litegpu._runtime_dir import ensure_xdg_runtime_dir

    good = tmp_path / "rt"
    good.mkdir(mode=0o700)
    good.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(good))
    assert ensure_xdg_runtime_dir() == str(good)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    made = ensure_xdg_runtime_dir()
    assert made and made != str(tmp_path / "missing") and os.environ["XDG_RUNTIME_DIR"] == made
    assert (os.stat(made).st_mode & 0o777) == 0o700


def test_inspect_values_are_rounded_and_labelled():
    from litegpu.cli._inspect import readable

    assert readable({"cache_load": 26.214724999988448, "plan": 0.0123456}, "prepare_ms") == \
        "(cache_load 26.2, plan 0.0123, total 26.2) ms"
    assert readable(1245184, "arena_bytes") == "1.2 MiB"
    assert readable([[16, 16, 1]] * 35, "workgroups") == "35 values (--json lists them)"
    assert readable([], "warnings") == "none"
    assert readable(True) == "true"


def test_benchmark_prints_milliseconds(mlp_path):
    r = cli("benchmark", mlp_path, "--num-runs", "3")
    assert r.status == 0, r
    assert re.search(r"^Init: \d+(\.\d+)?(e-\d+)? ms$", r.stdout, re.M), r.stdout
    assert re.search(r"p90 \S+ ms$", r.stdout, re.M)
    assert " us" not in r.stdout
