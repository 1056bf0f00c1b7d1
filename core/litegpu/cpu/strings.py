"""String and hashing ops: SKIP_GRAM, LSH_PROJECTION.

LSH_PROJECTION hashes, per seed of its hash tensor, the seed's 4 bytes followed by each input
row's bytes with FarmHash's 64-bit fingerprint (``farmhashna::Hash64``, written out below from
FarmHash's published algorithm), sums the signed fingerprints (weighted when a weight is
given) in double precision, and keeps the sign bit: one bit per seed (DENSE) or the bits of a
hash function packed into an integer offset by ``i * 2**num_bits`` (SPARSE).

SKIP_GRAM splits its one string on C ``isspace`` characters the way LiteRT does (the first
character never ends a word) and lists the n-grams whose consecutive words are at most
``max_skip_size`` words apart, in LiteRT's depth-first order, joined by single spaces; with
``include_all_ngrams`` the shorter n-grams come too.
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel

__all__: list[str] = []

_SPACE = frozenset(b" \t\n\v\f\r")


def _words(s: bytes) -> list[bytes]:
    words, prev = [], 0
    for i in range(1, len(s)):
        if s[i] in _SPACE:
            if i > prev and s[prev] not in _SPACE:
                words.append(s[prev:i])
            prev = i + 1
    if len(s) > prev:
        words.append(s[prev:])
    return words


def _skip_grams(words: list[bytes], n: int, skip: int, all_ngrams: bool) -> list[bytes]:
    out: list[bytes] = []
    if len(words) < n:
        return out
    stack = [0] * n
    top = 1
    while top >= 0:
        step = top < n and stack[top] + 1 < len(words) and (top == 0 or stack[top] - stack[top - 1] <= skip)
        if step:
            stack[top] += 1
            top += 1
            if top < n:
                stack[top] = stack[top - 1]
        else:
            if top > 0 and (top <= n if all_ngrams else top == n):
                out.append(b" ".join(words[stack[i]] for i in range(top)))
            top -= 1
    return out


@register_kernel("SKIP_GRAM", dtypes=("string",), versions=range(1, 2))
def skip_gram(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects one string input and one string output")
    if ctx.outputs[0].dtype != "string":
        raise ctx.fail(f"the output must be a string tensor, got {ctx.outputs[0].dtype}")
    n = int(ctx.options.get("ngram_size", 0) or 0)
    skip = int(ctx.options.get("max_skip_size", 0) or 0)
    all_ngrams = bool(ctx.options.get("include_all_ngrams", False))
    if n < 1:
        raise ctx.fail(f"ngram_size {n} must be at least 1")

    def run(inputs):
        a = inputs[0]
        if a.dtype == np.uint8:  # a string constant arrives as its raw buffer
            from .._reader import string_values

            a = string_values(a)
        if a.size < 1:
            raise ctx.fail("the input holds no string")
        first = a.reshape(-1)[0]
        s = first.encode() if isinstance(first, str) else bytes(first)
        grams = _skip_grams(_words(s), n, skip, all_ngrams)
        out = np.empty(len(grams), dtype=object)
        out[:] = grams
        return [out]

    return Prepared([None], run)


# ---- FarmHash Fingerprint64 (farmhashna::Hash64) -------------------------------------------------

_M64 = (1 << 64) - 1
_K0, _K1, _K2 = 0xC3A5C85C97CB3127, 0xB492B66FBE98F273, 0x9AE16A3B2F90404F
_KMUL = 0x9DDFEA08EB382D69


def _rot(v: int, s: int) -> int:  # rotate right
    return ((v >> s) | (v << (64 - s))) & _M64 if s else v


def _f64(b: bytes, i: int) -> int:
    return int.from_bytes(b[i:i + 8], "little")


def _f32(b: bytes, i: int) -> int:
    return int.from_bytes(b[i:i + 4], "little")


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int, mul: int = _KMUL) -> int:
    a = ((u ^ v) * mul) & _M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M64
    b ^= b >> 47
    return (b * mul) & _M64


def _weak32(w: int, x: int, y: int, z: int, a: int, b: int) -> tuple[int, int]:
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def _weak32_at(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    return _weak32(_f64(s, i), _f64(s, i + 8), _f64(s, i + 16), _f64(s, i + 24), a, b)


def fingerprint64(s: bytes) -> int:
    """FarmHash's Fingerprint64 of ``s`` (unsigned)."""
    n = len(s)
    if n <= 16:
        if n >= 8:
            mul = _K2 + n * 2
            a = (_f64(s, 0) + _K2) & _M64
            b = _f64(s, n - 8)
            c = (_rot(b, 37) * mul + a) & _M64
            d = ((_rot(a, 25) + b) * mul) & _M64
            return _len16(c, d, mul)
        if n >= 4:
            return _len16(n + (_f32(s, 0) << 3), _f32(s, n - 4), _K2 + n * 2)
        if n > 0:
            y = s[0] + (s[n >> 1] << 8)
            z = n + (s[n - 1] << 2)
            return (_shift_mix(((y * _K2) ^ (z * _K0)) & _M64) * _K2) & _M64
        return _K2
    if n <= 32:
        mul = _K2 + n * 2
        a = (_f64(s, 0) * _K1) & _M64
        b = _f64(s, 8)
        c = (_f64(s, n - 8) * mul) & _M64
        d = (_f64(s, n - 16) * _K2) & _M64
        return _len16((_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64,
                      (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)
    if n <= 64:
        mul = _K2 + n * 2
        a = (_f64(s, 0) * _K2) & _M64
        b = _f64(s, 8)
        c = (_f64(s, n - 8) * mul) & _M64
        d = (_f64(s, n - 16) * _K2) & _M64
        y = (_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64
        z = _len16(y, (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)
        e = (_f64(s, 16) * mul) & _M64
        f = _f64(s, 24)
        g = ((y + _f64(s, n - 32)) * mul) & _M64
        h = ((z + _f64(s, n - 24)) * mul) & _M64
        return _len16((_rot((e + f) & _M64, 43) + _rot(g, 30) + h) & _M64,
                      (e + _rot((f + a) & _M64, 18) + g) & _M64, mul)
    seed = 81
    x = seed
    y = (seed * _K1 + 113) & _M64
    z = (_shift_mix((y * _K2 + 113) & _M64) * _K2) & _M64
    v, w = (0, 0), (0, 0)
    x = (x * _K2 + _f64(s, 0)) & _M64
    end = ((n - 1) // 64) * 64
    i = 0
    while True:
        x = (_rot((x + y + v[0] + _f64(s, i + 8)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _f64(s, i + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y = (y + v[0] + _f64(s, i + 40)) & _M64
        z = (_rot((z + w[0]) & _M64, 33) * _K1) & _M64
        v = _weak32_at(s, i, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32_at(s, i + 32, (z + w[1]) & _M64, (y + _f64(s, i + 16)) & _M64)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = _K1 + ((z & 0xFF) << 1)
    i = n - 64
    w0 = (w[0] + ((n - 1) & 63)) & _M64
    v0 = (v[0] + w0) & _M64
    w0 = (w0 + v0) & _M64
    v, w = (v0, v[1]), (w0, w[1])
    x = (_rot((x + y + v[0] + _f64(s, i + 8)) & _M64, 37) * mul) & _M64
    y = (_rot((y + v[1] + _f64(s, i + 48)) & _M64, 42) * mul) & _M64
    x ^= (w[1] * 9) & _M64
    y = (y + v[0] * 9 + _f64(s, i + 40)) & _M64
    z = (_rot((z + w[0]) & _M64, 33) * mul) & _M64
    v = _weak32_at(s, i, (v[1] * mul) & _M64, (x + w[0]) & _M64)
    w = _weak32_at(s, i + 32, (z + w[1]) & _M64, (y + _f64(s, i + 16)) & _M64)
    z, x = x, z
    return _len16((_len16(v[0], w[0], mul) + _shift_mix(y) * _K0 + z) & _M64,
                  (_len16(v[1], w[1], mul) + x) & _M64, mul)


# ---- LSH_PROJECTION ------------------------------------------------------------------------------

_SPARSE, _DENSE = 1, 2


@register_kernel("LSH_PROJECTION", dtypes=("float32",), versions=range(1, 2))
def lsh_projection(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) not in (2, 3) or ctx.inputs[0] is None or ctx.inputs[1] is None:
        raise ctx.fail("needs the hash seeds, the input and an optional weight")
    kind = int(ctx.options.get("type", 0) or 0)
    if kind not in (_SPARSE, _DENSE):
        raise ctx.fail(f"projection type {kind} is neither SPARSE (1) nor DENSE (2)")
    if ctx.inputs[1].dtype in ("string", "resource", "variant"):
        raise ctx.fail(f"a {ctx.inputs[1].dtype} input has no fixed row bytes to hash")
    hs = ctx.inputs[0].shape

    def run(inputs):
        seeds = np.asarray(inputs[0], np.float32)
        x = np.ascontiguousarray(inputs[1])
        w = inputs[2] if len(inputs) > 2 else None
        if seeds.ndim != 2 or seeds.shape[1] > 32 or x.ndim < 1:
            raise ctx.fail(f"hash seeds {seeds.shape} must be (functions, bits <= 32), the input at least 1-D")
        if w is not None and (w.ndim != 1 or w.shape[0] != x.shape[0]):
            raise ctx.fail(f"weight {w.shape} must hold one value per input row ({x.shape[0]})")
        rows = [x[i].tobytes() for i in range(x.shape[0])]
        wv = None if w is None else [float(np.float32(v)) for v in w]

        def bit(seed: np.float32) -> int:
            prefix = np.float32(seed).tobytes()
            score = 0.0
            for i, r in enumerate(rows):
                h = fingerprint64(prefix + r)
                h = h - (1 << 64) if h >= 1 << 63 else h
                score += float(h) if wv is None else wv[i] * float(h)
            return 1 if score > 0 else 0

        n_hash, n_bits = seeds.shape
        bits = [[bit(seeds[i, j]) for j in range(n_bits)] for i in range(n_hash)]
        if kind == _DENSE:
            return [np.array([b for row in bits for b in row], np.int32)]
        out = []
        for i, row in enumerate(bits):
            sig = 0
            for b in row:
                sig = ((sig << 1) | b) & 0xFFFFFFFF
            out.append(((sig + i * (1 << n_bits)) + 2**31) % 2**32 - 2**31)
        return [np.array(out, np.int32)]

    shape = None
    if hs is not None and len(hs) == 2:
        shape = (int(hs[0]),) if kind == _SPARSE else (int(hs[0]) * int(hs[1]),)
    return Prepared([shape], run)
