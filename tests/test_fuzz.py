"""Fuzzing the reader: corrupt models must load or raise ModelError -- never crash, hang or allocate
without bound.  Deterministic (fixed seeds), a few thousand mutations, a few seconds."""

from __future__ import annotations

import collections
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from litegpu import ModelError, read_model
from litegpu.testing import ModelBuilder

TESTDATA = Path("/work/shared/models/litert-testdata")
MEDIAPIPE = Path("/tmp/dl/mpx/mediapipe/modules")

# Small LiteRT test models covering most of the schema: quantization, signatures, several subgraphs,
# control flow, sparsity, strings, metadata, custom ops, LSTM intermediates, dynamic shapes.
_SMALL = ["converter__add", "core__add_quantized_int8", "core__multi_signatures", "core__nested_while",
          "core__sparse_tensor", "core__call_once_mul", "core__with_metadata", "core__custom_lstm",
          "python__pc_conv", "core__dynamic_shapes", "java__string", "core__test_custom_node_with_init_data"]
_MUTATIONS_PER_SMALL_MODEL = 180
_MUTATIONS_BIG_MODEL = 150
_HANG_GUARD_S = 5.0


def _builder_model() -> bytes:
    """A model made here (independent of the shared test data), with per-channel quantization,
    a custom op, metadata, a signature and a WHILE over two more subgraphs."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2), "int8", quant=(0.1, 1))
    w = b.const("w", rng.integers(-9, 9, (3, 1, 1, 2)).astype(np.int8),
                quant=(np.array([0.1, 0.2, 0.3], np.float32), np.zeros(3, np.int64), 0))
    y = b.tensor("y", (1, 4, 4, 3), "int8", quant=(0.2, 0))
    b.op("CONV_2D", [x, w, -1], [y], padding=1, stride_w=1, stride_h=1)
    z = b.tensor("z", (1, 4, 4, 3), "int8", quant=(0.2, 0))
    b.custom_op("Foo", [y], [z], custom_options=b"\x00\x01")
    i = b.input("i", (), "int32")
    o = b.tensor("o", (), "int32")
    b.op("WHILE", [i], [o], cond_subgraph_index=1, body_subgraph_index=2)
    b.output(z, o)
    b.signature("run", {"x": x, "i": i}, {"z": z, "o": o})
    b.add_metadata("min_runtime_version", b"2.3.0")
    cond = b.add_subgraph("cond")
    ci = cond.input("i", (), "int32")
    lim = cond.const("lim", np.array(4, np.int32))
    co = cond.tensor("c", (), "bool")
    cond.op("LESS", [ci, lim], [co])
    cond.output(co)
    body = b.add_subgraph("body")
    bi = body.input("i", (), "int32")
    one = body.const("one", np.array(1, np.int32))
    bo = body.tensor("j", (), "int32")
    body.op("ADD", [bi, one], [bo])
    body.output(bo)
    return b.build()


def _models() -> list[tuple[str, bytes, int]]:
    models = [("builder", _builder_model(), _MUTATIONS_PER_SMALL_MODEL)]
    if TESTDATA.is_dir():
        models += [(n, (TESTDATA / f"{n}.bin").read_bytes(), _MUTATIONS_PER_SMALL_MODEL)
                   for n in _SMALL if (TESTDATA / f"{n}.bin").exists()]
    # Real converter outputs, independent of any builder: 120 KB, and 680 KB with sparse weights.
    for name, count in (("hand_recrop", _MUTATIONS_BIG_MODEL), ("face_detection_full_range_sparse", 70)):
        found = sorted(MEDIAPIPE.rglob(f"{name}.tflite")) if MEDIAPIPE.is_dir() else []
        if found:
            models.append((name, found[0].read_bytes(), count))
    return models


def _length_candidates(data: bytes) -> np.ndarray:
    """Aligned positions holding a small u32 n such that n 1..8-byte elements would fit right after
    it: these are (mostly) vector and string lengths."""
    words = np.frombuffer(data[: len(data) // 4 * 4], "<u4").astype(np.int64)
    pos = np.arange(words.size, dtype=np.int64) * 4
    ok = (words > 0) & (words < 4096) & (pos + 4 + words <= len(data))
    return pos[ok]


_HUGE = (2**31, 2**31 - 1, 2**32 - 1, 2**30, 0x40000000 + 1, 0x10000000)


def _mutate(data: bytes, rng: np.random.Generator, kind: str) -> bytes:
    buf = bytearray(data)
    n = len(buf)
    if kind == "flip":  # flip random bits in a few bytes
        for _ in range(int(rng.integers(1, 9))):
            buf[int(rng.integers(n))] ^= 1 << int(rng.integers(8))
    elif kind == "random":  # overwrite a short span with random bytes
        at, ln = int(rng.integers(n)), int(rng.integers(1, 17))
        buf[at:at + ln] = rng.integers(0, 256, min(ln, n - at), dtype=np.uint8).tobytes()
    elif kind == "truncate":
        del buf[int(rng.integers(0, n)):]
    elif kind == "insert":
        at = int(rng.integers(n))
        buf[at:at] = rng.integers(0, 256, int(rng.integers(1, 33)), dtype=np.uint8).tobytes()
    elif kind == "huge_length":  # a vector/string length word set to a huge value
        cands = _length_candidates(data)
        at = int(rng.choice(cands)) if cands.size else 4 * int(rng.integers(n // 4))
        struct.pack_into("<I", buf, at, int(rng.choice(_HUGE)))
    elif kind == "offset":  # nudge an aligned u32 (often an offset) by a small or large delta
        at = 4 * int(rng.integers(n // 4))
        old = struct.unpack_from("<I", buf, at)[0]
        delta = int(rng.choice([-8, -4, 4, 8, 1 << 16, -(1 << 16), 1 << 30]))
        struct.pack_into("<I", buf, at, (old + delta) % 2**32)
    elif kind == "zero":
        at, ln = int(rng.integers(n)), int(rng.integers(1, 65))
        buf[at:at + ln] = bytes(min(ln, n - at))
    else:  # pragma: no cover
        raise AssertionError(kind)
    return bytes(buf)


_KINDS = ("flip", "random", "truncate", "insert", "huge_length", "offset", "zero")


def _check_ir(m) -> None:
    """What a successful load promises: indices in range and constant data shaped as declared."""
    for sg in m.subgraphs:
        n = len(sg.tensors)
        for t in sg.tensors:
            if t.data is not None and t.sparsity is None and t.dtype != "string":
                assert t.data.shape == t.shape and not t.data.flags.writeable
        for op in sg.operators:
            assert all(-1 <= i < n for i in op.inputs + op.outputs + op.intermediates)
        assert all(0 <= i < n for i in sg.inputs + sg.outputs)


def test_fuzz_reader_never_crashes_or_hangs():
    models = _models()
    total = sum(k for _, _, k in models)
    assert total >= 2000
    outcomes: collections.Counter[str] = collections.Counter()
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    worst = (0.0, "")
    start = time.perf_counter()
    for mi, (name, data, count) in enumerate(models):
        read_model(data)  # every seed model is valid
        rng = np.random.default_rng(1000 + mi)
        for k in range(count):
            kind = _KINDS[k % len(_KINDS)]
            mutated = _mutate(data, rng, kind)
            t0 = time.perf_counter()
            try:
                m = read_model(mutated)
            except ModelError as e:
                result = "invalid-flatbuffer" if str(e).startswith("The model is not a valid") else "ModelError"
            except Exception as e:  # anything else is a bug
                pytest.fail(f"{name} mutation {k} ({kind}): {type(e).__name__}: {e}")
            else:
                result = "loaded"
                _check_ir(m)
            dt = time.perf_counter() - t0
            if dt > worst[0]:
                worst = (dt, f"{name} mutation {k} ({kind})")
            outcomes[result] += 1
            by_kind[kind][result] += 1
    elapsed = time.perf_counter() - start
    print(f"\nfuzz: {total} mutations of {len(models)} models in {elapsed:.1f} s; outcomes {dict(outcomes)}; "
          f"max load {worst[0] * 1000:.1f} ms ({worst[1]})")
    for kind, c in sorted(by_kind.items()):
        print(f"  {kind:12s} {dict(c)}")
    assert sum(outcomes.values()) == total
    assert worst[0] < _HANG_GUARD_S, f"a load took {worst[0]:.1f} s: {worst[1]}"
