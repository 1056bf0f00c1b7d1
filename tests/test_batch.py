"""``litegpu batch`` / ``litegpu.batch`` on one local Ray instance for the whole test session (2 CPUs,
started as ``litegpu batch`` starts its own, shut down at the end): Ray starts once per test run.

Every output is compared with a single-process run of the same model through ``litegpu run``'s code
path (``make_interpreter`` + set_inputs/invoke/get_outputs) on the same backend: identical bytes, not
a tolerance.  Needs the ``litegpu[ray]`` extra; skipped with the reason when Ray is missing.

The jobs take the path of ``litegpu batch`` without ``--address`` (the instance is the call's own local
instance: the one-off prepare in the driver, the actors on the instance's own worker processes), except
where a test switches to the path of a joined cluster (:func:`cluster_path`: the prepare a Ray task
beside the pipeline's start, the actors in worker processes of their own runtime environment).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="litegpu batch needs the litegpu[ray] extra (pip install 'litegpu[ray]')")
pytest.importorskip("ray.data", reason="litegpu batch needs Ray Data (pip install 'litegpu[ray]')")

from litegpu.batch import read_outputs, run_batch  # noqa: E402
from litegpu.cli import main  # noqa: E402
from litegpu.cli._common import get_outputs, load_model, make_interpreter, set_inputs  # noqa: E402
from litegpu.cli._preprocess import Preprocess, PreprocessOptions, load_image  # noqa: E402
from litegpu.testing import small_image_classifier  # noqa: E402

HW = 16


def tiny_cnn() -> bytes:
    return small_image_classifier(HW)


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for this module, started as ``litegpu batch`` starts its own
    (``_start_local_ray``: the workers with the GPU settings and the preloaded modules), limited to 2
    CPUs (the machine is shared).  It declares one GPU, which CI machines lack: the GPU-backend tests
    then take the GPU actor path (a share of a GPU per actor, the backend's device index from Ray's GPU
    id: 0, which is PoCL's or lavapipe's device); CPU-backend actors never ask for GPUs."""
    from litegpu.batch import _job
    from litegpu.batch._stages import NOSET_CUDA

    _job._start_local_ray(ray, num_cpus=2, num_gpus=1, log_to_driver=False)
    assert _job._own_local_ray()
    assert all(k not in os.environ for k in NOSET_CUDA)  # set only while Ray started, for its processes
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    _job._stop_local_ray(ray)
    assert not ray.is_initialized() and not _job._own_local_ray()


@pytest.fixture
def cluster_path(monkeypatch):
    """The path of a job on a joined cluster (``--address``), on the session's instance: the one-off
    prepare a Ray task beside the pipeline's start (``DRIVER_PREPARE`` off) and the GPU actors in worker
    processes of their own runtime environment (``SHARED_WORKERS`` off)."""
    from litegpu.batch import _job

    monkeypatch.setattr(_job, "DRIVER_PREPARE", False)
    monkeypatch.setattr(_job, "SHARED_WORKERS", False)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The model, 40 inputs (.npy tensors, .npy images of another size, PNGs) and one corrupt file."""
    d = tmp_path_factory.mktemp("batch")
    model = d / "cnn.tflite"
    model.write_bytes(tiny_cnn())
    inputs = d / "in"
    inputs.mkdir()
    rng = np.random.default_rng(0)
    for i in range(24):  # the model's input tensor itself, as `litegpu run --input` takes it
        np.save(inputs / f"t{i:02d}.npy", rng.normal(size=(1, HW, HW, 3)).astype(np.float32))
    for i in range(8):  # images of another size: resized by the shared preprocessing
        np.save(inputs / f"img{i}.npy", rng.integers(0, 256, (20, 24, 3), dtype=np.uint8))
    try:
        from PIL import Image

        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (HW, HW, 3), dtype=np.uint8)).save(inputs / f"p{i}.png")
    except ImportError:
        pass
    (inputs / "zz_corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    return {"dir": d, "model": model, "inputs": inputs}


def single_process(model: Path, files: list[Path], backend: str) -> dict[str, list[np.ndarray]]:
    """The baseline: `litegpu run`'s code path, one process, one file after another."""
    lm = load_model(str(model))
    interp = make_interpreter(lm, backend, {})
    detail = interp.get_input_details()[0]
    pre = Preprocess.for_input(detail, PreprocessOptions(), __import__("litegpu.cli._preprocess",
                                                                      fromlist=["x"]).ModelMetadata())
    out = {}
    for f in files:
        set_inputs(interp, [pre.input_from(load_image(f))])
        interp.invoke()
        out[str(f.resolve())] = [a.copy() for a in get_outputs(interp)]
    return out


