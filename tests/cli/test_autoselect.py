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
    assert cpu.latency_runs >= 3
    assert (cpu.memory_bytes > 0) if policy == "memory" else (cpu.memory_bytes is None)  # tracemalloc is slow
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
    cfg.write_text(f"cache:\n  dir: {tmp_path / 'cache'}\nautoselect:\n  time_budget_s: 2\n"
                   "  measure_on_load: true\n")
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


def _cfg(tmp_path: Path, budget: float, measure_on_load: bool = False) -> Path:
    f = tmp_path / f"cfg{budget}{'m' if measure_on_load else ''}.yaml"
    f.write_text(f"cache:\n  dir: {tmp_path / 'cache'}\nautoselect:\n  time_budget_s: {budget}\n"
                 f"  measure_on_load: {str(measure_on_load).lower()}\n")
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
    env = dict(os.environ, LITEGPU_CONFIG=str(_cfg(tmp_path, 3, measure_on_load=True)),
               LITEGPU_DISABLE_PLUGIN_AUTOLOAD="1",
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
    assert "autoselect: measured" in log1 and "using the cached decision" not in log1
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


# --------------------------------------------------------------------------- the time budget


@pytest.fixture
def gate():
    """An Event that a slow fake backend's prepare waits on; set at the end so no thread lingers."""
    import threading

    ev = threading.Event()
    yield ev
    ev.set()


def test_budget_is_hard_and_a_cut_decision_is_provisional(tmp_path, add_path, register_backend, gate, caplog):
    import logging
    import time

    import numpy as np

    register_backend("slowgpu", fn=np.add, prepare_gate=gate)  # correct, but its prepare never ends
    t0 = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="litegpu"):
        dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=1.0)
    took = time.perf_counter() - t0
    # Without a hard budget this call would wait for the gate (120 s); the bound is generous on purpose.
    assert took < 5.0, took
    by = {c.label: c for c in dec.candidates}
    assert by["cpu"].status == "ok"
    assert by["slowgpu/fp32"].status == "over_budget" and "stopped after" in by["slowgpu/fp32"].reason
    for p in ("fp16_fp32acc", "fp16"):
        assert by[f"slowgpu/{p}"].status == "over_budget"
        assert by[f"slowgpu/{p}"].reason == "not measured: the 1 s budget was used up"
    assert dec.backend == "cpu" and dec.final is False and "provisional" in dec.reason
    assert _stored(dec.path)["final"] is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("within a time budget of 1 s" in m for m in warnings) == 1  # announced once, with the budget
    assert any("provisionally" in m for m in warnings)
    # load() may use the provisional decision, but the next autoselect measures again
    assert cached_decision(str(add_path), cache_dir=tmp_path).final is False
    gate.set()  # now slowgpu prepares at once
    again = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=5.0)
    assert not again.cached and again.final is True
    assert {c.label: c.status for c in again.candidates}["slowgpu/fp32"] == "ok"
    assert _stored(again.path)["final"] is True
    assert autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=5.0).cached


def test_budget_covers_the_reference(tmp_path, add_path, register_backend, gate):
    import numpy as np

    register_backend("slowgpu", fn=np.add, prepare_gate=gate)
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=0)
    assert dec.final is False and all(c.status == "over_budget" for c in dec.candidates if c.status != "unavailable")
    assert dec.backend == "slowgpu" and "first available GPU backend" in dec.reason  # nothing measured


def test_fp32_of_every_backend_is_measured_first(tmp_path, add_path, register_backend):
    import numpy as np

    register_backend("gpua", fn=np.add)
    register_backend("gpub", fn=np.add)
    order: list[str] = []
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=10, precisions=["fp16", "fp32"],
                     progress=order.append)
    assert order == ["cpu", "gpua/fp32", "gpub/fp32", "gpua/fp16", "gpub/fp16"]
    assert [c.label for c in dec.candidates] == order and dec.final


class _Slow:
    """A ``prepare_gate`` that lets the prepare through after ``s`` seconds (a cold compile)."""

    def __init__(self, s: float):
        self.s = s

    def wait(self, timeout: float) -> bool:
        import time

        time.sleep(self.s)
        return True


