"""The serialization cache: round trips, keys, damaged files, unsafe directories, concurrency, eviction.

Every damaged or refused case must give a miss (never sections, never an exception) with a warning on
the ``litegpu.cache`` logger, and the next store must leave a valid entry again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import multiprocessing
import os
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from litegpu import PartitionSpec, read_model
from litegpu.cache import (
    FORMAT_VERSION,
    DelegateCache,
    EntryKey,
    _format,
    _keys,
    cache_clear,
    cache_info,
    cache_list,
    canonical_json,
    model_token,
    partition_signature,
)
from litegpu.testing import ModelBuilder

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"program": b"__kernel void f() {}", "binary": bytes(range(7)), "empty": b""}


def make_key(**over) -> EntryKey:
    fields = dict(
        model_token="fh64:0123456789abcdef", backend="opencl", backend_version="0.1.0",
        device="Test GPU", driver_version="1.2.3",
        options={"precision": "fp16", "tuning": "fast", "quant_sim": False},
        partition={"subgraph": 0, "nodes": [0, 1, 2], "tensors": {"0": ["float32", [1, 8, 8, 3]]}},
        litegpu_version="0.1.0",
    )
    fields.update(over)
    return EntryKey(**fields)


@pytest.fixture
def cache(tmp_path) -> DelegateCache:
    return DelegateCache(tmp_path / "c", max_bytes=1 << 20)


def entry_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith(".lgc"))


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "litegpu.cache" and r.levelno == logging.WARNING]


# ----------------------------------------------------------------------------------------------------
# model token


def test_model_token_is_farmhash_fingerprint64():
    farmhash = pytest.importorskip("farmhash")
    # Fingerprint64 of the empty string is farmhash's constant k2 (an algorithm fact, not our output).
    assert model_token(b"") == "fh64:9ae16a3b2f90404f"
    data = b"model bytes \x00\x01"
    assert model_token(data) == f"fh64:{farmhash.fingerprint64(data):016x}"


def test_model_token_inputs_agree(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    y = b.tensor("y", (1, 4), "float32")
    b.op("RELU", [x], [y])
    b.output(y)
    data = b.build()
    p = tmp_path / "m.tflite"
    p.write_bytes(data)
    tok = model_token(data)
    assert tok == model_token(bytearray(data)) == model_token(memoryview(data)) == model_token(p)
    assert tok == model_token(str(p)) == model_token(read_model(p)) == model_token(read_model(data))
    assert model_token(data + b"\x00") != tok
    assert model_token(data, token="face-v3") == "user:face-v3"
    with pytest.raises(TypeError):
        model_token(data, token="")


def test_model_token_fallback_without_farmhash(monkeypatch):
    monkeypatch.setattr(_keys, "_farmhash", None)
    assert model_token(b"abc") == "b2b64:" + hashlib.blake2b(b"abc", digest_size=8).hexdigest()


# ----------------------------------------------------------------------------------------------------
# keys


def test_key_is_canonical():
    a = make_key(options={"b": 1, "a": [1, 2]}, partition={"nodes": (0, 1)})
    b = make_key(options={"a": (1, 2), "b": np.int64(1)}, partition={"nodes": [np.int32(0), 1]})
    assert a == b and a.digest == b.digest and hash(a) == hash(b)
    assert "precision" not in a.describe() and "nodes 0-1 (2 ops)" in a.describe()
    d = make_key().describe()
    for word in ("opencl", "0.1.0", "Test GPU", "1.2.3", "fh64:0123456789abcdef", "precision=fp16", "0-2"):
        assert word in d
    with pytest.raises(TypeError):
        make_key(options={"x": object()})
    with pytest.raises(TypeError, match=r"cache key: key\.options\.x\[1\]\.y has a value of type object"):
        make_key(options={"x": [1, {"y": object()}]})  # the place is named (built only for the error)
    with pytest.raises(TypeError):
        make_key(options={1: "non-string key"})
    assert canonical_json({"b": 1.0, "a": float("nan")}) == '{"a":{"float":"nan"},"b":1.0}'


# Each variation changes exactly one input of the key.
KEY_VARIATIONS = {
    "model_token": dict(model_token="fh64:0123456789abcdee"),
    "backend": dict(backend="vulkan"),
    "backend_version": dict(backend_version="0.1.1"),
    "device": dict(device="Other GPU"),
    "driver_version": dict(driver_version="1.2.4"),
    "litegpu_version": dict(litegpu_version="0.2.0"),
    "code": dict(code="0123456789abcdef"),
    "option_value": dict(options={"precision": "fp32", "tuning": "fast", "quant_sim": False}),
    "option_bool": dict(options={"precision": "fp16", "tuning": "fast", "quant_sim": True}),
    "option_added": dict(options={"precision": "fp16", "tuning": "fast", "quant_sim": False, "wg": [8, 8]}),
    "option_removed": dict(options={"precision": "fp16", "tuning": "fast"}),
    "option_int_vs_float": dict(options={"precision": "fp16", "tuning": "fast", "quant_sim": 0}),
    "partition_nodes": dict(partition={"subgraph": 0, "nodes": [0, 1, 3], "tensors": {"0": ["float32", [1, 8, 8, 3]]}}),
    "partition_subgraph": dict(partition={"subgraph": 1, "nodes": [0, 1, 2], "tensors": {"0": ["float32", [1, 8, 8, 3]]}}),
    "partition_shape": dict(partition={"subgraph": 0, "nodes": [0, 1, 2], "tensors": {"0": ["float32", [2, 8, 8, 3]]}}),
    "partition_dtype": dict(partition={"subgraph": 0, "nodes": [0, 1, 2], "tensors": {"0": ["float16", [1, 8, 8, 3]]}}),
}


@pytest.mark.parametrize("field", sorted(KEY_VARIATIONS))
def test_any_key_change_gives_a_new_entry(cache, field):
    base = make_key()
    other = make_key(**KEY_VARIATIONS[field])
    assert other != base and other.digest != base.digest
    assert cache.store(base, {"p": b"base"}) is not None
    assert cache.load(other) is None  # never the entry of the other key
    assert cache.store(other, {"p": b"other"}) is not None
    assert len(entry_files(cache.dir)) == 2
    assert cache.load(base) == {"p": b"base"} and cache.load(other) == {"p": b"other"}


def test_every_entrykey_field_is_covered():
    # model_name is a label for `cache list`, deliberately not part of the key (checked below)
    names = {f.name for f in dataclasses.fields(EntryKey)} - {"model_name"}
    named = make_key(model_name="other.tflite")
    assert named == make_key() and named.digest == make_key().digest
    covered = {k.split("_")[0] if k.startswith(("option", "partition")) else k for k in KEY_VARIATIONS}
    covered = {"options" if c == "option" else c for c in covered}
    assert names == covered


def _spec(model, shape=None, host_outputs=None):
    sg = model.main
    tensors = {t.index: t for t in sg.tensors}
    if shape is not None:
        tensors = {i: dataclasses.replace(t, shape=shape) if not t.is_constant else t for i, t in tensors.items()}
    out = sg.outputs
    return PartitionSpec(sg, model, (0, 1), tuple(sg.inputs), tuple(out),
                         frozenset(out if host_outputs is None else host_outputs), tensors)


def test_partition_signature_from_spec():
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    h = b.tensor("h", (1, 4), "float32")
    y = b.tensor("y", (1, 4), "float32")
    b.op("RELU", [x], [h])
    b.op("TANH", [h], [y])
    b.output(y)
    model = read_model(b.build())
    sig = partition_signature(_spec(model))
    assert sig["nodes"] == [0, 1] and sig["ops"] == ["RELU/1", "TANH/1"]
    assert sig["tensors"][str(x)] == ["float32", [1, 4]]
    tok = model_token(model)
    keys = [make_key(model_token=tok, partition=_spec(model)),
            make_key(model_token=tok, partition=_spec(model, shape=(2, 4))),  # after resize_tensor_input
            make_key(model_token=tok, partition=_spec(model, host_outputs=()))]
    assert len({k.digest for k in keys}) == 3
    assert make_key(model_token=tok, partition=_spec(model)) == make_key(model_token=tok, partition=sig)


# ----------------------------------------------------------------------------------------------------
# round trip, stats, listing


def test_round_trip_and_stats(cache):
    key = make_key()
    assert cache.load(key) is None
    assert not cache.dir.exists()  # a read never creates the directory
    big = np.random.default_rng(0).bytes(100_000)
    sections = {**SECTIONS, "big": big, "naïve ünïcode": bytearray(b"x"), "view": memoryview(b"abc")}
    path = cache.store(key, sections)
    assert path == cache.path_for(key) and path.is_file()
    got = cache.load(key)
    assert got == {k: bytes(v) for k, v in sections.items()}
    assert list(got) == list(sections)  # order kept
    assert cache.store(make_key(backend="vulkan"), {}) is not None
    assert cache.load(make_key(backend="vulkan")) == {}
    s = cache.stats
    assert (s.hits, s.misses, s.stores, s.invalid) == (2, 1, 2, 0)
    assert s.bytes_read == s.bytes_written == sum(p.stat().st_size for p in entry_files(cache.dir))
    info = cache.info()
    assert info["entries"] == 2 and info["backends"] == {"opencl": 1, "vulkan": 1} and info["enabled"]
    ents = cache.entries(verify=True)
    assert {e.backend for e in ents} == {"opencl", "vulkan"} and all(e.valid for e in ents)
    e = next(e for e in ents if e.backend == "opencl")
    assert e.key_digest == key.digest and e.description == key.describe() and e.sections["big"] == len(big)
    assert e.created is not None and e.size == path.stat().st_size


def test_file_layout_is_as_documented(cache):
    path = cache.store(make_key(), SECTIONS)
    raw = path.read_bytes()
    magic, version, flags, hlen = struct.unpack_from("<8sHHI", raw)
    assert magic == b"\x89LGC\r\n\x1a\n" and version == FORMAT_VERSION == 3 and flags == 0
    head = json.loads(raw[16:16 + hlen])
    data_start = (16 + hlen + 15) // 16 * 16
    assert len(raw) == data_start + head["data_size"] + 32
    import farmhash  # the checksum: farmhash Fingerprint64 of every byte before it, then 24 zero bytes

    assert raw[-32:] == struct.pack("<Q", farmhash.fingerprint64(raw[:-32])) + bytes(24)
    for s in head["sections"]:
        assert s["offset"] % 16 == 0
        assert raw[data_start + s["offset"]: data_start + s["offset"] + s["size"]] == SECTIONS[s["name"]]
    assert head["key"] == make_key().canonical() and head["format"] == "litegpu-delegate-cache"


def test_disabled_cache_does_nothing(tmp_path):
    c = DelegateCache(tmp_path / "off", enabled=False)
    assert c.store(make_key(), SECTIONS) is None and c.load(make_key()) is None
    assert not (tmp_path / "off").exists()
    assert c.info()["enabled"] is False and c.info()["reason"] == "disabled by configuration"


def test_bad_sections_are_a_backend_bug(cache):
    with pytest.raises(TypeError):
        cache.store(make_key(), {"p": "not bytes"})
    with pytest.raises(TypeError):
        cache.store(make_key(), {"": b""})
    with pytest.raises(TypeError):
        cache.load("not a key")


# ----------------------------------------------------------------------------------------------------
# damaged entries: each a miss with a warning, then rewritten by the next store


def _assert_miss_then_rewrite(cache, key, caplog, expect: str | None = None):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert cache.load(key) is None
    msgs = warnings_of(caplog)
    assert len(msgs) == 1, msgs
    if expect:
        assert expect in msgs[0], msgs[0]
    assert cache.store(key, SECTIONS) is not None
    assert cache.load(key) == SECTIONS


def test_bit_flip_at_every_byte_is_detected(cache, caplog):
    key = make_key()
    path = cache.store(key, SECTIONS)
    good = path.read_bytes()
    misses = 0
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        for i in range(len(good)):
            bad = bytearray(good)
            bad[i] ^= 1 << (i % 8)
            path.write_bytes(bad)
            assert cache.load(key) is None, f"flip at byte {i} went unnoticed"
            misses += 1
    assert len(warnings_of(caplog)) == misses == len(good) > 500
    assert cache.stats.invalid == misses and cache.stats.hits == 0
    assert cache.store(key, SECTIONS) is not None and cache.load(key) == SECTIONS


def test_truncation_at_every_length_is_detected(cache, caplog):
    key = make_key()
    path = cache.store(key, SECTIONS)
    good = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        for n in range(len(good)):
            path.write_bytes(good[:n])
            assert cache.load(key) is None, f"truncation to {n} bytes went unnoticed"
            assert cache.entries(verify=True)[0].valid is False
        path.write_bytes(good + b"\x00")
        assert cache.load(key) is None
    assert len(warnings_of(caplog)) == len(good) + 1
    assert cache.store(key, SECTIONS) is not None and cache.load(key) == SECTIONS


def _reseal(raw: bytes) -> bytes:
    """Recompute the checksum so that only the deliberate change is wrong."""
    import farmhash

    body = raw[:-32]
    return body + struct.pack("<Q", farmhash.fingerprint64(body)) + bytes(24)


def _with_header(raw: bytes, edit) -> bytes:
    """Rewrite the header JSON through ``edit`` keeping the data area where it was, then reseal."""
    hlen = struct.unpack_from("<I", raw, 12)[0]
    data_start = (16 + hlen + 15) // 16 * 16
    head = json.loads(raw[16:16 + hlen])
    new = edit(head)
    hj = new if isinstance(new, bytes) else json.dumps(new).encode()
    pad = bytes((16 + len(hj) + 15) // 16 * 16 - 16 - len(hj))
    return _reseal(raw[:12] + struct.pack("<I", len(hj)) + hj + pad + raw[data_start:])


def _edit(**changes):
    def f(head):
        head.update(changes)
        return head
    return f


DAMAGE = {
    "version_bump": (lambda r: _reseal(r[:8] + struct.pack("<H", FORMAT_VERSION + 1) + r[10:]), "format version 4"),
    "version_2": (lambda r: _reseal(r[:8] + struct.pack("<H", 2) + r[10:]), "format version 2"),
    "version_zero": (lambda r: _reseal(r[:8] + struct.pack("<H", 0) + r[10:]), "format version 0"),
    "wrong_magic": (lambda r: _reseal(b"\x89LGD\r\n\x1a\n" + r[8:]), "bad magic"),
    "flags_set": (lambda r: _reseal(r[:10] + struct.pack("<H", 2) + r[12:]), "flags"),
    "sha256_flag_on_a_farmhash_entry": (lambda r: _reseal(r[:10] + struct.pack("<H", 1) + r[12:]), "checksum"),
    "huge_header_len": (lambda r: _reseal(r[:12] + struct.pack("<I", 0xFFFFFFF0) + r[16:]), "header length"),
    "empty_file": (lambda r: b"", "truncated"),
    "png_file": (lambda r: b"\x89PNG\r\n\x1a\n" + bytes(100), "bad magic"),
    "text_file": (lambda r: b"hello, this is not a cache entry\n" * 10, "bad magic"),
    "zeros": (lambda r: bytes(len(r)), "bad magic"),
    "header_not_json": (lambda r: _with_header(r, lambda h: b"{not json"), "not JSON"),
    "header_not_object": (lambda r: _with_header(r, lambda h: [1, 2]), "not a litegpu cache header"),
    "header_bad_utf8": (lambda r: _with_header(r, lambda h: b'{"a":"\xff"}'), "not JSON"),
    "header_other_format": (lambda r: _with_header(r, _edit(format="other")), "not a litegpu cache header"),
    "header_no_key": (lambda r: _with_header(r, _edit(key=None)), "no key"),
    "header_deep_json": (lambda r: _with_header(r, lambda h: b"[" * 100000 + b"]" * 100000), "not JSON"),
    "sections_overlap": (lambda r: _with_header(r, lambda h: {**h, "sections": [
        {"name": "a", "offset": 0, "size": 20}, {"name": "b", "offset": 16, "size": 4}]}), "section table"),
    "sections_past_end": (lambda r: _with_header(r, lambda h: {**h, "sections": [
        {"name": "a", "offset": 0, "size": 10 ** 9}]}), "section table"),
    "sections_negative": (lambda r: _with_header(r, lambda h: {**h, "sections": [
        {"name": "a", "offset": 0, "size": -1}]}), "section table"),
    "sections_duplicate": (lambda r: _with_header(r, lambda h: {**h, "sections": [
        {"name": "a", "offset": 0, "size": 1}, {"name": "a", "offset": 16, "size": 1}]}), "section table"),
    "sections_unaligned": (lambda r: _with_header(r, lambda h: {**h, "sections": [
        {"name": "a", "offset": 3, "size": 1}]}), "section table"),
    "sections_float_size": (lambda r: _with_header(r, lambda h: {**h, "sections": [
        {"name": "a", "offset": 0, "size": 1.0}]}), "section table"),
    "sections_not_list": (lambda r: _with_header(r, _edit(sections={"a": 1})), "section table"),
    "data_size_wrong": (lambda r: _with_header(r, lambda h: {**h, "data_size": h["data_size"] + 1}), "section table"),
    "other_key_digest": (lambda r: _with_header(r, _edit(key_digest="0" * 64)), "another key"),
    "other_key_fields": (lambda r: _with_header(r, lambda h: {**h, "key": {**h["key"], "device": "X"}}),
                         "another key"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_entry_is_a_miss_and_rewritten(cache, caplog, case):
    damage, expect = DAMAGE[case]
    key = make_key()
    path = cache.store(key, SECTIONS)
    path.write_bytes(damage(path.read_bytes()))
    _assert_miss_then_rewrite(cache, key, caplog, expect)
    listing = cache.entries()
    assert len(listing) == 1 and listing[0].valid


def test_damaged_entries_listed_as_invalid(cache):
    key = make_key()
    path = cache.store(key, SECTIONS)
    for case in ("wrong_magic", "header_not_json", "sections_not_list", "header_deep_json"):
        path.write_bytes(DAMAGE[case][0](path.read_bytes()))
        (e,) = cache.entries()
        assert not e.valid and e.problem, case
        cache.store(key, SECTIONS)
    assert cache_list(cache.dir, out=io.StringIO()) == 0


def test_entry_of_another_key_copied_in_is_refused(cache, caplog):
    a, b = make_key(), make_key(device="Other GPU")
    pa = cache.store(a, {"p": b"for a"})
    cache.path_for(b).write_bytes(pa.read_bytes())
    _assert_miss_then_rewrite(cache, b, caplog, "another key")


def test_directory_symlink_or_foreign_owner_at_entry_path(cache, caplog, tmp_path):
    key = make_key()
    cache.store(make_key(device="x"), SECTIONS)  # creates the directory
    path = cache.path_for(key)
    path.mkdir()
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert cache.load(key) is None
        assert cache.store(key, SECTIONS) is None  # os.replace cannot replace a directory: a warning
    assert len(warnings_of(caplog)) == 2 and not list(cache.dir.glob(".*.tmp"))
    path.rmdir()
    target = tmp_path / "elsewhere.lgc"
    target.write_bytes(cache.store(make_key(device="y"), SECTIONS).read_bytes())
    path.symlink_to(target)
    _assert_miss_then_rewrite(cache, key, caplog, "symbolic link")
    assert not path.is_symlink()
    if os.getuid() == 0:  # an entry file planted by another user (while the directory was open, say)
        os.chown(path, 4242, -1)
        _assert_miss_then_rewrite(cache, key, caplog, "owned by uid 4242")


def test_oversized_file_is_not_read(tmp_path, caplog):
    c = DelegateCache(tmp_path / "c", max_bytes=4096)
    key = make_key()
    path = c.store(key, SECTIONS)
    path.write_bytes(path.read_bytes() + bytes(8192))
    _assert_miss_then_rewrite(c, key, caplog, "larger")


# ----------------------------------------------------------------------------------------------------
# directory safety


def _make_group_writable(d: Path):
    d.chmod(0o770)


def _make_world_writable(d: Path):
    d.chmod(0o777)


def _make_sticky_world_writable(d: Path):
    d.chmod(0o1777)


def _make_foreign_owned(d: Path):
    if os.getuid() != 0:
        pytest.skip("chown to another user needs root (see the getuid variant)")
    os.chown(d, 4242, -1)


@pytest.mark.parametrize("spoil,expect", [
    (_make_group_writable, "writable by its group"),
    (_make_world_writable, "writable by its group or by others"),
    (_make_sticky_world_writable, "writable by its group or by others"),
    (_make_foreign_owned, "owned by uid 4242"),
])
def test_unsafe_directory_turns_caching_off(tmp_path, caplog, spoil, expect):
    d = tmp_path / "c"
    c = DelegateCache(d)
    key = make_key()
    assert c.store(key, SECTIONS) is not None
    spoil(d)
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert c.load(key) is None
        assert c.store(make_key(device="new"), SECTIONS) is None
        assert c.entries() == [] and c.clear() == 0 and c.remove(key) is False
    msgs = warnings_of(caplog)
    assert len(msgs) == 1 and expect in msgs[0] and "caching is off" in msgs[0]  # warned once, not per call
    assert len(entry_files(d)) == 1  # nothing written, nothing removed
    assert c.info()["enabled"] is False and expect in c.info()["reason"]
    assert cache_clear(d, out=io.StringIO()) == 1
    # fixed by the user: caching is back, the entry is written again
    os.chown(d, os.getuid(), -1)
    d.chmod(0o700)
    assert c.load(key) == SECTIONS
    assert c.store(make_key(device="new"), SECTIONS) is not None and len(entry_files(d)) == 2


def test_directory_of_another_user_via_getuid(tmp_path, caplog, monkeypatch):
    d = tmp_path / "c"
    c = DelegateCache(d)
    c.store(make_key(), SECTIONS)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(d).st_uid + 1)
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert c.load(make_key()) is None and c.store(make_key(), SECTIONS) is None
    assert "not by the current user" in warnings_of(caplog)[0]
    monkeypatch.undo()
    assert c.load(make_key()) == SECTIONS


def test_directory_that_is_a_file_or_cannot_be_made(tmp_path, caplog):
    f = tmp_path / "file"
    f.write_text("x")
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert DelegateCache(f).store(make_key(), SECTIONS) is None
        assert DelegateCache(f / "sub").store(make_key(), SECTIONS) is None
        if Path("/proc/self").is_dir():  # mkdir is refused there even for root
            assert DelegateCache("/proc/litegpu-cache-test/c").store(make_key(), SECTIONS) is None
    msgs = warnings_of(caplog)
    assert "not a directory" in msgs[0] and "Not a directory" in msgs[1]
    assert all("cannot create" in m for m in msgs[2:])


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_modes_are_0700_and_0600(tmp_path, umask):
    old = os.umask(umask)
    try:
        d = tmp_path / "a" / "b" / "cache"
        path = DelegateCache(d).store(make_key(), SECTIONS)
    finally:
        os.umask(old)
    for p in (d, d.parent, d.parent.parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_uid == os.getuid()


def test_default_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("LITEGPU_CACHE_DIR", raising=False)  # the test suite sets it (conftest.py)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    c = DelegateCache()
    assert c.dir == tmp_path / "xdg" / "litegpu" / "delegates"
    assert c.store(make_key(), SECTIONS).parent == c.dir
    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path / "env"))
    assert DelegateCache().dir == tmp_path / "env"


def test_source_fingerprint_follows_the_code(monkeypatch, tmp_path):
    """An edit to litegpu's or a backend's source gives other keys, though the version is the same."""
    from litegpu.cache import _keys

    pkg = tmp_path / "fakebackend_fp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.lgk").write_text("x = 1")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_keys, "_source_hashes", {})
    before = _keys.source_fingerprint("fakebackend_fp._delegate")
    assert before != _keys.source_fingerprint() and len(before) == 16
    (pkg / "kernels.lgk").write_text("x = 2")
    assert _keys.source_fingerprint("fakebackend_fp._delegate") == before  # computed once per process
    monkeypatch.setattr(_keys, "_source_hashes", {})
    after = _keys.source_fingerprint("fakebackend_fp._delegate")
    assert after != before
    assert make_key(code=before).digest != make_key(code=after).digest


def test_source_fingerprint_of_an_installed_wheel_reads_its_record(monkeypatch, tmp_path):
    """An installed package is fingerprinted by the source hashes its RECORD lists: another hash of
    a source file changes it, an installer's own lines (bytecode, INSTALLER) do not."""
    from litegpu.cache import _keys

    pkg = tmp_path / "fakewheel_fp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    record = tmp_path / "fakewheel_fp-1.0.dist-info" / "RECORD"
    record.parent.mkdir()
    lines = ["fakewheel_fp/__init__.py,sha256=AAAA,0", "fakewheel_fp/k.lgk,sha256=BBBB,3"]
    record.write_text("\n".join(lines + ["fakewheel_fp-1.0.dist-info/INSTALLER,sha256=CCCC,4"]))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_keys, "_source_hashes", {})
    first = _keys.source_fingerprint("fakewheel_fp.x")
    record.write_text("\n".join(lines + ["fakewheel_fp/__pycache__/x.cpython-312.pyc,,"]))
    monkeypatch.setattr(_keys, "_source_hashes", {})
    assert _keys.source_fingerprint("fakewheel_fp.x") == first
    record.write_text("\n".join([lines[0], "fakewheel_fp/k.lgk,sha256=DDDD,3"]))
    monkeypatch.setattr(_keys, "_source_hashes", {})
    assert _keys.source_fingerprint("fakewheel_fp.x") != first