def _good_files(case) -> list[Path]:
    return sorted(p for p in case["inputs"].iterdir() if not p.name.startswith("zz_"))


def _check_identical(rows, expected):
    for path, want in expected.items():
        row = rows[path]
        assert row["error"] is None, (path, row["error"])
        got = [row["probs"], row["conv"]]
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def _unavailable(backend: str) -> str | None:
    """Why ``backend`` cannot run here (None: it can)."""
    import litegpu

    for b in litegpu.available_backends():
        if b.name == backend:
            return None if b.available else b.reason
    return f"litegpu-{backend} is not installed"


# opencl runs on PoCL and vulkan on lavapipe in CI: actors on "GPU" backends without Ray GPUs; opencl
# takes the path of a job on a joined cluster, vulkan (and cpu) that of `litegpu batch`'s local instance
@pytest.mark.parametrize("backend", ["cpu", "opencl", "vulkan"])
def test_outputs_identical_to_single_process_and_corrupt_row(local_ray, case, tmp_path, backend, request):
    if backend != "cpu" and (why := _unavailable(backend)):
        pytest.skip(f"{backend} backend unavailable: {why}")
    if backend == "opencl":
        request.getfixturevalue("cluster_path")
    expected = single_process(case["model"], _good_files(case), backend)
    cfg = tmp_path / "app.yaml"  # the actors' serialization cache in a private folder
    cfg.write_text(f"cache:\n  dir: {tmp_path / 'cache'}\n")
    out = tmp_path / "out"
    r = run_batch(case["model"], case["inputs"], out, backend=backend, config=str(cfg), actors=2, batch_size=8,
                  stats=True)
    n = len(expected) + 1
    # the shards are written by a stage of their own, not fused into the actors
    ops = [line.split(":")[0] for line in r.stats.splitlines() if line.startswith("Operator ")]
    assert any(o.endswith("MapBatches(InferenceActor)") for o in ops), ops
    assert any(o.endswith("MapBatches(write_batch)") for o in ops), ops
    assert (r.items, r.failures, r.skipped) == (n, 1, 0)
    rows = read_outputs(out)
    assert set(rows) == set(expected) | {str((case["inputs"] / "zz_corrupt.png").resolve())}
    _check_identical(rows, expected)
    bad = rows[str((case["inputs"] / "zz_corrupt.png").resolve())]
    assert "cannot read image" in bad["error"] and bad["probs"] is None
    assert {a["device"].split(":")[0].split(" ")[0] for a in r.actors} == {backend}
    # the pool starts once every actor is prepared: no actor's first batch before the last one was ready
    assert 0 < r.start_s <= r.seconds
    assert max(a["ready_s"] for a in r.actors) <= min(a["first_s"] for a in r.actors)
    assert all(a["first_s"] <= a["last_s"] for a in r.actors), r.actors
    if backend != "cpu":
        # half a GPU each, less the sliver the one-off prepare runs in beside the actors' start
        assert 0.49 <= r.ray["actor_gpus"] < 0.5 and all(a["device"].startswith(f"{backend}:0 ") for a in r.actors)
        # prepared once (in the driver on the local path, a Ray task on a cluster's), entries shipped:
        # every actor's prepare hit the cache
        assert r.prepare is not None and r.prepare["cache_entries"] >= 1
        assert r.prepare["where"].startswith("a Ray task" if backend == "opencl" else "driver"), r.prepare
        assert all(a["warm"] == "True" for a in r.actors), r.actors


def _in_order(tl: dict[str, float], keys: list[str]) -> None:
    got = [tl[k] for k in keys]
    assert got == sorted(got), list(zip(keys, got, strict=True))