def test_fp32_prepare_longer_than_its_share_is_still_measured(tmp_path, add_path, register_backend):
    """A cold prepare longer than a share (lavapipe compiling for seconds) is not abandoned while the
    budget has time left: every fp32 prepare runs side by side, and the checks and timing wait for
    the slow one (within half the budget), so each is timed alone, in list order, and the decision
    is final."""
    import numpy as np

    register_backend("slowgpu", fn=np.add, prepare_gate=_Slow(2.0))
    register_backend("gpua", fn=np.add)
    register_backend("gpub", fn=np.add)
    order: list[str] = []
    # 6 s among 3 GPU candidates after cpu: slowgpu's share is under 2 s, the whole budget is not
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=6, precisions=["fp32"],
                     progress=order.append)
    assert order == ["cpu", "slowgpu/fp32", "gpua/fp32", "gpub/fp32"]
    by = {c.label: c for c in dec.candidates}
    assert by["slowgpu/fp32"].status == "ok", by["slowgpu/fp32"]
    assert "prepared beside the other candidates" in by["slowgpu/fp32"].reason
    assert by["slowgpu/fp32"].init_us >= 2.0e6 and by["slowgpu/fp32"].latency_runs >= 3
    assert dec.final is True and _stored(dec.path)["final"] is True


def test_fp32_prepares_run_side_by_side(tmp_path, add_path, register_backend):
    """A first call compiles every backend cold: three 2.5 s prepares one after another would not fit
    a 6 s budget (cpu and the reference first), side by side they do; each is then checked and timed
    alone (the prepares were all done by then), so the decision is final."""
    import numpy as np

    for name in ("colda", "coldb", "coldc"):
        register_backend(name, fn=np.add, prepare_gate=_Slow(2.5))
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=6, precisions=["fp32"])
    by = {c.label: c for c in dec.candidates}
    for name in ("colda", "coldb", "coldc"):
        c = by[f"{name}/fp32"]
        assert c.status == "ok" and c.init_us >= 2.5e6, c
        assert "prepared beside the other candidates" in c.reason and "checked and timed beside" not in c.reason
    assert by["cpu"].status == "ok" and "beside" not in by["cpu"].reason
    assert dec.final is True


def test_init_time_policy_with_overlapping_prepares_is_provisional(tmp_path, add_path, register_backend):
    """Init times taken side by side are upper bounds: a decision by init time on them is not final."""
    import numpy as np

    register_backend("gpua", fn=np.add)
    register_backend("gpub", fn=np.add)
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=10, precisions=["fp32"], policy="init_time")
    assert all(c.status == "ok" for c in dec.candidates)
    assert dec.final is False and "measured beside another candidate: gpua/fp32, gpub/fp32" in dec.reason


def test_a_late_prepare_that_never_ends_does_not_hold_up_one_that_does(tmp_path, add_path, register_backend,
                                                                          gate):
    """Late fp32 candidates are finished in the order their prepares end, not their list order."""
    import numpy as np

    register_backend("stuck", fn=np.add, prepare_gate=gate)  # never prepared within the budget
    register_backend("slowgpu", fn=np.add, prepare_gate=_Slow(2.5))
    register_backend("gpua", fn=np.add)
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=6, precisions=["fp32"])
    by = {c.label: c for c in dec.candidates}
    assert [c.label for c in dec.candidates] == ["cpu", "stuck/fp32", "slowgpu/fp32", "gpua/fp32"]
    assert by["slowgpu/fp32"].status == "ok", by["slowgpu/fp32"]
    assert by["gpua/fp32"].status == "ok" and by["cpu"].status == "ok"
    assert by["stuck/fp32"].status == "over_budget" and "stopped after" in by["stuck/fp32"].reason
    assert dec.final is False


def test_checks_longer_than_the_share_finish_but_leave_the_decision_provisional(tmp_path, add_path,
                                                                                  register_backend):
    """A candidate prepared in time whose checks outlive its share (a slow first run) is not cut: it
    finishes beside the next candidate, says so, and the decision is measured again next time."""
    import time

    import numpy as np

    calls = []

    def slow_first_add(a, b):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(4.5)
        return np.add(a, b)

    register_backend("slowcheck", fn=slow_first_add)
    register_backend("gpua", fn=np.add)
    register_backend("gpub", fn=np.add)
    # 10 s among 3 GPU candidates after cpu: slowcheck's share is about 3.2 s, its first run 4.5 s
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=10, precisions=["fp32"])
    by = {c.label: c for c in dec.candidates}
    assert by["slowcheck/fp32"].status == "ok", by["slowcheck/fp32"]
    assert "checked and timed beside another candidate" in by["slowcheck/fp32"].reason
    assert by["gpua/fp32"].status == "ok"
    # gpua and gpub were checked while slowcheck's checks went on: their numbers are upper bounds too
    assert "checked and timed beside another candidate" in by["gpua/fp32"].reason
    assert dec.final is False and "measured beside another candidate: gpua/fp32, gpub/fp32, slowcheck/fp32" in dec.reason


