"""Packaging: every distribution carries the licence, py.typed, an SPDX licence string, URLs and
classifiers; the core registers no pytest plugin; ``make dist`` builds five wheels from which
``pip install --find-links dist 'litegpu[all]'`` (and each single extra) installs in a fresh venv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
DISTS = {".": "litegpu", "backends/opencl": "litegpu_opencl", "backends/vulkan": "litegpu_vulkan",
         "backends/webgpu": "litegpu_webgpu", "plugins/example": "litegpu_example_numpy"}


def _package_dir(where: str, package: str) -> Path:
    for base in ("core", "src", "."):
        p = ROOT / where / base / package
        if p.is_dir():
            return p
    raise AssertionError(f"no package {package} under {where}")


@pytest.mark.parametrize("where", list(DISTS))
def test_distribution_metadata(where):
    meta = tomllib.loads((ROOT / where / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0"  # an SPDX expression, not the deprecated table
    assert meta["license-files"] == ["LICENSE"]
    assert (ROOT / where / "LICENSE").read_text().startswith("\n                                 Apache License")
    assert {"Homepage", "Documentation", "Issues"} <= set(meta["urls"])
    assert "Typing :: Typed" in meta["classifiers"] and any("Python :: 3.10" in c for c in meta["classifiers"])
    assert (_package_dir(where, DISTS[where]) / "py.typed").is_file()


def test_core_extras_and_no_global_pytest_plugin():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    assert extras["opencl"] == ["litegpu-opencl==0.1.0"] and extras["all"] == [
        "litegpu[opencl,vulkan,webgpu,images,plot]"]
    assert "pytest11" not in meta.get("entry-points", {})


@pytest.mark.slow
def test_make_dist_then_install_extras_in_a_fresh_venv(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    dist = tmp_path / "dist"
    r = subprocess.run(["make", "-C", str(ROOT), "dist", f"DIST={dist}", f"DIST_PY={sys.executable}"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = sorted(p.name.split("-")[0] for p in dist.glob("*.whl"))
    assert wheels == ["litegpu", "litegpu_example_numpy", "litegpu_opencl", "litegpu_vulkan", "litegpu_webgpu"]
    with zipfile.ZipFile(next(dist.glob("litegpu-0.1.0-*.whl"))) as z:
        names = z.namelist()
        assert "litegpu/py.typed" in names and "litegpu-0.1.0.dist-info/licenses/LICENSE" in names
        metadata = z.read("litegpu-0.1.0.dist-info/METADATA").decode()
        assert "License-Expression: Apache-2.0" in metadata
        assert "pytest11" not in z.read("litegpu-0.1.0.dist-info/entry_points.txt").decode()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for extra in ("opencl", "vulkan", "webgpu", "images", "plot"):  # each single extra resolves
        report = tmp_path / f"{extra}.json"
        r = subprocess.run([py, "-m", "pip", "install", "-q", "--dry-run", "--report", str(report),
                            "--find-links", str(dist), f"litegpu[{extra}]"],
                           capture_output=True, text=True, env=env, timeout=900)
        assert r.returncode == 0, r.stderr
        got = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
        want = {"opencl": "litegpu-opencl", "vulkan": "litegpu-vulkan", "webgpu": "litegpu-webgpu",
                "images": "pillow", "plot": "matplotlib"}[extra]
        assert {"litegpu", want} <= got, got
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--find-links", str(dist), "litegpu[all]"],
                       capture_output=True, text=True, env=env, timeout=1800)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(venv / "bin" / "litegpu"), "backends", "--json"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    names = {b["name"] for b in json.loads(r.stdout)["backends"]}
    assert {"cpu", "opencl", "vulkan", "webgpu"} <= names
    r = subprocess.run([py, "-m", "pytest", "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert "No module named pytest" in r.stderr  # the core pulls no test tooling in
