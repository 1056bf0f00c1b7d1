"""Auto-selection: wrong backends are never chosen; decisions are cached per model and machine and a
new process reuses them without measuring; the CLI, inspect and cache commands show them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _cli_helpers import EXAMPLE_SRC, cli
from litegpu._autoselect import autoselect, cached_decision, list_decisions

ROOT = Path(__file__).resolve().parents[2]


def _stored(path) -> dict:
    """The decision JSON inside a serialization-cache entry (decisions live in the cache)."""
    from litegpu.cache._format import decode

    return json.loads(decode(Path(path).read_bytes()).sections["decision"])


@pytest.mark.parametrize("policy", ["latency", "init_time", "memory"])
def test_wrong_backend_is_never_chosen(tmp_path, add_path, register_backend, policy):
    register_backend("wrongadd")
    dec = autoselect(str(add_path), policy=policy, cache_dir=tmp_path, time_budget_s=5)
    assert dec.backend != "wrongadd" and dec.backend == "cpu"
    wrong = [c for c in dec.candidates if c.backend == "wrongadd"]
    assert [c.precision for c in wrong] == ["fp32", "fp16_fp32acc", "fp16"]
    for c in wrong:
        assert c.status == "rejected", c
        assert "differs from the CPU reference" in c.reason and c.max_error > 0.01
        assert c.latency_us is None  # rejected before timing
    cpu = next(c for c in dec.candidates if c.backend == "cpu")
    assert cpu.status == "ok" and cpu.max_error == 0 and cpu.latency_us > 0 and cpu.init_us > 0
    assert cpu.latency_runs >= 3 and cpu.memory_bytes > 0
    assert "wrongadd/fp32 (rejected" in dec.reason


def test_correct_backend_is_measured_and_decision_cached(tmp_path, add_path, example_backend):
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=5, precisions=["fp32", "fp16"])
    assert not dec.cached and dec.path is not None
    by = {c.label: c for c in dec.candidates}
    assert set(by) == {"cpu", "example/fp32", "example/fp16"}
    assert by["example/fp32"].status == "ok" and by["example/fp32"].max_error == 0
    assert by["example/fp32"].delegated_nodes == 2
    assert by["example/fp16"].status == "ok" and 0 < by["example/fp16"].max_error <= 0.01
    best = min((c for c in dec.candidates if c.status == "ok"), key=lambda c: c.latency_us)
    assert (dec.backend, dec.precision) == (best.backend, best.precision)
    stored = _stored(dec.path)
    assert stored["measured_at"] == dec.measured_at and stored["fingerprint"] == dec.fingerprint
    # the second call reads the file instead of measuring
    again = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=5, precisions=["fp32", "fp16"])
    assert again.cached and again.measured_at == dec.measured_at and again.backend == dec.backend
    assert cached_decision(add_path.read_bytes(), cache_dir=tmp_path, time_budget_s=5,
                           precisions=["fp32", "fp16"]).measured_at == dec.measured_at
    # other settings are another key; force measures again
    other = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=5, precisions=["fp32"])
    assert not other.cached and other.key != dec.key
    forced = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=5, precisions=["fp32", "fp16"],
                        force=True)
    assert not forced.cached and forced.measured_at != dec.measured_at
    assert len(list_decisions(cache_dir=tmp_path)) == 2


def test_fp16_that_runs_as_fp32_is_not_measured_twice(tmp_path, add_path, register_backend):
    import numpy as np

    register_backend("fp32only", fn=np.add, precision="fp32")  # correct, and always fp32
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=5)
    by = {c.label: c for c in dec.candidates}
    assert by["fp32only/fp32"].status == "ok" and by["fp32only/fp32"].effective_precision is None
    for p in ("fp16_fp32acc", "fp16"):
        c = by[f"fp32only/{p}"]
        assert c.status == "skipped" and c.effective_precision == "fp32"
        assert c.reason == "runs as fp32 on this device, like fp32only/fp32"
    assert dec.backend in ("cpu", "fp32only") and dec.precision in (None, "fp32")


def test_single_candidate_is_not_measured(tmp_path, add_path):
    dec = autoselect(str(add_path), cache_dir=tmp_path)
    assert dec.backend == "cpu" and "only available candidate" in dec.reason
    assert not list(tmp_path.glob("*.lgc"))  # nothing to remember


def test_corrupt_decision_file_is_measured_again(tmp_path, add_path, register_backend):
    register_backend("wrongadd")
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=2)
    Path(dec.path).write_text("{not json")
    again = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=2)
    assert not again.cached and again.backend == "cpu"
    assert _stored(again.path)["backend"] == "cpu"


def test_load_auto_in_process_rejects_wrong_backend(tmp_path, add_path, register_backend, monkeypatch):
    import litegpu

    register_backend("wrongadd")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"cache:\n  dir: {tmp_path / 'cache'}\nautoselect:\n  time_budget_s: 2\n")
    it = litegpu.load(str(add_path), config=str(cfg), backend="auto")
    assert it.litegpu_backend == "cpu"
    assert [s["backend"] for s in it.get_execution_plan()] == ["cpu"]


def test_cli_autoselect_inspect_and_cache(tmp_path, add_path, register_backend):
    register_backend("wrongadd")
    cache = tmp_path / "cache"
    r = cli("autoselect", add_path, "--cache-dir", cache, "--time-budget", "2", "--json")
    assert r.status == 0, r
    d = r.json()
    assert d["backend"] == "cpu" and d["cached"] is False and d["policy"] == "latency"
    assert {c["label"]: c["status"] for c in d["candidates"]} == {
        "cpu": "ok", "wrongadd/fp32": "rejected", "wrongadd/fp16_fp32acc": "rejected", "wrongadd/fp16": "rejected"}
    r = cli("autoselect", add_path, "--cache-dir", cache, "--time-budget", "2")
    assert r.status == 0 and "cached (measured " + d["measured_at"] in r.stdout
    assert "rejected" in r.stdout and "differs from the CPU reference" in r.stdout
    # inspect shows the decision and why
    r = cli("inspect", add_path, "-b", "cpu", "--cache-dir", cache, "--config", _cfg(tmp_path, 2))
    assert r.status == 0, r
    assert "auto-selection (latency, measured " + d["measured_at"] + "): cpu" in r.stdout
    assert "why: cpu has the lowest median warm latency" in r.stdout
    # cache commands see and clear it
    r = cli("cache", "list", "--cache-dir", cache, "--json")
    assert r.status == 0, r
    assert [x["fingerprint"] for x in r.json()["autoselect"]] == [d["fingerprint"]]
    # the decision is the only entry of the one cache folder (no compiled delegate entries here)
    assert [e["backend"] for e in r.json()["cache"]] == ["autoselect"]
    r = cli("cache", "info", "--cache-dir", cache)
    assert "auto-selection: 1 decision(s)" in r.stdout and "directory:" in r.stdout
    r = cli("cache", "clear", "--cache-dir", cache, "--json")
    assert r.status == 0 and r.json()["autoselect"]["removed"] == 1
    assert cli("cache", "list", "--cache-dir", cache, "--json").json()["autoselect"] == []


def _cfg(tmp_path: Path, budget: float) -> Path:
    f = tmp_path / f"cfg{budget}.yaml"
    f.write_text(f"cache:\n  dir: {tmp_path / 'cache'}\nautoselect:\n  time_budget_s: {budget}\n")
    return f


_SCRIPT = textwrap.dedent("""
    import json, logging, sys, time
    sys.path.insert(0, {example!r})
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    t0 = time.perf_counter()
    import litegpu
    from litegpu._plugins import register_plugin
    import litegpu_example_numpy.plugin as plugin
    register_plugin(plugin, "example")
    t = time.perf_counter()
    it = litegpu.load({model!r}, backend="auto")
    load_s = time.perf_counter() - t
    print(json.dumps({{"backend": it.litegpu_backend, "load_s": load_s,
                       "plan": [s["backend"] for s in it.get_execution_plan()]}}))