def test_load_without_configuration_does_not_measure(tmp_path, add_path, register_backend, caplog, monkeypatch):
    import logging

    import litegpu

    register_backend("wrongadd")  # the first available GPU backend: taken unmeasured, not chosen once measured
    monkeypatch.setenv("LITEGPU_CONFIG", str(_cfg(tmp_path, 3)))  # only the cache dir; measure_on_load false
    with caplog.at_level(logging.INFO, logger="litegpu"):
        it = litegpu.load(str(add_path))
    assert it.litegpu_backend == "wrongadd"
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "no measured decision cached" in text and "measuring" not in text
    assert not list((tmp_path / "cache").glob("autoselect-*"))
    # once `litegpu autoselect` has measured, load() takes its decision
    assert cli("autoselect", add_path, "--time-budget", "3").status == 0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="litegpu"):
        it = litegpu.load(str(add_path))
    assert it.litegpu_backend == "cpu"
    assert "backend auto -> cpu (cached decision" in "\n".join(r.getMessage() for r in caplog.records)


def test_load_probes_only_the_backend_it_takes(tmp_path, add_path, register_backend, monkeypatch):
    import litegpu
    import numpy as np

    probes: list[str] = []
    register_backend("gpua", fn=np.add, probes=probes)
    register_backend("gpub", fn=np.add, probes=probes)
    monkeypatch.setenv("LITEGPU_CONFIG", str(_cfg(tmp_path, 3)))
    assert litegpu.load(str(add_path)).litegpu_backend == "gpua"
    assert probes == ["gpua"]  # the first available GPU backend; gpub's driver is never probed
    dec = autoselect(str(add_path))  # probes all (the whole key), then stores
    from litegpu._plugins import backend_registry

    for e in backend_registry().entries.values():  # a new process, as far as probing goes
        e.availability = None
    probes.clear()
    assert litegpu.load(str(add_path)).litegpu_backend == dec.backend
    assert probes == ([] if dec.backend == "cpu" else [dec.backend])


def test_resolve_auto_finds_this_models_decision_in_the_store(tmp_path, add_path, mlp_path, register_backend, gate):
    """load()'s lookup reads the ``autoselect-*.lgc`` entries (named by the whole key's hash) by the
    model fingerprint in their key: a provisional decision is taken, another model's never."""
    import numpy as np
    from litegpu._autoselect import resolve_auto

    register_backend("slowgpu", fn=np.add, prepare_gate=gate)
    cfg = _cfg(tmp_path, 1.0)
    other = autoselect(str(mlp_path), config=str(cfg), backends=["cpu"])  # a single candidate: not stored
    assert other.path is None and resolve_auto(str(mlp_path), str(cfg)) is None
    dec = autoselect(str(add_path), config=str(cfg))  # slowgpu cut by the budget: provisional
    assert dec.final is False and Path(dec.path).name.startswith("autoselect-")
    got = resolve_auto(str(add_path), str(cfg))
    assert got is not None and got.cached and got.final is False and got.path == dec.path
    assert got.measured_at == dec.measured_at and _stored(got.path)["final"] is False
    assert resolve_auto(str(mlp_path), str(cfg)) is None  # add's decision is not mlp's
    gate.set()
    final = autoselect(str(add_path), config=str(cfg), time_budget_s=5.0)  # provisional: measured again
    assert not final.cached and final.final and final.path == dec.path  # same key, same entry
    assert resolve_auto(str(add_path), str(cfg)).final is True


