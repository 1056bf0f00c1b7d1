"""HASHTABLE / HASHTABLE_IMPORT / HASHTABLE_FIND / HASHTABLE_SIZE (int64 -> string and string -> int64
tables) HASHTABLE_LOOKUP, SKIP_GRAM and LSH_PROJECTION, end to end through litegpu's Interpreter vs
LiteRT's builtin kernels.  String constants are written in TFLite's string-buffer format here
(the builder writes numeric constants only)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from litegpu.testing import ModelBuilder, run_litegpu
from opcheck import run_litert

_CODE = {"int64": 4, "string": 5}


def _string_buffer(strings: list[bytes]) -> bytes:
    n = len(strings)
    offsets, at = [], 4 * (n + 2)
    for s in strings:
        offsets.append(at)
        at += len(s)
    return struct.pack(f"<{n + 2}i", n, *offsets, at) + b"".join(strings)


def _const(b: ModelBuilder, name: str, v: np.ndarray) -> int:
    if v.dtype.kind in "SO":
        return b.tensor(name, v.shape, "string", data=_string_buffer([bytes(x) for x in v]))
    return b.const(name, v)


def _table_model(kd, vd, keys, values, query, default, query_is_input: bool) -> bytes:
    b = ModelBuilder()
    h = b.tensor("h", (1,), "resource")
    b.op("HASHTABLE", [], [h], table_id=3, key_dtype=_CODE[kd], value_dtype=_CODE[vd])
    b.op("HASHTABLE_IMPORT", [h, _const(b, "k", keys), _const(b, "v", values)], [])
    b.op("HASHTABLE_IMPORT", [h, _const(b, "k2", keys[:1]), _const(b, "v2", values[-1:])], [])  # ignored
    q = b.input("q", query.shape, kd) if query_is_input else _const(b, "q", query)
    y, s = b.tensor("y", query.shape, vd), b.tensor("s", (1,), "int64")
    b.op("HASHTABLE_FIND", [h, q, _const(b, "d", default)], [y])
    b.op("HASHTABLE_SIZE", [h], [s])
    b.output(y, s)
    return b.build()


def _same(data: bytes, feeds: list[np.ndarray]) -> None:
    want = run_litert(data, feeds, reference=False)
    got = run_litegpu(data, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and list(g.reshape(-1)) == list(w.reshape(-1))


def test_int64_to_string_table():
    query = np.array([7, 5, 2, 1, 9], np.int64)
    data = _table_model("int64", "string", np.array([5, 7, 5, 1], np.int64), np.array([b"a", b"bb", b"c", b"d"]),
                        query, np.array([b"?"]), query_is_input=True)
    _same(data, [query])


def test_string_to_int64_table():
    data = _table_model("string", "int64", np.array([b"x", b"y", b"x"]), np.array([1, 2, 3], np.int64),
                        np.array([b"y", b"z", b"x", b""]), np.array([-1], np.int64), query_is_input=False)
    _same(data, [])


@pytest.mark.parametrize("keys", [[1, 3, 5], [5, 1, 3]])
def test_hashtable_lookup_string_constants(keys):
    b = ModelBuilder()
    lookup = b.input("lookup", (4,), "int32")
    k = b.const("keys", np.array(keys, np.int32))
    v = _const(b, "values", np.array([b"one", b"three", b"five"]))
    y, hits = b.tensor("y", (4,), "string"), b.tensor("hits", (4,), "uint8")
    b.op("HASHTABLE_LOOKUP", [lookup, k, v], [y, hits])
    b.output(y, hits)
    _same(b.build(), [np.array([3, 4, 5, 1], np.int32)])


@pytest.mark.sweep(every=2, by=lambda p: p["text"])  # the rest run in `make test-all`
@pytest.mark.parametrize("text", [b"the quick brown fox jumps", b" a  b\\tc\\n d ", b"one", b"x y"])
@pytest.mark.parametrize("n, skip, all_ngrams", [(1, 0, False), (2, 1, False), (3, 2, True), (2, 0, True)])
def test_skip_gram(text, n, skip, all_ngrams):
    b = ModelBuilder()
    x = _const(b, "text", np.array([text.decode("unicode_escape").encode()]))
    y = b.tensor("y", (1,), "string")
    b.op("SKIP_GRAM", [x], [y], ngram_size=n, max_skip_size=skip, include_all_ngrams=all_ngrams)
    b.output(y)
    _same(b.build(), [])


@pytest.mark.sweep(every=2, by=lambda p: p["shape"])  # the rest run in `make test-all`
# rows of 1, 4, 16, 36, 80 and 160 bytes: every length branch of FarmHash's fingerprint
@pytest.mark.parametrize("shape, dtype", [((5,), "int8"), ((5,), "int32"), ((3, 4), "float32"), ((4, 9), "float32"),
                                          ((2, 20), "int32"), ((3, 40), "float32")])
@pytest.mark.parametrize("kind", [1, 2], ids=["SPARSE", "DENSE"])
def test_lsh_projection(shape, dtype, kind):
    from opcheck import Const, check

    r = np.random.default_rng(shape[-1])
    seeds = Const(r.uniform(-1, 1, (4, 6)).astype(np.float32))
    x = (r.uniform(-3, 3, shape) if dtype == "float32" else r.integers(-100, 100, shape)).astype(dtype)
    check("LSH_PROJECTION", [seeds, x], "int32", type=kind)
    check("LSH_PROJECTION", [seeds, x, r.uniform(-1, 1, shape[0]).astype(np.float32)], "int32", type=kind)