def test_local_instance_prepares_in_the_driver_and_one_actor_per_gpu_starts_warm(local_ray, tmp_path):
    """``litegpu batch``'s local instance (the session's, started as the command starts its own): the
    one-off prepare runs in the driver, the actors get its cache entries with their spec (every actor a
    warm start) and run in the instance's own worker processes (no runtime environment of their own),
    the pool is one actor per GPU when ``actors`` is left out, and the call's timeline is in order."""
    backend = next((b for b in ("vulkan", "opencl") if not _unavailable(b)), None)
    if backend is None:
        pytest.skip(f"no GPU backend here (vulkan: {_unavailable('vulkan')}; opencl: {_unavailable('opencl')})")
    model = tmp_path / "cnn.tflite"
    model.write_bytes(tiny_cnn())
    inputs = tmp_path / "in"
    inputs.mkdir()
    rng = np.random.default_rng(1)
    for i in range(16):
        np.save(inputs / f"t{i:02d}.npy", rng.normal(size=(1, HW, HW, 3)).astype(np.float32))
    files = sorted(inputs.iterdir())
    expected = single_process(model, files, backend)
    cfg = tmp_path / "app.yaml"  # a private serialization cache: the driver's prepare starts cold
    cfg.write_text(f"cache:\n  dir: {tmp_path / 'cache'}\n")
    out = tmp_path / "out"
    r = run_batch(model, inputs, out, backend=backend, config=str(cfg), batch_size=2, progress=False)
    assert ray.is_initialized()  # a local instance started before the call outlives it
    assert (r.items, r.failures) == (len(files), 0)
    _check_identical(read_outputs(out), expected)
    # prepared once, in this process; the actor's prepare a cache hit
    assert r.prepare is not None and r.prepare["where"].startswith("driver") and r.prepare["cache_entries"] >= 1
    assert r.actors and all(a["warm"] == "True" for a in r.actors), r.actors
    # one actor on the one GPU, all of it but the one-off prepare's sliver
    assert r.ray["actors"] == 1 and 0.98 <= r.ray["actor_gpus"] < 1.0, r.ray
    tl = r.timeline
    _in_order(tl, ["model_loaded", "inputs_listed", "ray_started", "prepare_received", "pipeline_started",
                   "first_row", "last_row", "done", "ray_stopped"])
    _in_order(tl, ["inputs_listed", "prepare_started", "prepare_done", "prepare_received"])
    _in_order(tl, ["pipeline_started", "preprocess_started", "preprocess_done", "first_row"])
    for i in range(len(r.actors)):
        _in_order(tl, [f"actor{i}.{k}" for k in ("process", "entered", "spec", "cache", "built", "warm", "ready",
                                                  "first_batch")])
        assert tl[f"actor{i}.first_batch"] <= tl["last_row"]


def test_a_model_that_cannot_be_prepared_fails_the_job_with_the_prepare_error(local_ray, cluster_path, case,
                                                                              tmp_path):
    """On a cluster the actors start beside the one-off prepare (a Ray task) and wait for it; when it
    fails, the job ends with its error as one CliError (no hang, no pool of failing actors), and
    nothing is written."""
    from litegpu.cli._common import CliError

    if why := _unavailable("opencl"):
        pytest.skip(f"opencl backend unavailable: {why}")
    out = tmp_path / "out"
    with pytest.raises(CliError, match="cannot be prepared on backend opencl") as e:
        run_batch(case["model"], case["inputs"], out, backend="opencl", actors=2, batch_size=8,
                  options={"device": 99})
    assert "99" in str(e.value)
    assert not list(out.glob("*.parquet")) if out.exists() else True


def test_rerun_writes_nothing_and_npy_format(local_ray, case, tmp_path):
    out = tmp_path / "out"
    files = _good_files(case)[:10]
    sub = tmp_path / "in"
    sub.mkdir()
    for f in files:
        (sub / f.name).write_bytes(f.read_bytes())
    r1 = run_batch(case["model"], sub, out, output_format="npy", batch_size=4, actors=1)
    assert (r1.items, r1.failures) == (10, 0)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    r2 = run_batch(case["model"], sub, out, output_format="npy", batch_size=4, actors=1)
    assert (r2.items, r2.skipped, r2.shards) == (0, 10, 0)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    # one new input: only it runs
    np.save(sub / "new.npy", np.ones((1, HW, HW, 3), np.float32))
    r3 = run_batch(case["model"], sub, out, output_format="npy", batch_size=4, actors=1)
    assert (r3.items, r3.skipped) == (1, 10)
    expected = single_process(case["model"], sorted(sub.iterdir()), "cpu")
    _check_identical(read_outputs(out), expected)