def test_budget_counts_from_the_process_start_in_the_cli(tmp_path, add_path, register_backend, gate):
    """``litegpu autoselect --budget S`` ends within S wall: the CLI passes its process's start, so the
    imports count.  A start 1 s ago with a 1 s budget leaves nothing to measure."""
    import time

    import numpy as np
    from litegpu.cli._autoselect import process_started

    started = process_started()
    assert 0 <= time.perf_counter() - started < 3600  # this process's age (or 0 off Linux)
    register_backend("slowgpu", fn=np.add, prepare_gate=gate)
    dec = autoselect(str(add_path), cache_dir=tmp_path, time_budget_s=1.0, started=time.perf_counter() - 1.0)
    assert dec.final is False and all(c.status == "over_budget" for c in dec.candidates if c.status != "unavailable")


def test_cli_hands_the_cut_fp32_candidates_to_a_background_prepare(tmp_path, add_path, register_backend, gate,
                                                                    monkeypatch, caplog):
    """``litegpu autoselect`` passes the fp32 candidates its budget cut (their prepare unfinished) to
    :func:`litegpu._autoselect_prepare.spawn` and says so at WARNING; ``--no-background`` does not."""
    import logging

    import litegpu._autoselect_prepare as prep
    import litegpu.cli._autoselect as cli_autoselect
    import numpy as np

    register_backend("slowgpu", fn=np.add, prepare_gate=gate)  # its prepare never ends until the gate opens
    seen: list = []

    class _Proc:
        pid = 4242

    monkeypatch.setattr(prep, "spawn", lambda path, cands, config: seen.append((path, [c.label for c in cands],
                                                                                 config)) or _Proc())
    monkeypatch.setattr(cli_autoselect, "abandoned_workers", list)  # no os._exit inside pytest
    try:
        with caplog.at_level(logging.WARNING, logger="litegpu"):
            r = cli("autoselect", add_path, "--cache-dir", tmp_path / "c", "--time-budget", "1")
    finally:
        gate.set()
    assert r.status == 0, r
    assert seen == [(str(add_path), ["slowgpu/fp32"], None)]
    assert any("preparing slowgpu/fp32 in a background process (pid 4242" in m.getMessage() for m in caplog.records)
    seen.clear()
    r = cli("autoselect", add_path, "--cache-dir", tmp_path / "d", "--time-budget", "1", "--no-background", "--force")
    assert r.status == 0 and seen == []


def test_background_prepare_leaves_the_compiled_entry_in_the_cache(tmp_path, add_path, monkeypatch):
    """The background process prepares a candidate as the measurement does (same configuration, so the
    same delegate cache): afterwards the backend's compiled entry is in the configured cache folder."""
    import litegpu
    from litegpu._autoselect import Candidate
    from litegpu._autoselect_prepare import spawn
    from litegpu._plugins import reset_plugins

    monkeypatch.setenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD", "0")  # the installed opencl backend, here and in the child
    # delegates take their cache from the configuration (as in the measuring process): LITEGPU_CONFIG's
    monkeypatch.setenv("LITEGPU_CONFIG", str(_cfg(tmp_path, 2)))
    reset_plugins()
    info = {b.name: b for b in litegpu.available_backends()}.get("opencl")
    if info is None or not info.available:
        pytest.skip(f"opencl unavailable here: {getattr(info, 'reason', 'not installed')}")
    cache = tmp_path / "cache"
    proc = spawn(str(add_path), [Candidate("opencl", "fp32", {})])
    assert proc is not None and proc.wait(timeout=300) == 0
    assert list(cache.glob("opencl-*.lgc")), sorted(p.name for p in cache.glob("*"))


def test_command_ends_without_waiting_for_threads_or_drivers_but_runs_exit_handlers(tmp_path, add_path):
    """``litegpu autoselect`` as a command ends once the decision is printed: a thread still inside a
    (here simulated) driver call does not hold it, and the exit handlers registered by libraries
    (``atexit``) still run, its output is complete."""
    import time

    marker = tmp_path / "atexit-ran"
    script = textwrap.dedent(f"""
        import atexit, sys, threading, time
        atexit.register(lambda: open({str(marker)!r}, "w").write("ran"))
        threading.Thread(target=time.sleep, args=(120,), daemon=False).start()  # an abandoned driver call
        sys.argv = ["litegpu", "autoselect", {str(add_path)!r}, "--cache-dir", {str(tmp_path / "c")!r},
                    "--time-budget", "5"]
        from litegpu.cli import main
        sys.exit(main())
    """)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    assert time.perf_counter() - t0 < 60  # not the 120 s thread
    assert "add.tflite: backend " in r.stdout and "CANDIDATE" in r.stdout
    assert marker.read_text() == "ran"