# ----------------------------------------------------------------------------------------------------
# concurrency


BIG = {"a": np.random.default_rng(1).bytes(3 << 20), "b": np.random.default_rng(2).bytes(1 << 20)}


def _writer(d, barrier, rounds, q):
    try:
        c = DelegateCache(d, max_bytes=None)
        key = make_key()
        ok = 0
        for _ in range(rounds):
            barrier.wait(timeout=60)
            ok += c.store(key, BIG) is not None
        q.put(("writer", ok, c.stats.store_failures))
    except Exception as e:  # pragma: no cover - reported to the parent
        q.put(("error", repr(e), 0))


def _reader(d, rounds, q):
    try:
        c = DelegateCache(d, max_bytes=None)
        key = make_key()
        seen = bad = 0
        deadline = time.monotonic() + 20
        while seen < rounds * 3 and time.monotonic() < deadline:
            got = c.load(key)
            if got is not None:
                seen += 1
                bad += got != BIG
        q.put(("reader", seen, bad + c.stats.invalid))
    except Exception as e:  # pragma: no cover
        q.put(("error", repr(e), 0))


def test_two_processes_store_the_same_entry_at_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    d = tmp_path / "c"
    rounds = 4
    barrier = ctx.Barrier(3)
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(d, barrier, rounds, q)) for _ in range(2)]
    # the reader keeps loading while the writers keep replacing the entry
    procs.append(ctx.Process(target=_reader, args=(d, rounds, q)))
    for p in procs:
        p.start()
    for _ in range(rounds):
        barrier.wait(timeout=60)
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(r[0] != "error" for r in results), results
    writers = [r for r in results if r[0] == "writer"]
    assert writers == [("writer", rounds, 0)] * 2  # every store of both processes succeeded
    reader = next(r for r in results if r[0] == "reader")
    assert reader[1] > 0 and reader[2] == 0  # a reader never saw a partial or corrupt entry
    names = sorted(p.name for p in d.iterdir())
    assert names == [DelegateCache(d).path_for(make_key()).name]  # one entry, no temp files
    assert DelegateCache(d).load(make_key()) == BIG


