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