def _actor_pids() -> list[int]:
    """PIDs of the running inference actors (Ray titles its workers ``ray::<class>...``)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        if b"InferenceActor" in cmd and cmd.startswith(b"ray::"):
            pids.append(int(p.name))
    return pids


# the GPU actor path (opencl on PoCL, a share of the declared GPU): several batches in the actor at
# once, all of them redone by its replacement
@pytest.mark.parametrize("backend", ["cpu", pytest.param("opencl", marks=pytest.mark.slow)])
def test_actor_killed_mid_job_loses_nothing(local_ray, case, tmp_path, backend):
    if backend != "cpu" and (why := _unavailable(backend)):
        pytest.skip(f"{backend} backend unavailable: {why}")
    many = tmp_path / "in"
    many.mkdir()
    rng = np.random.default_rng(1)
    for i in range(120):
        np.save(many / f"x{i:03d}.npy", rng.normal(size=(1, HW, HW, 3)).astype(np.float32))
    out = tmp_path / "out"
    killed: list[int] = []

    def killer():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            if out.is_dir() and any(p.suffix == ".parquet" for p in out.iterdir()):
                pids = _actor_pids()
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                    return
            time.sleep(0.05)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    r = run_batch(case["model"], many, out, backend=backend, actors=2, batch_size=4)
    t.join(5)
    assert killed, "no actor was found to kill"
    assert (r.items, r.failures) == (120, 0)
    if backend != "cpu":
        assert 0.49 <= r.ray["actor_gpus"] < 0.5  # half a GPU, less the one-off prepare's sliver
    rows = read_outputs(out)
    assert len(rows) == 120
    _check_identical(rows, single_process(case["model"], sorted(many.iterdir()), backend))


def test_parquet_input_and_cli_json(local_ray, case, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = _good_files(case)[:6]
    table = pa.table({"name": [f.name for f in files], "image": [f.read_bytes() for f in files]})
    pq.write_table(table, tmp_path / "ds.parquet")
    out = tmp_path / "out"
    code = main(["batch", str(case["model"]), str(tmp_path / "ds.parquet"), str(out), "--id-column", "name",
                 "--batch-size", "3", "--actors", "1", "--json", "--no-progress"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary
    assert (summary["items"], summary["failures"]) == (6, 0)
    assert summary["actors"] and summary["actors"][0]["device"].startswith("cpu")
    rows = read_outputs(out)
    expected = single_process(case["model"], files, "cpu")
    _check_identical({f.name: rows[f.name] for f in files}, {f.name: expected[str(f.resolve())] for f in files})
    # rerun: nothing new
    assert main(["batch", str(case["model"]), str(tmp_path / "ds.parquet"), str(out), "--id-column", "name",
                 "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == 0


def test_cli_errors_are_one_line(tmp_path, capsys):
    m = tmp_path / "m.tflite"
    m.write_bytes(tiny_cnn())
    assert main(["batch", str(m), str(tmp_path / "nope"), str(tmp_path / "out")]) == 2
    assert "input not found" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["batch", str(m), str(tmp_path / "empty"), str(tmp_path / "out")]) == 2
    assert "no images" in capsys.readouterr().err
    assert main(["batch", str(m), str(tmp_path / "empty"), str(tmp_path / "out"), "--batch-size", "0"]) == 2
    assert "--batch-size" in capsys.readouterr().err


def test_first_input_blocks_hold_one_batch_each():
    """The paths' first blocks (one per batch the actors hold at first) are one batch each, so the first
    preprocessing tasks end sooner; then four batches a block; never more than about 1000 blocks."""
    from litegpu.batch._job import block_edges

    assert block_edges(1000, 64, 6) == [0, 64, 128, 192, 256, 320, 384, 640, 896, 1000]
    assert block_edges(100, 64, 6) == [0, 64, 100]
    assert block_edges(600, 64, 0) == [0, 256, 512, 600]
    assert block_edges(0, 64, 3) == [0]
    big = block_edges(2_000_000, 32, 8)
    assert big[-1] == 2_000_000 and len(big) - 1 <= 1008 and all(b > a for a, b in zip(big, big[1:], strict=False))


def test_late_rate_is_the_second_half_of_the_rows():
    from litegpu.batch._job import _late_rate

    assert _late_rate([(1.0, 10), (2.0, 10), (3.0, 10), (4.0, 10)]) == 10.0  # 20 rows over 2 s
    assert _late_rate([(1.0, 10), (3.0, 30), (4.0, 5)]) == 5.0  # the half reached at t=3: 5 rows in 1 s
    assert _late_rate([(1.0, 64)]) == 0.0


def test_list_inputs_skips_hidden_files_and_the_output_folder(tmp_path):
    from litegpu.batch import list_inputs

    (tmp_path / "a").mkdir()
    np.save(tmp_path / "a" / "x.npy", np.zeros((2, 2, 3), np.uint8))
    np.save(tmp_path / "top.npy", np.zeros((2, 2, 3), np.uint8))
    (tmp_path / ".hidden").mkdir()
    np.save(tmp_path / ".hidden" / "h.npy", np.zeros((2, 2, 3), np.uint8))
    (tmp_path / "out" / "part-0").mkdir(parents=True)  # an .npy shard written inside the input folder
    np.save(tmp_path / "out" / "part-0" / "probs.npy", np.zeros((1, 4), np.float32))
    (tmp_path / "notes.txt").write_text("not an input")
    kind, files = list_inputs(tmp_path, exclude=(tmp_path / "out").resolve())
    assert kind == "files"
    assert files == [str((tmp_path / "a" / "x.npy").resolve()), str((tmp_path / "top.npy").resolve())]
    # symbolic links are followed and listed by their real paths, a folder or file linked twice (or a
    # folder into itself) only once; a single file as the input is listed alone
    (tmp_path / "link").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "y.npy").symlink_to(tmp_path / "a" / "x.npy")
    kind, files = list_inputs(tmp_path, exclude=(tmp_path / "out").resolve())
    assert files == [str((tmp_path / "a" / "x.npy").resolve()), str((tmp_path / "top.npy").resolve())]
    assert list_inputs(tmp_path / "y.npy") == ("files", [str((tmp_path / "a" / "x.npy").resolve())])
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.table({"image": [b"x"]}), tmp_path / "t.parquet")
    with pytest.raises(Exception, match="both images and Parquet"):
        list_inputs(tmp_path)


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_shard_round_trip_with_error_rows(tmp_path, fmt):
    from litegpu.batch import done_paths
    from litegpu.batch._shards import write_shard

    base = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    # the rows stacked; what error rows hold there (here 7s) must not be written
    stacked = np.stack([base, np.full_like(base, 7), base + 2, np.full_like(base, 7)])
    name = write_shard(tmp_path, fmt, ["p0", "p1", "p2", "p3"], [None, "bad", None, "worse"],
                       {"o": stacked}, {"model": "m"})
    # same batch, same name: a retried batch rewrites its shard, never adds one
    assert write_shard(tmp_path, fmt, ["p0", "p1", "p2", "p3"], [None, "bad", None, "worse"],
                       {"o": stacked}, {"model": "m"}) == name
    assert [p.name for p in tmp_path.iterdir()] == [name]
    rows = read_outputs(tmp_path)
    assert done_paths(tmp_path) == {"p0", "p1", "p2", "p3"}
    assert (rows["p1"]["error"], rows["p3"]["error"]) == ("bad", "worse") and rows["p1"]["o"] is None
    np.testing.assert_array_equal(rows["p0"]["o"], base)
    np.testing.assert_array_equal(rows["p2"]["o"], base + 2)
    if fmt == "npy":  # the stacked file holds zeros on error rows
        np.testing.assert_array_equal(np.load(tmp_path / name / "o.npy")[[1, 3]], np.zeros((2, 1, 2, 3), np.float32))


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_write_stage_writes_the_actor_table_and_returns_only_bookkeeping(tmp_path, fmt):
    """The write stage (the Ray tasks after the actor pool): the actor's table (the shard's columns and
    ``batch:<what>`` bookkeeping) becomes one shard with the outputs in the actor's column order and
    nothing else; what goes on to the driver is the bookkeeping with the shard's name, no outputs; the
    same block again (a retried write task) writes the same shard, not a second one."""
    import pyarrow as pa
    from litegpu.batch._shards import shard_table
    from litegpu.batch._stages import BOOKKEEPING, write_batch

    o1 = np.arange(12, dtype=np.float32).reshape(3, 1, 4)
    o0 = np.arange(3, dtype=np.int8).reshape(3, 1)
    o1[1] = 9  # an error row: not written (Parquet null, npy zeros)
    table = shard_table(["a", "b", "c"], [None, "bad", None], {"z_first": o1, "a_second": o0})
    table = table.append_column(BOOKKEEPING + "actor", pa.array(["h:1"] * 3)).append_column(
        BOOKKEEPING + "idle_s", pa.array(np.zeros(3)))
    out = write_batch(table, out_dir=str(tmp_path), fmt=fmt, metadata={"model": "m"})
    assert sorted(out) == ["actor", "error", "idle_s", "path", "shard", "t_end", "write_s"]
    assert list(out["error"]) == ["", "bad", ""] and list(out["actor"]) == ["h:1"] * 3
    assert len(set(out["shard"])) == 1 and out["shard"][0].startswith("part-")
    assert write_batch(table.slice(0), out_dir=str(tmp_path), fmt=fmt, metadata={"model": "m"})["shard"][0] \
        == out["shard"][0]
    assert [p.name for p in tmp_path.iterdir()] == [out["shard"][0]]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        t = pq.read_table(tmp_path / out["shard"][0])
        assert t.column_names == ["path", "error", "z_first", "a_second"]
        assert t.schema.metadata[b"litegpu.model"] == b"m"
    else:
        assert sorted(p.name for p in (tmp_path / out["shard"][0]).iterdir()) == \
            ["a_second.npy", "rows.json", "z_first.npy"]
        np.testing.assert_array_equal(np.load(tmp_path / out["shard"][0] / "z_first.npy")[1], np.zeros((1, 4)))
    rows = read_outputs(tmp_path)
    assert rows["b"]["error"] == "bad" and rows["b"]["z_first"] is None
    np.testing.assert_array_equal(rows["c"]["z_first"], o1[2])
    np.testing.assert_array_equal(rows["a"]["a_second"], o0[0])
    # a slice of a block (Ray Data may cut one): its own rows only
    part = write_batch(table.slice(1, 2), out_dir=str(tmp_path / "part"), fmt=fmt, metadata={})
    rows = read_outputs(tmp_path / "part")
    assert sorted(rows) == ["b", "c"] == sorted(part["path"])
    np.testing.assert_array_equal(rows["c"]["z_first"], o1[2])


def _mediapipe_pictures(d: Path) -> list[Path]:
    """PNGs of other aspect ratios than the models' square inputs, so a plain resize (what batch did
    before) gives other inputs than the letterbox."""
    Image = pytest.importorskip("PIL.Image", reason="the pictures are PNGs (Pillow)")
    d.mkdir()
    rng = np.random.default_rng(1)
    for i, (h, w) in enumerate([(90, 160), (200, 120), (64, 64)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"p{i}.png")
    return sorted(d.iterdir())


@pytest.mark.parametrize("name", ["face_detection_short_range", "selfie_segmentation"])
def test_batch_preprocessing_is_litegpu_runs_for_mediapipe_models(mediapipe_models, tmp_path, name):
    """The CPU stage of batch makes, for a bundled MediaPipe detector and segmenter, the very input
    tensor `litegpu run --input PICTURE` feeds (letterboxed into the MediaPipe value range)."""
    from litegpu.batch._job import preprocessing
    from litegpu.batch._stages import preprocess_batch
    from litegpu.cli._preprocess import ImageInputs

    pictures = _mediapipe_pictures(tmp_path / "in")
    lm = load_model(str(mediapipe_models[name]))
    detail = make_interpreter(lm, "cpu", {}).get_input_details()[0]
    pre = preprocessing(lm)  # what run_batch ships to its CPU tasks
    assert pre.letterbox is not None
    got = preprocess_batch({"path": np.array([str(p) for p in pictures], dtype=object)}, pre=pre)
    args = __import__("argparse").Namespace(mean=None, std=None, bgr=False, resize="bilinear", size=None)
    run_inputs = ImageInputs(lm.path, lm.model, lm.data, args)  # what `litegpu run` feeds
    for i, p in enumerate(pictures):
        assert got["error"][i] == ""
        want = run_inputs(0, detail, p)
        assert run_inputs.images[0][1] is not None  # letterboxed, with its placement
        assert got["input"][i].dtype == want.dtype
        np.testing.assert_array_equal(got["input"][i], want)


_RUN_SCRIPT = """
import sys
from pathlib import Path
from litegpu.cli import main
model, out = sys.argv[1], sys.argv[2]
for picture in sys.argv[3:]:
    assert main(["run", model, "--input", picture, "--backend", "cpu", "--output", f"{out}/{Path(picture).stem}"]) == 0