# ----------------------------------------------------------------------------------------------------
# size cap and LRU eviction


def test_lru_eviction_under_a_cap(tmp_path):
    probe = DelegateCache(tmp_path / "probe", max_bytes=None)
    size = probe.store(make_key(device="a"), {"p": bytes(1000)}).stat().st_size
    c = DelegateCache(tmp_path / "c", max_bytes=3 * size + size // 2)  # room for three entries
    keys = {n: make_key(device=n) for n in "abcdef"}
    for n in "abc":
        assert c.store(keys[n], {"p": bytes(1000)}) is not None
    assert c.load(keys["a"]) is not None  # a is now the most recently used
    c.store(keys["d"], {"p": bytes(1000)})  # evicts b, the least recently used
    assert c.load(keys["b"]) is None
    assert all(c.load(keys[n]) is not None for n in "cad")  # use order now c, a, d
    c.store(keys["e"], {"p": bytes(1000)})  # evicts c
    assert c.load(keys["c"]) is None
    assert [e.description.split(" on ")[1].split(" ")[0] for e in c.entries()] == ["e", "d", "a"]
    assert c.stats.evictions == 2
    assert sum(p.stat().st_size for p in entry_files(c.dir)) <= c.max_bytes
    # a store bigger than the whole cap stores nothing and evicts nothing
    assert c.store(keys["f"], {"p": bytes(4 * size)}) is None
    assert len(entry_files(c.dir)) == 3


def test_lru_order_survives_a_new_cache_object(tmp_path):
    d = tmp_path / "c"
    c1 = DelegateCache(d, max_bytes=None)
    for n in "abc":
        c1.store(make_key(device=n), {"p": bytes(100)})
    c1.load(make_key(device="a"))
    size = entry_files(d)[0].stat().st_size
    c2 = DelegateCache(d, max_bytes=3 * size)
    c2.store(make_key(device="z"), {"p": bytes(100)})
    assert c2.load(make_key(device="b")) is None and c2.load(make_key(device="a")) is not None


# ----------------------------------------------------------------------------------------------------
# remove, clear, command line


def test_remove_and_clear_leave_foreign_files_alone(cache):
    cache.store(make_key(), SECTIONS)
    cache.store(make_key(backend="vulkan"), SECTIONS)
    cache.store(make_key(backend="opencl-x"), SECTIONS)
    (cache.dir / "README.txt").write_text("mine")
    stale = cache.dir / ".opencl-abc.lgc.123.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fresh = cache.dir / ".opencl-def.lgc.456.tmp"  # a writer in flight: not touched
    fresh.write_bytes(b"half")
    assert cache.remove(make_key()) is True and cache.remove(make_key()) is False
    cache.store(make_key(), SECTIONS)
    assert cache.clear("opencl") == 1
    assert {e.backend for e in cache.entries()} == {"vulkan", "opencl-x"}
    assert cache.clear() == 2
    assert sorted(p.name for p in cache.dir.iterdir()) == [fresh.name, "README.txt"]


def test_cli_functions(cache):
    cache.store(make_key(), SECTIONS)
    out = io.StringIO()
    assert cache_list(cache.dir, out=out) == 0
    lines = out.getvalue().splitlines()
    # one line per entry: model (its token when no file name is known), backend, precision, ops, size, age
    assert lines[0].split() == ["MODEL", "BACKEND", "PRECISION", "OPS", "SIZE", "LAST", "USED", "FILE"]
    assert len(lines) == 3 and lines[2].startswith("1 entries in ")
    row = lines[1].split()
    assert row[:2] == ["model", make_key().model_token[:13]] and row[2] == "opencl" and row[-3:-1] == ["s", "ago"]
    named = dataclasses.replace(make_key(), model_name="face.tflite")
    assert named == make_key()  # the name is a label, not part of the key
    cache.store(named, SECTIONS)
    out = io.StringIO()
    assert cache_list(cache.dir, out=out) == 0
    assert out.getvalue().splitlines()[1].split()[:2] == ["face.tflite", "opencl"]
    out = io.StringIO()
    assert cache_list(cache.dir, as_json=True, verify=True, out=out) == 0
    (e,) = json.loads(out.getvalue())
    assert e["valid"] and e["key_digest"] == make_key().digest and e["sections"]["binary"] == 7
    out = io.StringIO()
    assert cache_info(cache.dir, as_json=True, out=out) == 0
    info = json.loads(out.getvalue())
    assert info["entries"] == 1 and info["enabled"] and info["dir"] == str(cache.dir)
    out = io.StringIO()
    assert cache_info(cache.dir, out=out) == 0 and "entries:      1" in out.getvalue()
    out = io.StringIO()
    assert cache_clear(cache.dir, as_json=True, out=out) == 0
    assert json.loads(out.getvalue())["removed"] == 1 and entry_files(cache.dir) == []


def test_python_dash_m(cache):
    cache.store(make_key(), SECTIONS)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "core")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "litegpu.cache", *args, "--dir", str(cache.dir)],
                              capture_output=True, text=True, env=env, timeout=60)

    r = run("list", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["backend"] == "opencl"
    r = run("info")
    assert r.returncode == 0 and "caching:      on" in r.stdout
    r = run("clear")
    assert r.returncode == 0 and "removed 1 cache entry" in r.stdout
    cache.dir.chmod(0o777)
    r = run("clear", "--json")
    assert r.returncode == 1 and "writable" in json.loads(r.stdout)["error"]
    r = run("list")
    assert r.returncode == 0 and "caching is off" in r.stderr and "no cache entries" in r.stdout


def test_format_encode_rejects_bad_sections():
    with pytest.raises(TypeError):
        _format.encode({}, {"a": 1})
    e = _format.decode(_format.encode({"key": {}, "key_digest": ""}, {"a": b"1", "b": b""}))
    assert e.sections == {"a": b"1", "b": b""}


def test_load_as_views_gives_the_same_bytes_read_only_and_still_refuses_a_flipped_bit(cache, caplog):
    """DelegateCache.load(views=True) (a warm start's plan constants, no copy per section): each
    section equals what was stored, cannot be written, and a corrupted file is refused as before."""
    key = make_key()
    stored = {"plan": b'{"x":1}', "const/0/w": np.arange(1000, dtype=np.float32).tobytes(), "empty": b""}
    cache.store(key, stored)
    got = cache.load(key, views=True)
    assert set(got) == set(stored) and all(isinstance(v, memoryview) for v in got.values())
    assert {k: bytes(v) for k, v in got.items()} == stored
    assert np.array_equal(np.frombuffer(got["const/0/w"], np.float32), np.arange(1000, dtype=np.float32))
    with pytest.raises(TypeError):
        got["const/0/w"][0] = 1
    path = cache.path_for(key)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert cache.load(key, views=True) is None
    assert "checksum mismatch" in caplog.text


def test_export_import_moves_one_models_entries(tmp_path, caplog):
    """export_entries/import_entries (how litegpu.batch ships a prepared model to its actors): only the
    asked model's valid entries leave; they arrive byte-identical and load; a corrupt, renamed or
    misnamed file is refused with a warning; an entry already present is kept."""
    src = DelegateCache(tmp_path / "src")
    mine, other = make_key(), make_key(model_token="fh64:00000000000000ff")
    src.store(mine, {"a": b"payload"})
    src.store(other, {"a": b"another model"})
    files = src.export_entries(mine.model_token)
    assert list(files) == [src.path_for(mine).name]
    assert src.export_entries(mine.model_token, backend="vulkan") == {}
    dst = DelegateCache(tmp_path / "dst")
    assert dst.import_entries(files) == 1
    assert dst.load(mine) == {"a": b"payload"} and dst.load(other) is None
    assert dst.import_entries(files) == 0  # already there
    name, raw = next(iter(files.items()))
    flipped = bytearray(raw)
    flipped[40] ^= 1
    foreign = src.path_for(other).name
    fresh = DelegateCache(tmp_path / "fresh")
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert fresh.import_entries({name: bytes(flipped), foreign: raw, "../evil.lgc": raw}) == 0
    text = " ".join(warnings_of(caplog))
    assert "not an entry file name" in text and "holds another key" in text
    assert entry_files(tmp_path / "fresh") == []


def test_source_fingerprint_of_a_source_tree_is_memoised_by_stat_data(monkeypatch, tmp_path):
    """A source tree's hash is kept in the cache directory, keyed by its files' names, sizes, inodes
    and times: the next process reuses it; an edit (even one of the same size with the old
    modification time put back) is hashed again; a tree with a file changed in the last seconds is
    not memoised (file times come from a coarse clock)."""
    import json
    import os
    import time

    from litegpu.cache import _keys

    pkg = tmp_path / "src" / "fakememo_fp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    lgk = pkg / "k.lgk"
    lgk.write_text("x = 1")
    old = time.time_ns() - 60 * 10**9
    for f in (pkg / "__init__.py", lgk):
        os.utime(f, ns=(old, old))
    memo_dir = tmp_path / "cache"
    memo_dir.mkdir(mode=0o700)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))

    def fingerprint() -> str:
        monkeypatch.setattr(_keys, "_source_hashes", {})
        return _keys.source_fingerprint("fakememo_fp.x", memo_dir=memo_dir)

    racy = _keys._RACY_NS
    monkeypatch.setattr(_keys, "_RACY_NS", -1)  # files made just now count as settled (change times can't be set back)
    first = fingerprint()
    memo_file = memo_dir / "source-hashes.json"
    memo = json.loads(memo_file.read_text())
    (tree,) = [k for k in memo if k.endswith("fakememo_fp")]
    # the next process takes the memo (shown by a planted digest coming back)
    memo[tree][1] = "f" * 64
    memo_file.write_text(json.dumps(memo))
    assert fingerprint() != first
    memo_file.write_text("not json")  # a corrupt memo is ignored
    assert fingerprint() == first
    # the same size, the old modification time restored: the change time still tells
    monkeypatch.setattr(_keys, "_RACY_NS", racy)
    lgk.write_text("x = 2")
    os.utime(lgk, ns=(old, old))
    before = memo_file.read_text()
    second = fingerprint()
    assert second != first
    assert memo_file.read_text() == before  # changed just now: not memoised


def test_without_pyfarmhash_entries_carry_a_sha256_and_farmhash_ones_are_refused(cache, monkeypatch, caplog):
    """The checksum is farmhash's Fingerprint64 (format 3); where the pyfarmhash package is missing an
    entry is written with a SHA-256 (flag 1) and reads back, and an entry checksummed with farmhash cannot
    be verified, so it is refused with a warning that names the package (a miss, rewritten)."""
    from litegpu.cache import _format

    farm = make_key()
    cache.store(farm, SECTIONS)
    monkeypatch.setattr(_format, "_farmhash", None)
    sha = make_key(model_token="fh64:00000000000000ff")
    path = cache.store(sha, SECTIONS)
    raw = path.read_bytes()
    assert struct.unpack_from("<H", raw, 10)[0] == _format.FLAG_SHA256
    assert raw[-32:] == hashlib.sha256(raw[:-32]).digest()
    assert cache.load(sha) == SECTIONS
    with caplog.at_level(logging.WARNING, logger="litegpu.cache"):
        assert cache.load(farm) is None
    assert "pyfarmhash" in caplog.text
    monkeypatch.undo()
    assert cache.load(sha) == SECTIONS  # a SHA-256 entry reads with pyfarmhash installed too
