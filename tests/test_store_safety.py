"""One private, safe store (issue 19 item 3): the auto-selection decisions are entries of the
serialization cache, in ``cache.dir`` itself, with the cache's rules; entries others can write are
refused."""

from __future__ import annotations

import logging
import os
import stat

import pytest
from litegpu._autoselect import Decision, _decision_store, _read_decision, _write_decision, list_decisions
from litegpu.cache import DelegateCache, EntryKey

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX modes and owners")

FP = "ab" * 32


def _decision(backend: str = "opencl") -> Decision:
    return Decision(backend=backend, precision="fp16", options={}, policy="latency", reason="fastest",
                    fingerprint=FP, key="k1", measured_at="2026-01-01T00:00:00", measure_s=1.0,
                    settings={}, environment={}, candidates=[])


def _mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_decisions_live_in_cache_dir_privately(tmp_path):
    d = tmp_path / "cache"
    store = _decision_store({"cache": {"dir": str(d)}})
    _write_decision(store, _decision())
    files = os.listdir(d)
    assert len(files) == 1 and files[0].startswith("autoselect-") and files[0].endswith(".lgc")
    assert _mode(d) == 0o700 and _mode(d / files[0]) == 0o600
    dec = _read_decision(store, FP, "k1")
    assert dec is not None and dec.backend == "opencl" and dec.cached
    assert [r["backend"] for r in list_decisions(cache_dir=d)] == ["opencl"]
    # one folder: the compiled-delegate cache of the same cache.dir is that folder
    assert DelegateCache(str(d)).dir == d


def test_decision_in_a_folder_others_can_write_is_not_used(tmp_path, caplog):
    d = tmp_path / "cache"
    store = _decision_store(None, d)
    _write_decision(store, _decision())
    os.chmod(d, 0o777)
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert _read_decision(_decision_store(None, d), FP, "k1") is None
    assert "writable by its group or by others" in caplog.text
    _write_decision(_decision_store(None, d), _decision("vulkan"))  # nor written there
    os.chmod(d, 0o700)
    assert _read_decision(_decision_store(None, d), FP, "k1").backend == "opencl"


def test_decision_symlink_is_not_followed(tmp_path, caplog):
    d = tmp_path / "cache"
    store = _decision_store(None, d)
    _write_decision(store, _decision())
    entry = next(d.iterdir())
    planted = tmp_path / "planted.lgc"
    entry.rename(planted)
    entry.symlink_to(planted)
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert _read_decision(store, FP, "k1") is None
    assert "symbolic link" in caplog.text
    victim = tmp_path / "victim"
    victim.write_text("precious")
    entry.unlink()
    entry.symlink_to(victim)
    _write_decision(store, _decision("vulkan"))  # replaces the link itself, never writes through it
    assert victim.read_text() == "precious" and not entry.is_symlink()


def test_decision_temp_names_are_unpredictable(tmp_path):
    """The old store wrote ``<name>.json.tmp<pid>``: a symlink planted there was written through."""
    d = tmp_path / "cache"
    store = _decision_store(None, d)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    key_path = store.path_for(EntryKey(model_token=f"sha256:{FP}", backend="autoselect", backend_version="1",
                                       device="", driver_version="", options={"key": "k1"}))
    d.mkdir(mode=0o700)
    for name in (key_path.name + f".tmp{os.getpid()}", f".{key_path.name}.{os.getpid()}.tmp"):
        (d / name).symlink_to(victim)
    _write_decision(store, _decision())
    assert victim.read_text() == "precious"
    assert _read_decision(store, FP, "k1").backend == "opencl"


def test_decision_edited_by_another_writer_mode_is_refused(tmp_path, caplog):
    d = tmp_path / "cache"
    store = _decision_store(None, d)
    _write_decision(store, _decision())
    entry = next(d.iterdir())
    os.chmod(entry, 0o666)
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert _read_decision(store, FP, "k1") is None
    assert "writable by its group or by others" in caplog.text


def test_cache_refuses_a_0666_entry_in_its_0700_folder(tmp_path, caplog):
    """Before issue 19 the compiled-delegate cache loaded a group/world-writable entry."""
    cache = DelegateCache(tmp_path / "c")
    key = EntryKey(model_token="user:m", backend="opencl", backend_version="1", device="d", driver_version="1")
    path = cache.store(key, {"code": b"kernel"})
    assert cache.load(key) == {"code": b"kernel"}
    os.chmod(path, 0o666)
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert cache.load(key) is None
    assert "writable by its group or by others" in caplog.text
    os.chmod(path, 0o644)  # readable by others is not a risk to us
    assert cache.load(key) == {"code": b"kernel"}


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="chown to another user needs root")
def test_decision_owned_by_another_user_is_refused(tmp_path, caplog):
    d = tmp_path / "cache"
    store = _decision_store(None, d)
    _write_decision(store, _decision())
    entry = next(d.iterdir())
    os.chown(entry, 12345, 12345)
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert _read_decision(store, FP, "k1") is None
    assert "owned by uid 12345" in caplog.text