"""


@pytest.mark.slow  # about 25 s: a Ray Data job over a real model
def test_mediapipe_model_batch_outputs_equal_litegpu_run(local_ray, mediapipe_models, tmp_path):
    """A bundled MediaPipe detector end to end: every output batch writes is the bytes `litegpu run
    --input PICTURE` saves.  `litegpu run` runs in a process with one BLAS thread, as Ray gives each
    actor (a multi-threaded BLAS sums the larger matrix products in another order, ~1e-6 apart)."""
    import subprocess
    import sys

    model = mediapipe_models["face_detection_short_range"]
    pictures = _mediapipe_pictures(tmp_path / "in")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", _RUN_SCRIPT, str(model), str(tmp_path / "run"), *map(str, pictures)],
                   check=True, env=env, capture_output=True, timeout=300)
    expected = {str(p.resolve()): {f.stem: np.load(f) for f in (tmp_path / "run" / p.stem).glob("*.npy")}
                for p in pictures}
    assert all(len(v) == 2 for v in expected.values()), expected  # regressors and scores
    out = tmp_path / "out"
    r = run_batch(model, tmp_path / "in", out, backend="cpu", actors=1, batch_size=2)
    assert (r.items, r.failures) == (3, 0)
    rows = read_outputs(out)
    assert set(rows) == set(expected)
    for path, want in expected.items():
        assert rows[path]["error"] is None
        for name, w in want.items():
            np.testing.assert_array_equal(rows[path][name], w, err_msg=f"{path}: {name}")


class _FakeModel:
    """A CompiledModel stand-in: doubles its input; refuses a submission holding a row starting with 3
    and fails one holding a row starting with 5 when waited for (as a whole: the feed must run such a
    submission's rows again one by one to tell which row failed); ``crash`` raises what no row handler
    catches.  ``sizes``: the rows of each submission."""

    def __init__(self, crash: bool = False):
        self.crash = crash
        self.sizes: list[int] = []

    def run_rows_async(self, i, inputs, outputs):
        if self.crash:
            raise SystemExit("a bug in the device thread")
        (x,), (out,) = inputs, outputs
        self.sizes.append(len(x))
        firsts = x.reshape(len(x), -1)[:, 0]
        if (firsts == 3).any():
            raise RuntimeError("rejected")
        out[:] = 2 * x
        handle = type("Handle", (), {})()
        handle.wait = (lambda: (_ for _ in ()).throw(ValueError("device error"))) if (firsts == 5).any() \
            else (lambda: None)
        return handle


def test_start_barrier_lets_the_pool_start_together():
    """The pool's actors meet at StartBarrier: none passes before all have arrived; a late one (a
    replacement) passes at once; a missing one holds the others at most the timeout."""
    import asyncio

    from litegpu.batch._stages import StartBarrier

    async def scenario() -> tuple[list[int], int, float, int]:
        b = StartBarrier(2)
        first = asyncio.ensure_future(b.arrive(30.0))
        await asyncio.sleep(0.05)
        assert not first.done()  # waits for the second actor
        both = await asyncio.gather(first, b.arrive(30.0))
        late = await asyncio.wait_for(b.arrive(30.0), 1.0)  # a replacement: at once
        alone = StartBarrier(2)
        t = time.perf_counter()
        n = await alone.arrive(0.1)  # the other actor never comes: the timeout, then on
        return sorted(both), late, time.perf_counter() - t, n

    both, late, waited, n = asyncio.run(scenario())
    assert both == [2, 2] and late == 3
    assert n == 1 and waited >= 0.1


def test_device_feed_row_errors_and_a_dead_thread_raises():
    from litegpu.batch._stages import _DeviceFeed

    x = np.arange(16, dtype=np.float32).reshape(8, 1, 2) // 2  # row i holds [i, i]
    errors = [None] * 8
    errors[1] = "unreadable"
    model = _FakeModel()
    feed = _DeviceFeed(model, ((1, 2), np.dtype(np.float32)), [((1, 2), np.dtype(np.float32))], 2, rows=4)
    (out,) = feed.run(x, errors)
    assert errors == [None, "unreadable", None, "inference failed: RuntimeError: rejected", None,
                      "inference failed: ValueError: device error", None, None]
    want = 2 * x.copy()
    want[[1, 3, 5]] = 0  # error rows hold zeros
    np.testing.assert_array_equal(out, want)
    # row 0 alone (row 1 is unreadable), rows 2-5 as one (refused: again one by one), rows 6-7 as one
    assert model.sizes == [1, 4, 1, 1, 1, 1, 2]
    # more batches than runs in flight, back to back: every row in its own batch's arrays
    outs = [feed.run(x + k * 100, [None] * 8)[0] for k in range(1, 4)]
    for k, o in enumerate(outs, 1):
        np.testing.assert_array_equal(o, 2 * (x + k * 100))
    feed.close()
    assert not feed.thread.is_alive()
    dead = _DeviceFeed(_FakeModel(crash=True), ((1, 2), np.dtype(np.float32)), [((1, 2), np.dtype(np.float32))], 2)
    with pytest.raises(RuntimeError, match="device thread ended"):
        dead.run(x, [None] * 8)


@pytest.mark.parametrize("backend", ["vulkan"])
def test_device_feed_submits_rows_to_a_compiled_model(case, backend):
    """The GPU actor's path: a batch's rows handed to the model several at a time as one submission
    (``run_rows_async``), outputs landing in the batch's arrays.  Every row equals the single-process
    interpreter's, byte for byte: a contiguous batch, one that is not C-contiguous (made so once), and
    a batch with an error row, which must read zeros, not whatever its (uninitialised) memory held;
    each batch's arrays are its own (the actor returns them to Ray Data, which copies them later)."""
    if why := _unavailable(backend):
        pytest.skip(f"{backend} backend unavailable: {why}")
    from litegpu.batch._stages import IN_FLIGHT, ModelSpec, _DeviceFeed, _InterpreterRuns, build_model

    data = case["model"].read_bytes()
    m = build_model(ModelSpec(name="cnn", data=data, backend=backend, options={}, config=None, rows_per_submit=4))
    assert not isinstance(m.runner, _InterpreterRuns) and m.depth == IN_FLIGHT and m.rows == 4
    feed = _DeviceFeed(m.runner, m.input, [(shape, dtype) for _, shape, dtype in m.outputs], m.depth, m.signature,
                       m.rows)
    interp = make_interpreter(load_model(str(case["model"])), backend, {})
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 1, HW, HW, 3)).astype(np.float32)

    def want(rows: np.ndarray) -> list[list[np.ndarray]]:
        res = []
        for r in rows:
            set_inputs(interp, [r])
            interp.invoke()
            res.append([a.copy() for a in get_outputs(interp)])
        return res

    def check(outs: list[np.ndarray], rows: np.ndarray, errors: list[str | None]) -> None:
        got = [[outs[k][i] for _, k in sorted((pos, k) for k, (pos, _, _) in enumerate(m.outputs))]
               for i in range(len(rows))]
        for i, (g, w) in enumerate(zip(got, want(rows), strict=True)):
            for a, b in zip(g, w, strict=True):
                assert a.dtype == b.dtype
                if errors[i] is None:
                    np.testing.assert_array_equal(a, b.reshape(a.shape))
                else:
                    assert not a.any()

    errors: list[str | None] = [None] * 6
    outs = feed.run(x, errors)
    check(outs, x, errors)
    kept = [a.copy() for a in outs]
    y = np.asfortranarray(x[::-1])  # not C-contiguous: the feed makes it so, once
    errors = [None, "unreadable", None, None, None, None]
    outs2 = feed.run(y, errors)
    assert not any(np.shares_memory(a, b) for a, b in zip(outs, outs2, strict=True))
    check(outs2, y, errors)
    for a, b in zip(outs, kept, strict=True):  # the first batch's arrays untouched by the second
        np.testing.assert_array_equal(a, b)
    feed.close()  # the device thread ends and lets the compiled model go
    assert not feed.thread.is_alive()