""")


def test_second_load_in_new_process_uses_cached_decision(tmp_path, add_path):
    if not EXAMPLE_SRC.is_dir():
        pytest.skip("plugins/example is not in this checkout")
    env = dict(os.environ, LITEGPU_CONFIG=str(_cfg(tmp_path, 3)), LITEGPU_DISABLE_PLUGIN_AUTOLOAD="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "core"), os.environ.get("PYTHONPATH", "")]))
    script = _SCRIPT.format(example=str(EXAMPLE_SRC), model=str(add_path))

    def run() -> tuple[dict, str]:
        p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr

    first, log1 = run()
    files = list((tmp_path / "cache").glob("autoselect-*.lgc"))
    assert len(files) == 1
    stored = _stored(files[0])
    assert "autoselect: measured" in log1 and "cached" not in log1
    assert first["backend"] == stored["backend"]
    second, log2 = run()
    assert "autoselect: using the cached decision" in log2 and "autoselect: measured" not in log2
    assert second["backend"] == first["backend"] and second["plan"] == first["plan"]
    again = _stored(files[0])  # not rewritten (its mtime moves: the cache marks hits for LRU eviction)
    assert again["measured_at"] == stored["measured_at"]
    print(f"\nautoselect load: first {first['load_s'] * 1e3:.1f} ms (measured {stored['measure_s'] * 1e3:.1f} ms), "
          f"cached {second['load_s'] * 1e3:.1f} ms, ratio {first['load_s'] / second['load_s']:.1f}x")


def test_run_with_backend_auto_uses_the_decision(tmp_path, add_path, register_backend):
    import numpy as np

    register_backend("wrongadd")
    register_backend("fp32only", fn=np.add, precision="fp32")
    cfg = _cfg(tmp_path, 3)
    dec = autoselect(str(add_path), config=str(cfg))
    r = cli("run", add_path, "--backend", "auto", "--config", cfg, "--json")
    assert r.status == 0, r
    assert "backend auto -> " in r.stderr and "cached decision" in r.stderr
    assert r.json()["backend"] == dec.backend != "wrongadd"
