"""``litegpu models fetch|list`` with a local stand-in wheel (no network)."""

from __future__ import annotations

import zipfile

from _cli_helpers import cli
from litegpu.models import MEDIAPIPE_MODELS


def _wheel(tmp_path):
    w = tmp_path / "mediapipe-0.10.14-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as zf:
        for k, (_name, rel) in enumerate(sorted(MEDIAPIPE_MODELS.items())):
            zf.writestr(rel, b"x" * (100 + k))  # distinct sizes: 100, 101, ...
        zf.writestr("mediapipe/other.txt", b"not a model")
    return w


def test_models_fetch_lists_sizes(tmp_path):
    d = tmp_path / "models"
    r = cli("models", "fetch", "mediapipe", "--wheel", _wheel(tmp_path), "--dir", d, "--json")
    assert r.status == 0, r
    rows = r.json()["models"]
    assert [m["name"] for m in rows] == sorted(MEDIAPIPE_MODELS)
    assert [m["bytes"] for m in rows] == [100 + k for k in range(len(MEDIAPIPE_MODELS))]
    assert all(m["fetched"] for m in rows)
    assert r.json()["total_bytes"] == sum(100 + k for k in range(len(MEDIAPIPE_MODELS)))
    # text form, second call finds the files without the wheel
    r = cli("models", "fetch", "--dir", d)
    assert r.status == 0, r
    assert "14 of 14 models" in r.stdout and "face_landmark" in r.stdout and "100 B" in r.stdout


def test_models_list_without_fetching(tmp_path):
    r = cli("models", "list", "--dir", tmp_path / "empty", "--json")
    assert r.status == 0
    assert len(r.json()["models"]) == 14 and not any(m["fetched"] for m in r.json()["models"])
    r = cli("models", "list", "--dir", tmp_path / "empty")
    assert "not fetched" in r.stdout and "0 of 14 models" in r.stdout


def test_models_fetch_bad_wheel(tmp_path):
    r = cli("models", "fetch", "--wheel", tmp_path / "missing.whl", "--dir", tmp_path / "m")
    assert r.status == 2 and "does not exist" in r.stderr
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    r = cli("models", "fetch", "--wheel", bad, "--dir", tmp_path / "m")
    assert r.status == 2 and "not a readable wheel" in r.stderr


def test_models_fetch_reports_each_step(tmp_path):
    r = cli("models", "fetch", "--wheel", _wheel(tmp_path), "--dir", tmp_path / "m")
    assert r.status == 0, r
    assert "litegpu: extracting the models from mediapipe-0.10.14-py3-none-any.whl" in r.stderr
    assert "litegpu: extracted 14 models" in r.stderr
    assert 'litegpu.load("face_detection_short_range")' in r.stdout


def test_fetch_asks_pip_for_a_wheel_any_python_can_extract(tmp_path, monkeypatch):
    import subprocess

    from litegpu import models

    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: offline")

    monkeypatch.setattr(models.subprocess, "run", fake_run)
    monkeypatch.delenv(models.WHEEL_ENV, raising=False)
    r = cli("models", "fetch", "--dir", tmp_path / "m")
    assert r.status == 2 and "pip could not download mediapipe==0.10.14" in r.stderr
    assert "set LITEGPU_MEDIAPIPE_WHEEL" in r.stderr
    cmd = " ".join(seen["cmd"])
    assert "--python-version 3.11" in cmd and "--platform manylinux_2_17_x86_64" in cmd and "--only-binary=:all:" in cmd


def test_resolve_model_by_name(tmp_path):
    import pytest
    from litegpu import ModelError
    from litegpu.models import resolve_model

    d = tmp_path / "m"
    with pytest.raises(ModelError, match=r"model 'pose_detection' is not fetched yet: run `litegpu models fetch`"):
        resolve_model("pose_detection", d)
    with pytest.raises(ModelError, match=r"not a file, nor the name of a fetched model; did you mean 'pose_detection'"):
        resolve_model("pose_detecton", d)
    cli("models", "fetch", "--wheel", _wheel(tmp_path), "--dir", d)
    want = d / MEDIAPIPE_MODELS["pose_detection"]
    assert resolve_model("pose_detection", d) == want == resolve_model("pose_detection.tflite", d)
    assert resolve_model(str(want)) == want  # a path stays a path


def test_fetched_models_by_name_in_commands_and_load(mediapipe_models):
    import litegpu

    r = cli("inspect", "face_detection_short_range", "--json")
    assert r.status == 0, r
    assert r.json()["model"].endswith("face_detection_short_range.tflite")
    it = litegpu.load("face_detection_short_range", backend="cpu")
    assert it.get_input_details()[0]["shape"].tolist() == [1, 128, 128, 3]
    r = cli("inspect", "face_detection_shortrange")
    assert r.status == 2 and "did you mean 'face_detection_short_range'" in r.stderr