@pytest.mark.parametrize(("kw", "message"), [({"batch_size": 0}, "--batch-size must be at least 1"),
                                             ({"actors": 0}, "--actors must be at least 1"),
                                             ({"in_flight": 0}, "--in-flight must be between 1 and 16"),
                                             ({"in_flight": 17}, "--in-flight must be between 1 and 16")])
def test_run_batch_rejects_bad_sizes_before_any_work(tmp_path, kw, message):
    """Sizes out of range are a typed error naming the flag, before Ray or the model is touched."""
    from litegpu.batch import run_batch
    from litegpu.cli._common import CliError

    with pytest.raises(CliError, match=message):
        run_batch(tmp_path / "missing.tflite", tmp_path, tmp_path / "out", **kw)


def test_worker_modules_are_importable():
    """What a local instance's worker processes preload (Ray's ``preload_python_modules`` logs a name it
    cannot import and goes on; here a wrong name fails)."""
    import importlib

    from litegpu.batch._stages import WORKER_MODULES

    for name in WORKER_MODULES:
        importlib.import_module(name)


def test_holds_an_input_looks_as_list_inputs_does(tmp_path):
    """The look before a first run lists its inputs beside Ray's start: an input folder with nothing
    ``list_inputs`` takes (only hidden entries, only other files) says no, so the error comes before
    Ray starts; a file deep down, or a single input file, says yes; symbolic-link loops end."""
    from litegpu.batch._job import _holds_an_input

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    np.save(tmp_path / ".hidden" / "h.npy", np.zeros(2))
    (tmp_path / "a" / "notes.txt").write_text("not an input")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a", target_is_directory=True)
    assert not _holds_an_input(tmp_path) and not _holds_an_input(tmp_path / "missing")
    np.save(tmp_path / "a" / "b" / "x.npy", np.zeros(2))
    assert _holds_an_input(tmp_path) and _holds_an_input(tmp_path / "a" / "b" / "x.npy")
    assert not _holds_an_input(tmp_path / "a" / "notes.txt")
