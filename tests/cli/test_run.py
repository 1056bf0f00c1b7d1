"""``litegpu run``: outputs saved as .npy equal LiteRT's; summary numbers; failure paths."""

from __future__ import annotations

import numpy as np
import pytest
from _cli_helpers import cli, mlp_model
from litegpu.testing import run_litert


def test_run_outputs_equal_litert(tmp_path, mlp_path):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4)).astype(np.float32)
    z = rng.standard_normal((1, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "z.npy", z)
    out = tmp_path / "out"
    r = cli("run", mlp_path, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"z={tmp_path / 'z.npy'}",
            "--output", out, "--json")
    assert r.status == 0, r
    want = run_litert(mlp_model(), [x, z])
    files = sorted(p.name for p in out.iterdir())
    assert files == ["prob.npy", "sum_0.npy"]  # "sum:0" made file-safe
    got_sum, got_prob = np.load(out / "sum_0.npy"), np.load(out / "prob.npy")
    np.testing.assert_allclose(got_sum, want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_prob, want[1], rtol=1e-6, atol=1e-6)
    data = r.json()
    assert [o["name"] for o in data["outputs"]] == ["sum:0", "prob"]
    o = data["outputs"][0]
    assert o["shape"] == [1, 3] and o["dtype"] == "float32"
    assert o["min"] == pytest.approx(float(got_sum.min())) and o["max"] == pytest.approx(float(got_sum.max()))
    assert o["mean"] == pytest.approx(float(got_sum.mean()), rel=1e-6)
    assert [i["source"] for i in data["inputs"]] == ["file", "file"]
    assert data["invoke_us"] > 0 and data["init_us"] > 0


def test_run_random_inputs_seeded_and_saved(tmp_path, mlp_path):
    out1, out2 = tmp_path / "a", tmp_path / "b"
    assert cli("run", mlp_path, "-o", out1, "--seed", "3", "--save-inputs").status == 0
    assert cli("run", mlp_path, "-o", out2, "--seed", "3").status == 0
    np.testing.assert_array_equal(np.load(out1 / "prob.npy"), np.load(out2 / "prob.npy"))
    x, z = np.load(out1 / "input_x.npy"), np.load(out1 / "input_z.npy")
    want = run_litert(mlp_model(), [x, z])
    np.testing.assert_allclose(np.load(out1 / "prob.npy"), want[1], rtol=1e-6, atol=1e-6)
    # another seed, other inputs
    out3 = tmp_path / "c"
    assert cli("run", mlp_path, "-o", out3, "--seed", "4").status == 0
    assert not np.array_equal(np.load(out1 / "prob.npy"), np.load(out3 / "prob.npy"))


def test_run_text_summary(mlp_path):
    r = cli("run", mlp_path)
    assert r.status == 0, r
    assert "mlp.tflite on cpu" in r.stdout and "inference" in r.stdout
    assert "sum:0" in r.stdout and "prob" in r.stdout and "outputs not saved" in r.stdout


def test_run_missing_model(tmp_path):
    r = cli("run", tmp_path / "nope.tflite")
    assert r.status == 2
    assert "model file not found" in r.stderr and "nope.tflite" in r.stderr


def test_run_not_a_model(tmp_path):
    p = tmp_path / "junk.tflite"
    p.write_bytes(b"this is not a flatbuffer at all")
    r = cli("run", p)
    assert r.status == 2
    assert "is not a valid .tflite model" in r.stderr


def test_run_unknown_backend(mlp_path):
    r = cli("run", mlp_path, "--backend", "nosuchgpu")
    assert r.status == 2
    assert "unknown backend 'nosuchgpu'" in r.stderr and "cpu" in r.stderr


def test_run_unavailable_backend(mlp_path, register_backend):
    register_backend("nodriver", available=False, reason="libfake.so not found")
    r = cli("run", mlp_path, "--backend", "nodriver")
    assert r.status == 2
    assert "libfake.so not found" in r.stderr


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "file not found"),
    (lambda p: p.write_bytes(b"garbage"), "not a readable .npy"),
    (lambda p: np.save(p, np.zeros((2, 2), np.float32)), "needs (1, 4)"),
    # integer arrays (uint8 pictures) convert to a float input; complex values do not
    (lambda p: np.save(p, np.zeros((1, 4), np.complex64)), "dtype complex64"),
])
def test_run_bad_input_file(tmp_path, mlp_path, make, message):
    f = tmp_path / "in.npy"
    make(f)
    r = cli("run", mlp_path, "--input", f"x={f}")
    assert r.status == 2, r
    assert message in r.stderr


def test_run_bad_input_name(tmp_path, mlp_path):
    f = tmp_path / "in.npy"
    np.save(f, np.zeros((1, 4), np.float32))
    r = cli("run", mlp_path, "--input", f"nope={f}")
    assert r.status == 2
    assert "no input named 'nope'" in r.stderr and "'x'" in r.stderr
    r = cli("run", mlp_path, "--input", "justaname")
    assert r.status == 2 and "NAME=FILE (.npy or an image)" in r.stderr


def test_run_input_by_position_and_missing_batch(tmp_path, mlp_path):
    x = np.arange(4, dtype=np.float32)  # (4,) for a (1, 4) input: the batch dimension is added
    np.save(tmp_path / "x.npy", x)
    r = cli("run", mlp_path, "--input", f"0={tmp_path / 'x.npy'}", "--json")
    assert r.status == 0, r
    assert r.json()["inputs"][0]["source"] == "file"
    assert r.json()["inputs"][0]["max"] == 3.0
